// Turns tokens into the AST with jinja2's grammar and precedence (filters and `is` tests bind
// tighter than arithmetic; `not` looser than comparisons; `x if c else y` loosest). Anything the
// interpreter does not implement is refused here, with its name and line, rather than at render
// time, so that a template either parses into something amk can render or fails up front.
#pragma once

#include <string_view>

#include "template/ast.h"

namespace amk::tmpl {

// Throws TemplateError. `max_nesting` bounds both the parser's recursion and the depth of the
// tree it builds (so evaluating and destroying the tree stay shallow too).
Template parse_template(std::string_view source, int max_nesting);

}  // namespace amk::tmpl
