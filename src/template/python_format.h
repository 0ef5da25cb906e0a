// How Python turns values into text, because that is what a jinja2 template prints: str() for
// {{ x }} and ~, repr() inside lists and dicts, and json.dumps for transformers' tojson filter.
// Every function here recurses into lists and dicts at most `max_depth` levels and throws
// ValueError beyond, so a value that contains itself (a namespace holding itself) or one built
// thousands of levels deep cannot exhaust the stack.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include "template/value.h"

namespace amk::tmpl {

std::string python_str(const Value& v, int max_depth);
std::string python_repr(const Value& v, int max_depth);
std::string python_float_repr(double d);
std::string python_string_repr(const std::string& s);

struct JsonStyle {
  std::optional<int> indent;            // None: one line
  std::optional<std::string> item_separator, key_separator;  // json.dumps' defaults when unset
  bool sort_keys = false;
  bool ensure_ascii = false;            // transformers' tojson default
};
std::string python_json_dumps(const Value& v, const JsonStyle& style, int max_depth);

}  // namespace amk::tmpl
