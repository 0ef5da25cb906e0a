#include "template/methods.h"

#include <fmt/format.h>

#include "template/operations.h"
#include "template/utf8.h"

namespace amk::tmpl {
namespace {

bool is_ascii_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_ascii_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_ascii_alpha(char c) { return is_ascii_upper(c) || is_ascii_lower(c); }

// Splits on runs of whitespace, ignoring it at the ends (str.split() without a separator).
std::vector<std::string> split_whitespace(const std::string& s, int64_t maxsplit) {
  std::vector<std::string> parts;
  size_t pos = 0;
  auto skip_space = [&] {
    while (pos < s.size()) {
      size_t next = pos;
      if (!is_python_space(decode_utf8(s, next))) break;
      pos = next;
    }
  };
  skip_space();
  while (pos < s.size()) {
    if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
      size_t end = s.size();
      // the remainder keeps its inner whitespace but loses the trailing run
      std::string rest = s.substr(pos, end - pos);
      parts.push_back(python_strip(rest, std::nullopt, false, true));
      return parts;
    }
    const size_t start = pos;
    while (pos < s.size()) {
      size_t next = pos;
      if (is_python_space(decode_utf8(s, next))) break;
      pos = next;
    }
    parts.push_back(s.substr(start, pos - start));
    skip_space();
  }
  return parts;
}

std::vector<std::string> split_on(const std::string& s, const std::string& sep, int64_t maxsplit) {
  if (sep.empty()) throw ValueError("empty separator");
  std::vector<std::string> parts;
  size_t start = 0;
  while (maxsplit < 0 || int64_t(parts.size()) < maxsplit) {
    const size_t at = s.find(sep, start);
    if (at == std::string::npos) break;
    parts.push_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  parts.push_back(s.substr(start));
  return parts;
}

Value string_list(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.push_back(Value::string(p));
  return Value::list(std::move(items));
}

// The prefix argument of startswith/endswith: a string or a tuple of strings.
std::vector<std::string> affixes(const Value& v, std::string_view method) {
  if (v.is_string()) return {v.as_string()};
  if (v.is_list() && v.as_list().is_tuple) {
    std::vector<std::string> out;
    for (const Value& item : v.as_list().items) {
      if (!item.is_string())
        throw ValueError(fmt::format("tuple for {} must only contain str, not {}", method, type_name(item)));
      out.push_back(item.as_string());
    }
    return out;
  }
  throw ValueError(fmt::format("{} first arg must be str or a tuple of str, not {}", method, type_name(v)));
}

// str.title(): a letter after a letter is lowered, any other letter raised (ASCII letters; other
// characters pass through and count as non-letters).
std::string python_title(const std::string& s) {
  std::string out = s;
  bool previous_cased = false;
  for (char& c : out) {
    if (is_ascii_alpha(c)) {
      c = previous_cased ? char(std::tolower(static_cast<unsigned char>(c))) : char(std::toupper(static_cast<unsigned char>(c)));
      previous_cased = true;
    } else {
      previous_cased = false;
    }
  }
  return out;
}

Value method(std::string name, std::function<Value(CallArgs&)> call) {
  return Value::function(std::move(name), std::move(call));
}

}  // namespace

std::string ascii_upper(std::string s) {
  for (char& c : s)
    if (is_ascii_lower(c)) c = char(c - 32);
  return s;
}

std::string ascii_lower(std::string s) {
  for (char& c : s)
    if (is_ascii_upper(c)) c = char(c + 32);
  return s;
}

std::string python_capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty() && is_ascii_lower(out[0])) out[0] = char(out[0] - 32);
  return out;
}

std::string python_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  // The code points to strip; whitespace when `chars` is absent.
  std::vector<uint32_t> set;
  if (chars)
    for (size_t pos = 0; pos < chars->size();) set.push_back(decode_utf8(*chars, pos));
  auto strippable = [&](uint32_t cp) {
    if (!chars) return is_python_space(cp);
    for (const uint32_t c : set)
      if (c == cp) return true;
    return false;
  };
  const std::vector<size_t> offsets = code_point_offsets(s);
  size_t begin = 0, end = offsets.size() - 1;  // in code points
  auto cp_at = [&](size_t i) {
    size_t pos = offsets[i];
    return decode_utf8(s, pos);
  };
  if (left)
    while (begin < end && strippable(cp_at(begin))) ++begin;
  if (right)
    while (end > begin && strippable(cp_at(end - 1))) --end;
  return s.substr(offsets[begin], offsets[end] - offsets[begin]);
}

std::string python_replace(const std::string& s, const std::string& old, const std::string& replacement,
                           int64_t count, const TemplateLimits& limits) {
  std::string out;
  if (old.empty()) {  // Python inserts the replacement before every character and at the end
    const std::vector<size_t> offsets = code_point_offsets(s);
    int64_t done = 0;
    for (size_t i = 0; i < offsets.size(); ++i) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      if (i + 1 < offsets.size()) out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
      check_size(out.size(), limits, "a string");
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += replacement;
    check_size(out.size(), limits, "a string");
    start = at + old.size();
    ++done;
  }
  out.append(s, start);
  check_size(out.size(), limits, "a string");
  return out;
}

std::vector<std::string> python_splitlines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0, pos = 0;
  while (pos < s.size()) {
    const size_t at = pos;
    const uint32_t cp = decode_utf8(s, pos);
    const bool boundary = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C ||
                          cp == 0x1D || cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!boundary) continue;
    lines.push_back(s.substr(start, at - start));
    if (cp == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
    start = pos;
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

ArgumentReader::ArgumentReader(std::string_view function, CallArgs& args,
                               std::vector<std::string_view> params, size_t required)
    : function_(function), params_(std::move(params)), bound_(params_.size(), nullptr) {
  if (args.positional.size() > params_.size())
    throw ValueError(fmt::format("{}() takes at most {} argument(s) ({} given)", function_,
                                 params_.size(), args.positional.size()));
  for (size_t i = 0; i < args.positional.size(); ++i) bound_[i] = &args.positional[i];
  for (const auto& [name, value] : args.keyword) {
    size_t i = 0;
    while (i < params_.size() && params_[i] != name) ++i;
    if (i == params_.size())
      throw ValueError(fmt::format("{}() got an unexpected keyword argument '{}'", function_, name));
    if (bound_[i]) throw ValueError(fmt::format("{}() got multiple values for argument '{}'", function_, name));
    bound_[i] = &value;
  }
  for (size_t i = 0; i < required; ++i)
    if (!bound_[i])
      throw ValueError(fmt::format("{}() missing required argument '{}'", function_, params_[i]));
}

const Value& ArgumentReader::get(size_t index) const {
  static const Value absent;
  return bound_[index] ? *bound_[index] : absent;
}

std::string ArgumentReader::string(size_t index, std::string_view fallback) const {
  if (!bound_[index] || bound_[index]->is_none()) return std::string(fallback);
  if (!bound_[index]->is_string())
    throw ValueError(fmt::format("{}(): argument '{}' must be str, not {}", function_, params_[index],
                                 type_name(*bound_[index])));
  return bound_[index]->as_string();
}

int64_t ArgumentReader::integer(size_t index, int64_t fallback) const {
  if (!bound_[index] || bound_[index]->is_none()) return fallback;
  const Value& v = *bound_[index];
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  throw ValueError(fmt::format("{}(): argument '{}' must be an integer, not {}", function_,
                               params_[index], type_name(v)));
}

bool ArgumentReader::boolean(size_t index, bool fallback) const {
  return bound_[index] ? bound_[index]->truthy() : fallback;
}

std::optional<Value> string_method(const std::string& self, std::string_view name, const TemplateLimits& limits) {
  const std::string n(name);
  auto strip = [self, n](bool left, bool right) {
    return method(n, [self, n, left, right](CallArgs& args) {
      ArgumentReader a(n, args, {"chars"});
      std::optional<std::string> chars;
      if (a.has(0) && !a.get(0).is_none()) chars = a.string(0);
      return Value::string(python_strip(self, chars, left, right));
    });
  };
  if (name == "strip") return strip(true, true);
  if (name == "lstrip") return strip(true, false);
  if (name == "rstrip") return strip(false, true);
  if (name == "split") {
    return method(n, [self](CallArgs& args) {
      ArgumentReader a("split", args, {"sep", "maxsplit"});
      const int64_t maxsplit = a.integer(1, -1);
      if (!a.has(0) || a.get(0).is_none()) return string_list(split_whitespace(self, maxsplit));
      return string_list(split_on(self, a.string(0), maxsplit));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return method(n, [self, n, starts](CallArgs& args) {
      ArgumentReader a(n, args, {"prefix"}, 1);
      for (const std::string& affix : affixes(a.get(0), n)) {
        if (affix.size() > self.size()) continue;
        if (starts ? self.compare(0, affix.size(), affix) == 0
                   : self.compare(self.size() - affix.size(), affix.size(), affix) == 0)
          return Value::boolean(true);
      }
      return Value::boolean(false);
    });
  }
  if (name == "replace") {
    return method(n, [self, limits](CallArgs& args) {
      ArgumentReader a("replace", args, {"old", "new", "count"}, 2);
      return Value::string(python_replace(self, a.string(0), a.string(1), a.integer(2, -1), limits));
    });
  }
  auto simple = [&](std::function<std::string(const std::string&)> f) {
    return method(n, [self, n, f](CallArgs& args) {
      ArgumentReader a(n, args, {});
      return Value::string(f(self));
    });
  };
  if (name == "upper") return simple(ascii_upper);
  if (name == "lower") return simple(ascii_lower);
  if (name == "title") return simple(python_title);
  if (name == "capitalize") return simple(python_capitalize);
  if (name == "find" || name == "rfind" || name == "count") {
    return method(n, [self, n](CallArgs& args) {
      ArgumentReader a(n, args, {"sub"}, 1);
      const std::string sub = a.string(0);
      if (n == "count") {
        if (sub.empty()) return Value::integer(int64_t(code_point_count(self)) + 1);
        int64_t count = 0;
        for (size_t at = self.find(sub); at != std::string::npos; at = self.find(sub, at + sub.size())) ++count;
        return Value::integer(count);
      }
      const size_t at = n == "find" ? self.find(sub) : self.rfind(sub);
      if (at == std::string::npos) return Value::integer(-1);
      return Value::integer(int64_t(code_point_count(std::string_view(self).substr(0, at))));
    });
  }
  if (name == "join") {
    return method(n, [self, limits](CallArgs& args) {
      ArgumentReader a("join", args, {"iterable"}, 1);
      std::string out;
      bool first = true;
      for (const Value& item : iterate(a.get(0))) {
        if (!item.is_string())
          throw ValueError(fmt::format("sequence item: expected str instance, {} found", type_name(item)));
        if (!first) out += self;
        first = false;
        out += item.as_string();
        check_size(out.size(), limits, "a string");
      }
      return Value::string(std::move(out));
    });
  }
  if (name == "splitlines") {
    return method(n, [self](CallArgs& args) {
      ArgumentReader a("splitlines", args, {});
      return string_list(python_splitlines(self));
    });
  }
  auto predicate = [&](std::function<bool(char)> each, bool needs_cased) {
    return method(n, [self, n, each, needs_cased](CallArgs& args) {
      ArgumentReader a(n, args, {});
      if (self.empty()) return Value::boolean(false);
      bool cased = false;
      for (const char c : self) {
        if (needs_cased) {
          if (is_ascii_alpha(c)) {
            cased = true;
            if (!each(c)) return Value::boolean(false);
          }
        } else if (!each(c)) {
          return Value::boolean(false);
        }
      }
      return Value::boolean(!needs_cased || cased);
    });
  };
  if (name == "isdigit") return predicate([](char c) { return c >= '0' && c <= '9'; }, false);
  if (name == "isalpha") return predicate(is_ascii_alpha, false);
  if (name == "isalnum") return predicate([](char c) { return is_ascii_alpha(c) || (c >= '0' && c <= '9'); }, false);
  if (name == "isspace") return predicate([](char c) { return static_cast<unsigned char>(c) < 0x80 && is_python_space(static_cast<unsigned char>(c)); }, false);
  if (name == "islower") return predicate(is_ascii_lower, true);
  if (name == "isupper") return predicate(is_ascii_upper, true);
  if (name == "format" || name == "format_map")
    throw ValueError(fmt::format("str.{}() is not supported", name));
  return std::nullopt;
}

std::optional<Value> dict_method(const Value& self, std::string_view name) {
  if (name == "items" || name == "keys" || name == "values") {
    const std::string n(name);
    return method(n, [self, n](CallArgs& args) {
      ArgumentReader a(n, args, {});
      std::vector<Value> out;
      for (const auto& [key, value] : self.as_dict().entries) {
        if (n == "items") out.push_back(Value::list({Value::string(key), value}, /*is_tuple=*/true));
        else if (n == "keys") out.push_back(Value::string(key));
        else out.push_back(value);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return method("get", [self](CallArgs& args) {
      ArgumentReader a("get", args, {"key", "default"}, 1);
      if (a.get(0).is_string())
        if (const Value* v = self.as_dict().find(a.get(0).as_string())) return *v;
      return a.has(1) ? a.get(1) : Value::none();
    });
  }
  return std::nullopt;
}

}  // namespace amk::tmpl
