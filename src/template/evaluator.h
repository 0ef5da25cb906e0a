// Runs a parsed template against its variables and produces the text, with jinja2's scoping:
// a for loop's body gets a fresh scope each iteration (a {% set %} there does not survive the
// iteration, which is why templates use namespace()), macros see the template's top-level
// variables and their own arguments, and `if` opens no scope.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "amk/chat_template.h"
#include "template/ast.h"

namespace amk::tmpl {

// Refuses filters and tests the interpreter does not have, before anything renders (jinja2
// also refuses unknown ones when it compiles). Throws TemplateError naming the first one.
void check_names(const Template& tmpl);

// Throws TemplateError.
std::string render_template(const Template& tmpl, const nlohmann::ordered_json& variables,
                            const TemplateLimits& limits);

}  // namespace amk::tmpl
