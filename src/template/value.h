// The values a chat template computes with: Python's object model as jinja2 sees it, cut down to
// what templates use. Undefined is a value of its own (not None) because jinja2 keeps them apart:
// a missing key prints as nothing and fails `is defined`, while None prints "None".
//
// Lists and dicts are immutable and shared (ImmutableSandboxedEnvironment forbids mutating them),
// so copying a Value is cheap; a namespace() is the one mutable container, as in jinja2.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace amk::tmpl {

class Value;

// A runtime error without a line: the evaluator adds the line of the expression it was
// evaluating and rethrows it as a TemplateError.
class ValueError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Lists and dicts nest at most this deep however they are built (a namespace updated in a loop
// can wrap a list once per iteration); destroying a value recurses once per level, so the cap
// keeps that recursion off the end of the stack. A namespace counts as one level: the evaluator
// keeps every namespace alive until the render ends and empties them one by one.
inline constexpr int kMaxValueNesting = 512;

// A missing variable, key or attribute. `message` is what jinja2 raises when the value is used in
// a way Undefined refuses (arithmetic, attribute access, calls): "'x' is undefined".
struct Undefined {
  std::string message;
};
struct None {};

struct ListValue {
  std::vector<Value> items;
  bool is_tuple = false;  // only changes how it prints: (1, 2) rather than [1, 2]
  int depth = 1;          // set by Value::list
};

// Insertion-ordered like a Python dict. Keys are strings: JSON only has string keys, and a
// template's dict literal with another key type is refused where it is built.
struct DictValue {
  std::vector<std::pair<std::string, Value>> entries;
  int depth = 1;  // set by Value::dict
  const Value* find(std::string_view key) const;
};

// namespace(): the only object a template can change (`{% set ns.x = 1 %}`).
struct NamespaceValue {
  DictValue attributes;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A function, macro, or bound method (`'abc'.upper`). `name` appears in error messages.
struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> call;
};

class Value {
 public:
  using Storage = std::variant<Undefined, None, bool, int64_t, double, std::string,
                               std::shared_ptr<const ListValue>, std::shared_ptr<const DictValue>,
                               std::shared_ptr<NamespaceValue>, std::shared_ptr<const Callable>>;

  Value() : storage_(Undefined{}) {}
  Value(Storage s) : storage_(std::move(s)) {}  // NOLINT: a Value is any of these

  static Value undefined(std::string message) { return Value(Undefined{std::move(message)}); }
  static Value none() { return Value(None{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value real(double d) { return Value(d); }
  static Value string(std::string s) { return Value(std::move(s)); }
  // Throw ValueError beyond kMaxValueNesting.
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(DictValue dict);
  static Value function(std::string name, std::function<Value(CallArgs&)> call);

  bool is_undefined() const { return std::holds_alternative<Undefined>(storage_); }
  bool is_none() const { return std::holds_alternative<None>(storage_); }
  bool is_bool() const { return std::holds_alternative<bool>(storage_); }
  bool is_int() const { return std::holds_alternative<int64_t>(storage_); }
  bool is_float() const { return std::holds_alternative<double>(storage_); }
  // Python's numbers include bool (True + 1 == 2).
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(storage_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<const ListValue>>(storage_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<const DictValue>>(storage_); }
  bool is_namespace() const { return std::holds_alternative<std::shared_ptr<NamespaceValue>>(storage_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<const Callable>>(storage_); }

  // Levels of list/dict nesting: 0 for scalars and namespaces.
  int nesting() const;

  bool as_bool() const { return std::get<bool>(storage_); }
  int64_t as_int() const { return std::get<int64_t>(storage_); }
  double as_float() const { return std::get<double>(storage_); }
  const std::string& as_string() const { return std::get<std::string>(storage_); }
  const ListValue& as_list() const { return *std::get<std::shared_ptr<const ListValue>>(storage_); }
  const DictValue& as_dict() const { return *std::get<std::shared_ptr<const DictValue>>(storage_); }
  NamespaceValue& as_namespace() const { return *std::get<std::shared_ptr<NamespaceValue>>(storage_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(storage_); }
  const Undefined& as_undefined() const { return std::get<Undefined>(storage_); }
  const Storage& storage() const { return storage_; }

  // Python's bool(x): empty containers, 0, "", None and Undefined are false.
  bool truthy() const;
  // A number as a double (bool and int included); only valid when is_number().
  double numeric() const;

 private:
  Storage storage_;
};

// Python's type name, for error messages that match what jinja2 users see ("'int' object ...").
std::string_view type_name(const Value& v);

// JSON in, for the render context. Nesting is bounded by the caller's JSON parser; the conversion
// refuses more than `max_depth` levels so it cannot exhaust the stack on a hand-built document.
Value from_json(const nlohmann::ordered_json& j, int max_depth = 256);

}  // namespace amk::tmpl
