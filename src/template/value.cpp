#include "template/value.h"

#include <fmt/format.h>

#include <algorithm>

#include "amk/chat_template.h"

namespace amk::tmpl {

const Value* DictValue::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

namespace {

int checked_nesting(int deepest_child) {
  if (deepest_child + 1 > kMaxValueNesting)
    throw ValueError(fmt::format("a list or dict nested deeper than {} levels", kMaxValueNesting));
  return deepest_child + 1;
}

}  // namespace

int Value::nesting() const {
  if (is_list()) return as_list().depth;
  if (is_dict()) return as_dict().depth;
  return 0;
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  int deepest = 0;
  for (const Value& item : items) deepest = std::max(deepest, item.nesting());
  const int depth = checked_nesting(deepest);
  return Value(std::make_shared<const ListValue>(ListValue{std::move(items), is_tuple, depth}));
}

Value Value::dict(DictValue dict) {
  int deepest = 0;
  for (const auto& entry : dict.entries) deepest = std::max(deepest, entry.second.nesting());
  dict.depth = checked_nesting(deepest);
  return Value(std::make_shared<const DictValue>(std::move(dict)));
}

Value Value::function(std::string name, std::function<Value(CallArgs&)> call) {
  return Value(std::make_shared<const Callable>(Callable{std::move(name), std::move(call)}));
}

bool Value::truthy() const {
  switch (storage_.index()) {
    case 0: case 1: return false;                      // Undefined, None
    case 2: return as_bool();
    case 3: return as_int() != 0;
    case 4: return as_float() != 0.0;
    case 5: return !as_string().empty();
    case 6: return !as_list().items.empty();
    case 7: return !as_dict().entries.empty();
    default: return true;                              // namespaces and callables
  }
}

double Value::numeric() const {
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  if (is_int()) return double(as_int());
  return as_float();
}

std::string_view type_name(const Value& v) {
  switch (v.storage().index()) {
    case 0: return "Undefined";
    case 1: return "NoneType";
    case 2: return "bool";
    case 3: return "int";
    case 4: return "float";
    case 5: return "str";
    case 6: return v.as_list().is_tuple ? "tuple" : "list";
    case 7: return "dict";
    case 8: return "Namespace";
    default: return "function";
  }
}

Value from_json(const nlohmann::ordered_json& j, int max_depth) {
  if (max_depth <= 0) throw TemplateError("template variables nested too deeply", 0);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > uint64_t(INT64_MAX))
        throw TemplateError(fmt::format("integer {} in the template variables is beyond 64 bits", u), 0);
      return Value::integer(int64_t(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json(item, max_depth - 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictValue dict;
      dict.entries.reserve(j.size());
      for (const auto& [key, item] : j.items()) dict.entries.emplace_back(key, from_json(item, max_depth - 1));
      return Value::dict(std::move(dict));
    }
    default:
      throw TemplateError("template variables hold binary or discarded JSON", 0);
  }
}

}  // namespace amk::tmpl
