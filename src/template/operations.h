// Python's semantics for what templates do to values: operators, comparisons, `in`, indexing
// and slicing, attribute lookup as jinja2 does it (attribute first, then item), iteration and
// len(). Errors are ValueErrors worded like Python's, which the evaluator turns into
// TemplateErrors with a line. Results that would exceed the limits (a string or list longer
// than max_output_bytes, nesting deeper than max_value_depth) are refused, not built.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "amk/chat_template.h"
#include "template/python_format.h"
#include "template/value.h"

namespace amk::tmpl {

// Using an Undefined in a way jinja2's Undefined refuses raises its message.
[[noreturn]] void fail_undefined(const Value& v);

Value binary_operation(std::string_view op, const Value& a, const Value& b, const TemplateLimits& limits);
Value negate(const Value& v);
bool python_equals(const Value& a, const Value& b, int max_depth);
// a OP b for OP in < <= > >=.
bool python_order(std::string_view op, const Value& a, const Value& b, int max_depth);
bool python_contains(const Value& container, const Value& item, int max_depth);

// obj[key] as jinja2's getitem (item first, then attribute for string keys) and obj.name as its
// getattr (attribute first: a dict's "items" is the method, then the key).
Value get_item(const Value& obj, const Value& key, const TemplateLimits& limits);
Value get_attribute(const Value& obj, std::string_view name, const TemplateLimits& limits);
// obj[start:stop:step]; absent parts are Undefined values.
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// The items a for loop, list() or join sees: a list's items, a dict's keys, a string's
// characters; Undefined is empty. Anything else is "not iterable".
std::vector<Value> iterate(const Value& v);
size_t python_len(const Value& v);

// str(v), capped at the limits.
std::string to_text(const Value& v, const TemplateLimits& limits);
void check_size(size_t size, const TemplateLimits& limits, std::string_view what);

// Python's str.isspace() for one code point.
bool is_python_space(uint32_t cp);

}  // namespace amk::tmpl
