// The functions every template can call: jinja2's range, namespace and dict, and transformers'
// raise_exception and strftime_now.
#include <fmt/format.h>

#include <ctime>

#include "template/builtins.h"
#include "template/methods.h"
#include "template/operations.h"

namespace amk::tmpl {
namespace {

// jinja2's sandbox refuses ranges longer than this (MAX_RANGE), so templates cannot allocate
// without bound through range().
constexpr int64_t kMaxRange = 100000;

Value range(CallArgs& args) {
  if (!args.keyword.empty()) throw ValueError("range() takes no keyword arguments");
  if (args.positional.empty() || args.positional.size() > 3)
    throw ValueError(fmt::format("range expected 1 to 3 arguments, got {}", args.positional.size()));
  int64_t parts[3] = {0, 0, 1};
  for (size_t i = 0; i < args.positional.size(); ++i) {
    const Value& v = args.positional[i];
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_int() && !v.is_bool())
      throw ValueError(fmt::format("'{}' object cannot be interpreted as an integer", type_name(v)));
    parts[args.positional.size() == 1 ? 1 : i] = v.is_bool() ? v.as_bool() : v.as_int();
  }
  const int64_t start = parts[0], stop = parts[1], step = parts[2];
  if (step == 0) throw ValueError("range() arg 3 must not be zero");
  // The length in unsigned arithmetic: the distance between two int64s always fits in 64 bits.
  const bool empty = step > 0 ? stop <= start : start <= stop;
  const uint64_t span = step > 0 ? uint64_t(stop) - uint64_t(start) : uint64_t(start) - uint64_t(stop);
  const uint64_t magnitude = step > 0 ? uint64_t(step) : uint64_t(0) - uint64_t(step);
  const uint64_t length = empty ? 0 : (span - 1) / magnitude + 1;
  if (length > uint64_t(kMaxRange))
    throw ValueError(fmt::format("range too big: {} items, the sandbox's limit is {}", int64_t(length), kMaxRange));
  std::vector<Value> items;
  for (int64_t i = 0; i < int64_t(length); ++i) items.push_back(Value::integer(start + i * step));
  return Value::list(std::move(items));
}

// namespace(mapping?, key=value...) and dict(mapping?, key=value...).
DictValue keyword_dict(std::string_view function, CallArgs& args) {
  DictValue dict;
  auto put = [&](const std::string& key, const Value& value) {
    for (auto& entry : dict.entries)
      if (entry.first == key) {
        entry.second = value;
        return;
      }
    dict.entries.emplace_back(key, value);
  };
  if (args.positional.size() > 1) throw ValueError(fmt::format("{}() takes at most one positional argument", function));
  if (!args.positional.empty()) {
    const Value& m = args.positional[0];
    if (m.is_dict()) {
      for (const auto& [key, value] : m.as_dict().entries) put(key, value);
    } else if (m.is_namespace()) {
      for (const auto& [key, value] : m.as_namespace().attributes.entries) put(key, value);
    } else {
      throw ValueError(fmt::format("{}() expects a mapping, not {}", function, type_name(m)));
    }
  }
  for (const auto& [key, value] : args.keyword) put(key, value);
  return dict;
}

}  // namespace

DictValue global_functions(const std::function<void(const std::shared_ptr<NamespaceValue>&)>& on_namespace) {
  DictValue globals;
  globals.entries.emplace_back("range", Value::function("range", range));
  globals.entries.emplace_back("namespace", Value::function("namespace", [on_namespace](CallArgs& args) {
    auto ns = std::make_shared<NamespaceValue>();
    ns->attributes = keyword_dict("namespace", args);
    on_namespace(ns);
    return Value(ns);
  }));
  globals.entries.emplace_back("dict", Value::function("dict", [](CallArgs& args) {
    return Value::dict(keyword_dict("dict", args));
  }));
  globals.entries.emplace_back("raise_exception", Value::function("raise_exception", [](CallArgs& args) -> Value {
    ArgumentReader a("raise_exception", args, {"message"});
    throw ValueError("raise_exception(): " + python_str(a.get(0), 8));
  }));
  globals.entries.emplace_back("strftime_now", Value::function("strftime_now", [](CallArgs& args) {
    ArgumentReader a("strftime_now", args, {"format"}, 1);
    const std::string format = a.string(0);
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    std::string out(256 + format.size() * 16, '\0');
    const size_t n = format.empty() ? 0 : std::strftime(out.data(), out.size(), format.c_str(), &local);
    if (n == 0 && !format.empty()) throw ValueError("strftime_now(): the format gives no output or is too long");
    out.resize(n);
    return Value::string(std::move(out));
  }));
  return globals;
}

}  // namespace amk::tmpl
