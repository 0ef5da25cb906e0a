// The methods templates call on strings and dicts ('x'.strip(), message.content.split('</think>'),
// d.items()), as bound callables. ImmutableSandboxedEnvironment forbids the mutating ones
// (list.append, dict.update), so there are none here either.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "amk/chat_template.h"
#include "template/value.h"

namespace amk::tmpl {

// The bound method, or nullopt when the type has no method of that name.
std::optional<Value> string_method(const std::string& self, std::string_view name, const TemplateLimits& limits);
std::optional<Value> dict_method(const Value& self, std::string_view name);

// Shared with the filters (trim, replace, capitalize, title).
std::string python_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);
std::string python_replace(const std::string& s, const std::string& old, const std::string& replacement,
                           int64_t count, const TemplateLimits& limits);
std::string ascii_upper(std::string s);
std::string ascii_lower(std::string s);
std::string python_capitalize(const std::string& s);
std::vector<std::string> python_splitlines(const std::string& s);

// Reads a call's arguments by position or keyword against a parameter list, as Python binds
// them, and refuses unknown, duplicate or missing ones with a message that names the function.
class ArgumentReader {
 public:
  ArgumentReader(std::string_view function, CallArgs& args, std::vector<std::string_view> params,
                 size_t required = 0);
  bool has(size_t index) const { return bound_[index] != nullptr; }
  const Value& get(size_t index) const;  // Undefined when absent
  std::string string(size_t index, std::string_view fallback = "") const;
  int64_t integer(size_t index, int64_t fallback) const;
  bool boolean(size_t index, bool fallback) const;

 private:
  std::string function_;
  std::vector<std::string_view> params_;
  std::vector<const Value*> bound_;
};

}  // namespace amk::tmpl
