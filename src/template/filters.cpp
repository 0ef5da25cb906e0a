// jinja2's filters (x | name(args)) with transformers' tojson. Where jinja2 returns a generator
// (select, map, unique, reverse), this returns a list: the same items for every use a template
// can make of them (loop, list, join, first).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "template/builtins.h"
#include "template/methods.h"
#include "template/operations.h"
#include "template/utf8.h"

namespace amk::tmpl {
namespace {

constexpr std::array<std::string_view, 40> kFilters = {
    "abs", "capitalize", "count", "d", "default", "e", "escape", "first", "float", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject",
    "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort",
    "string", "sum", "title", "tojson", "trim", "unique", "upper", "wordcount", "dictsort",
    "batch", "attr"};

// "a.b.0" as jinja2's attribute paths: each part an item lookup, digits as list indexes.
Value attribute_path(const Value& obj, const std::string& path, const TemplateLimits& limits) {
  Value v = obj;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits && part.size() < 18) v = get_item(v, Value::integer(std::stoll(part)), limits);
    else v = get_item(v, Value::string(part), limits);
    if (dot == std::string::npos) return v;
    if (v.is_undefined()) return v;
    start = dot + 1;
  }
}

// jinja2's do_int: a number truncates, a string parses as an int or else as a float.
Value to_int(const Value& v, const Value& fallback) {
  if (v.is_int()) return v;
  if (v.is_bool()) return Value::integer(v.as_bool());
  if (v.is_float()) {
    const double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value::integer(int64_t(d));
  }
  if (v.is_string()) {
    std::string s = python_strip(v.as_string(), std::nullopt, true, true);
    std::string digits;
    for (size_t i = 0; i < s.size(); ++i)
      if (!(s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
            std::isdigit(static_cast<unsigned char>(s[i + 1]))))
        digits += s[i];
    if (!digits.empty()) {
      char* end = nullptr;
      errno = 0;
      const long long i = std::strtoll(digits.c_str(), &end, 10);
      if (end == digits.c_str() + digits.size() && errno == 0 && digits.find_first_of(" \t\n") == std::string::npos)
        return Value::integer(i);
      const double d = std::strtod(digits.c_str(), &end);
      if (end == digits.c_str() + digits.size() && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return Value::integer(int64_t(d));
    }
  }
  return fallback;
}

Value to_float(const Value& v, const Value& fallback) {
  if (v.is_number()) return Value::real(v.numeric());
  if (v.is_string()) {
    const std::string s = python_strip(v.as_string(), std::nullopt, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && s.find_first_of("xXpP") == std::string::npos) return Value::real(d);
  }
  return fallback;
}

// The sort and unique filters compare strings case-insensitively unless told otherwise.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(ascii_lower(v.as_string()));
  return v;
}

std::vector<Value> select_items(std::string_view filter, const Value& subject, CallArgs& args,
                                bool by_attribute, bool keep_when, const TemplateLimits& limits) {
  // select(test, args...), selectattr(attribute, test, args...)
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty() || !args.positional[0].is_string())
      throw ValueError(fmt::format("{}() needs an attribute name", filter));
    attribute = args.positional[0].as_string();
    next = 1;
  }
  std::string test;
  if (args.positional.size() > next) {
    if (!args.positional[next].is_string()) throw ValueError(fmt::format("{}(): the test name must be a string", filter));
    test = args.positional[next].as_string();
    if (!is_known_test(test)) throw ValueError(fmt::format("{}(): no test named '{}'", filter, test));
    ++next;
  }
  if (!args.keyword.empty()) throw ValueError(fmt::format("{}() takes no keyword arguments", filter));
  std::vector<Value> out;
  for (const Value& item : iterate(subject)) {
    const Value v = by_attribute ? attribute_path(item, attribute, limits) : item;
    bool passes;
    if (test.empty()) {
      passes = v.truthy();
    } else {
      CallArgs test_args;
      test_args.positional.assign(args.positional.begin() + long(next), args.positional.end());
      passes = apply_test(test, v, test_args, limits);
    }
    if (passes == keep_when) out.push_back(item);
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// jinja2's title filter capitalises each word, words starting after whitespace or one of -({[<.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (const char c : s) {
    const bool separator = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
                           is_python_space(static_cast<unsigned char>(c));
    if (separator) {
      out += c;
      word_start = true;
    } else if (word_start) {
      out += (c >= 'a' && c <= 'z') ? char(c - 32) : c;
      word_start = false;
    } else {
      out += (c >= 'A' && c <= 'Z') ? char(c + 32) : c;
    }
  }
  return out;
}

Value round_value(const Value& v, int64_t precision, const std::string& method) {
  if (!v.is_number()) throw ValueError(fmt::format("round needs a number, not {}", type_name(v)));
  if (method != "common" && method != "ceil" && method != "floor")
    throw ValueError("round: method must be 'common', 'ceil' or 'floor'");
  if (method == "common" && (v.is_int() || v.is_bool()) && precision >= 0) return Value::integer(int64_t(v.numeric()));
  const double d = v.numeric();
  if (precision < -300 || precision > 300) return Value::real(d);
  if (method == "common") {
    // printf rounds the exact binary value to nearest, ties to even: what Python's round() does.
    char buf[512];
    if (precision >= 0) {
      std::snprintf(buf, sizeof buf, "%.*f", int(precision), d);
      return Value::real(std::strtod(buf, nullptr));
    }
    const double scale = std::pow(10.0, double(-precision));
    return Value::real(std::nearbyint(d / scale) * scale);
  }
  const double scale = std::pow(10.0, double(precision));
  return Value::real((method == "ceil" ? std::ceil(d * scale) : std::floor(d * scale)) / scale);
}

}  // namespace

bool is_known_filter(std::string_view name) {
  for (const auto f : kFilters)
    if (f == name && f != "dictsort" && f != "batch" && f != "attr") return true;
  return false;
}

Value apply_filter(std::string_view name, const Value& v, CallArgs& args, const TemplateLimits& limits) {
  const std::string fn = fmt::format("filter '{}'", name);
  const int depth = limits.max_value_depth;
  if (name == "length" || name == "count") {
    ArgumentReader a(fn, args, {});
    return Value::integer(int64_t(python_len(v)));
  }
  if (name == "default" || name == "d") {
    ArgumentReader a(fn, args, {"default_value", "boolean"});
    const bool use_default = v.is_undefined() || (a.boolean(1, false) && !v.truthy());
    return use_default ? (a.has(0) ? a.get(0) : Value::string("")) : v;
  }
  if (name == "trim") {
    ArgumentReader a(fn, args, {"chars"});
    std::optional<std::string> chars;
    if (a.has(0) && !a.get(0).is_none()) chars = a.string(0);
    return Value::string(python_strip(to_text(v, limits), chars, true, true));
  }
  if (name == "upper") { ArgumentReader a(fn, args, {}); return Value::string(ascii_upper(to_text(v, limits))); }
  if (name == "lower") { ArgumentReader a(fn, args, {}); return Value::string(ascii_lower(to_text(v, limits))); }
  if (name == "capitalize") { ArgumentReader a(fn, args, {}); return Value::string(python_capitalize(to_text(v, limits))); }
  if (name == "title") { ArgumentReader a(fn, args, {}); return Value::string(jinja_title(to_text(v, limits))); }
  if (name == "string") { ArgumentReader a(fn, args, {}); return Value::string(to_text(v, limits)); }
  if (name == "safe") { ArgumentReader a(fn, args, {}); return v; }
  if (name == "escape" || name == "e") { ArgumentReader a(fn, args, {}); return Value::string(html_escape(to_text(v, limits))); }
  if (name == "replace") {
    ArgumentReader a(fn, args, {"old", "new", "count"}, 2);
    return Value::string(python_replace(to_text(v, limits), a.string(0), a.string(1), a.integer(2, -1), limits));
  }
  if (name == "tojson") {
    // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    ArgumentReader a(fn, args, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonStyle style;
    style.ensure_ascii = a.boolean(0, false);
    if (a.has(1) && !a.get(1).is_none()) style.indent = int(std::clamp<int64_t>(a.integer(1, 0), -1, 1000));
    if (a.has(2) && !a.get(2).is_none()) {
      const Value& s = a.get(2);
      if (!s.is_list() || s.as_list().items.size() != 2 || !s.as_list().items[0].is_string() ||
          !s.as_list().items[1].is_string())
        throw ValueError("tojson: separators must be a pair of strings");
      style.item_separator = s.as_list().items[0].as_string();
      style.key_separator = s.as_list().items[1].as_string();
    }
    style.sort_keys = a.boolean(3, false);
    std::string out = python_json_dumps(v, style, depth);
    check_size(out.size(), limits, "tojson's output");
    return Value::string(std::move(out));
  }
  if (name == "join") {
    ArgumentReader a(fn, args, {"d", "attribute"});
    const std::string separator = a.has(0) ? to_text(a.get(0), limits) : "";
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += separator;
      first = false;
      out += to_text(a.has(1) ? attribute_path(item, to_text(a.get(1), limits), limits) : item, limits);
      check_size(out.size(), limits, "a string");
    }
    return Value::string(std::move(out));
  }
  if (name == "first" || name == "last") {
    ArgumentReader a(fn, args, {});
    const std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") { ArgumentReader a(fn, args, {}); return Value::list(iterate(v)); }
  if (name == "items") {
    ArgumentReader a(fn, args, {});
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) throw ValueError("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [key, value] : v.as_dict().entries) out.push_back(Value::list({Value::string(key), value}, true));
    return Value::list(std::move(out));
  }
  if (name == "reverse") {
    ArgumentReader a(fn, args, {});
    if (v.is_string()) {
      std::vector<Value> chars = iterate(v);
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->as_string();
      return Value::string(std::move(out));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "int") {
    ArgumentReader a(fn, args, {"default", "base"});
    if (a.has(1) && a.integer(1, 10) != 10) throw ValueError("filter 'int': only base 10 is supported");
    return to_int(v, a.has(0) ? a.get(0) : Value::integer(0));
  }
  if (name == "float") {
    ArgumentReader a(fn, args, {"default"});
    return to_float(v, a.has(0) ? a.get(0) : Value::real(0.0));
  }
  if (name == "abs") {
    ArgumentReader a(fn, args, {});
    if (v.is_float()) return Value::real(std::fabs(v.as_float()));
    if (v.is_int() || v.is_bool()) {
      const int64_t i = v.is_bool() ? v.as_bool() : v.as_int();
      return i < 0 ? negate(Value::integer(i)) : Value::integer(i);
    }
    if (v.is_undefined()) fail_undefined(v);
    throw ValueError(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
  }
  if (name == "round") {
    ArgumentReader a(fn, args, {"precision", "method"});
    return round_value(v, a.integer(0, 0), a.string(1, "common"));
  }
  if (name == "wordcount") {
    ArgumentReader a(fn, args, {});
    int64_t words = 0;
    bool in_word = false;
    for (const char c : to_text(v, limits)) {
      const bool word_char = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80;
      if (word_char && !in_word) ++words;
      in_word = word_char;
    }
    return Value::integer(words);
  }
  if (name == "indent") {
    ArgumentReader a(fn, args, {"width", "first", "blank"});
    const std::string indentation = a.get(0).is_string() ? a.get(0).as_string()
                                                         : std::string(size_t(std::clamp<int64_t>(a.integer(0, 4), 0, 1000)), ' ');
    std::string s = to_text(v, limits) + "\n";  // jinja2's quirk, so splitlines sees a last line
    const std::vector<std::string> lines = python_splitlines(s);
    std::string out;
    if (a.boolean(2, false)) {
      for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" + indentation : "") + lines[i];
    } else {
      out = lines.empty() ? "" : lines[0];
      for (size_t i = 1; i < lines.size(); ++i) out += "\n" + (lines[i].empty() ? "" : indentation + lines[i]);
    }
    if (a.boolean(1, false)) out = indentation + out;
    check_size(out.size(), limits, "a string");
    return Value::string(std::move(out));
  }
  if (name == "select" || name == "reject")
    return Value::list(select_items(name, v, args, false, name == "select", limits));
  if (name == "selectattr" || name == "rejectattr")
    return Value::list(select_items(name, v, args, true, name == "selectattr", limits));
  if (name == "map") {
    std::vector<Value> out;
    const Value* attribute = nullptr;
    const Value* fallback = nullptr;
    for (const auto& [key, value] : args.keyword) {
      if (key == "attribute") attribute = &value;
      else if (key == "default") fallback = &value;
      else throw ValueError(fmt::format("filter 'map' got an unexpected keyword argument '{}'", key));
    }
    if (attribute) {
      if (!args.positional.empty()) throw ValueError("filter 'map' takes either a filter name or attribute=");
      const std::string path = to_text(*attribute, limits);
      for (const Value& item : iterate(v)) {
        Value x = attribute_path(item, path, limits);
        out.push_back(x.is_undefined() && fallback ? *fallback : x);
      }
      return Value::list(std::move(out));
    }
    if (args.positional.empty() || !args.positional[0].is_string())
      throw ValueError("filter 'map' needs a filter name or attribute=");
    const std::string filter = args.positional[0].as_string();
    if (!is_known_filter(filter) || filter == "map") throw ValueError(fmt::format("map(): no filter named '{}'", filter));
    for (const Value& item : iterate(v)) {
      CallArgs inner;
      inner.positional.assign(args.positional.begin() + 1, args.positional.end());
      out.push_back(apply_filter(filter, item, inner, limits));
    }
    return Value::list(std::move(out));
  }
  if (name == "sort" || name == "unique" || name == "max" || name == "min") {
    const bool is_sort = name == "sort";
    ArgumentReader a(fn, args, is_sort ? std::vector<std::string_view>{"reverse", "case_sensitive", "attribute"}
                                       : std::vector<std::string_view>{"case_sensitive", "attribute"});
    const bool reverse = is_sort && a.boolean(0, false);
    const bool case_sensitive = a.boolean(is_sort ? 1 : 0, false);
    const size_t attr_index = is_sort ? 2 : 1;
    const std::optional<std::string> attribute =
        a.has(attr_index) && !a.get(attr_index).is_none() ? std::optional(to_text(a.get(attr_index), limits)) : std::nullopt;
    std::vector<Value> items = iterate(v);
    auto key = [&](const Value& item) {
      return sort_key(attribute ? attribute_path(item, *attribute, limits) : item, case_sensitive);
    };
    if (name == "unique") {
      std::vector<Value> out, seen;
      for (const Value& item : items) {
        const Value k = key(item);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return python_equals(s, k, depth); })) {
          seen.push_back(k);
          out.push_back(item);
        }
      }
      return Value::list(std::move(out));
    }
    if (name == "max" || name == "min") {
      if (items.empty()) return Value::undefined(fmt::format("No aggregated item, sequence was empty."));
      size_t best = 0;
      for (size_t i = 1; i < items.size(); ++i)
        if (python_order(name == "max" ? ">" : "<", key(items[i]), key(items[best]), depth)) best = i;
      return items[best];
    }
    std::vector<std::pair<Value, Value>> keyed;
    for (const Value& item : items) keyed.emplace_back(key(item), item);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
      return reverse ? python_order("<", y.first, x.first, depth) : python_order("<", x.first, y.first, depth);
    });
    std::vector<Value> out;
    for (auto& [k, item] : keyed) out.push_back(std::move(item));
    return Value::list(std::move(out));
  }
  if (name == "sum") {
    ArgumentReader a(fn, args, {"attribute", "start"});
    Value total = a.has(1) ? a.get(1) : Value::integer(0);
    for (const Value& item : iterate(v))
      total = binary_operation("+", total, a.has(0) ? attribute_path(item, to_text(a.get(0), limits), limits) : item, limits);
    return total;
  }
  throw ValueError(fmt::format("unsupported filter '{}'", name));
}

}  // namespace amk::tmpl
