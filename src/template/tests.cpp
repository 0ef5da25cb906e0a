// jinja2's tests: the `x is NAME` predicates.
#include <fmt/format.h>

#include <array>

#include "template/builtins.h"
#include "template/methods.h"
#include "template/operations.h"

namespace amk::tmpl {
namespace {

constexpr std::array<std::string_view, 34> kTests = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number",
    "string", "mapping", "iterable", "sequence", "callable", "sameas", "equalto", "eq", "==",
    "ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in", "odd", "even", "divisibleby",
    "lower", "upper"};

}  // namespace

bool is_known_test(std::string_view name) {
  for (const auto t : kTests)
    if (t == name) return true;
  return false;
}

bool apply_test(std::string_view name, const Value& v, CallArgs& args, const TemplateLimits& limits) {
  const std::string fn = fmt::format("test '{}'", name);
  if (name == "defined" || name == "undefined" || name == "none" || name == "boolean" ||
      name == "false" || name == "true" || name == "integer" || name == "float" ||
      name == "number" || name == "string" || name == "mapping" || name == "iterable" ||
      name == "sequence" || name == "callable" || name == "odd" || name == "even" ||
      name == "lower" || name == "upper") {
    ArgumentReader none(fn, args, {});
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "boolean") return v.is_bool();
    if (name == "false") return v.is_bool() && !v.as_bool();
    if (name == "true") return v.is_bool() && v.as_bool();
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_float();
    if (name == "number") return v.is_number();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict();
    // Undefined iterates (as nothing) and has a length, so jinja2 counts it as both.
    if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
    if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
    if (name == "callable") return v.is_callable();
    if (name == "odd" || name == "even") {
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_int() && !v.is_bool()) throw ValueError(fmt::format("test '{}' needs an integer, not {}", name, type_name(v)));
      const int64_t i = v.is_bool() ? v.as_bool() : v.as_int();
      return (i % 2 != 0) == (name == "odd");
    }
    const std::string s = to_text(v, limits);
    bool cased = false;
    for (const char c : s) {
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        cased = true;
        if (name == "lower" ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z')) return false;
      }
    }
    return cased;
  }
  ArgumentReader reader(fn, args, {"other"}, 1);
  const Value& other = reader.get(0);
  if (name == "equalto" || name == "eq" || name == "==") return python_equals(v, other, limits.max_value_depth);
  if (name == "ne" || name == "!=") return !python_equals(v, other, limits.max_value_depth);
  if (name == "lt" || name == "<") return python_order("<", v, other, limits.max_value_depth);
  if (name == "le" || name == "<=") return python_order("<=", v, other, limits.max_value_depth);
  if (name == "gt" || name == ">") return python_order(">", v, other, limits.max_value_depth);
  if (name == "ge" || name == ">=") return python_order(">=", v, other, limits.max_value_depth);
  if (name == "in") return python_contains(other, v, limits.max_value_depth);
  if (name == "sameas") {
    // Identity: only None and the booleans are shared objects that templates compare this way.
    if (v.is_none() || other.is_none()) return v.is_none() && other.is_none();
    if (v.is_bool() || other.is_bool()) return v.is_bool() && other.is_bool() && v.as_bool() == other.as_bool();
    if (v.is_list() && other.is_list()) return &v.as_list() == &other.as_list();
    if (v.is_dict() && other.is_dict()) return &v.as_dict() == &other.as_dict();
    return false;
  }
  if (name == "divisibleby") {
    if (v.is_undefined()) fail_undefined(v);
    if (v.is_int() && other.is_int()) {
      if (other.as_int() == 0) throw ValueError("integer division or modulo by zero");
      return other.as_int() == -1 || v.as_int() % other.as_int() == 0;
    }
    throw ValueError("test 'divisibleby' needs integers");
  }
  throw ValueError(fmt::format("no test named '{}'", name));
}

}  // namespace amk::tmpl
