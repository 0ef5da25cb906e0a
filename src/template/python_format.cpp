#include "template/python_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "template/utf8.h"

namespace amk::tmpl {
namespace {

void check_depth(int max_depth) {
  if (max_depth <= 0) throw ValueError("value nested too deeply (or containing itself) to print");
}

// Python leaves printable characters alone in repr(); of the non-ASCII ones, the C1 controls,
// the soft hyphen and the line/paragraph separators are the common non-printable ones.
bool repr_escapes(uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0xA0) || cp == 0xAD || cp == 0x2028 ||
         cp == 0x2029;
}

void repr_into(std::string& out, const Value& v, int max_depth) {
  check_depth(max_depth);
  if (v.is_string()) {
    out += python_string_repr(v.as_string());
  } else if (v.is_undefined()) {
    out += "Undefined";
  } else if (v.is_list()) {
    const ListValue& list = v.as_list();
    out += list.is_tuple ? '(' : '[';
    for (size_t i = 0; i < list.items.size(); ++i) {
      if (i) out += ", ";
      repr_into(out, list.items[i], max_depth - 1);
    }
    if (list.is_tuple && list.items.size() == 1) out += ',';
    out += list.is_tuple ? ')' : ']';
  } else if (v.is_dict() || v.is_namespace()) {
    const DictValue& dict = v.is_dict() ? v.as_dict() : v.as_namespace().attributes;
    if (v.is_namespace()) out += "<Namespace ";
    out += '{';
    for (size_t i = 0; i < dict.entries.size(); ++i) {
      if (i) out += ", ";
      out += python_string_repr(dict.entries[i].first);
      out += ": ";
      repr_into(out, dict.entries[i].second, max_depth - 1);
    }
    out += '}';
    if (v.is_namespace()) out += '>';
  } else {
    out += python_str(v, max_depth);
  }
}

void json_string_into(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    const uint32_t cp = decode_utf8(s, pos);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
      if (cp >= 0x10000) {  // a UTF-16 surrogate pair, as json.dumps writes it
        const uint32_t v = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", cp);
      }
    } else {
      out.append(s, start, pos - start);
    }
  }
  out += '"';
}

void json_into(std::string& out, const Value& v, const JsonStyle& style, int level, int max_depth) {
  check_depth(max_depth);
  const std::string item_sep = style.item_separator.value_or(style.indent ? "," : ", ");
  const std::string key_sep = style.key_separator.value_or(": ");
  auto newline = [&](int at_level) {
    if (!style.indent) return;
    out += '\n';
    out.append(size_t(std::max(0, *style.indent)) * size_t(at_level), ' ');
  };
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    const double d = v.as_float();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : python_float_repr(d);
  } else if (v.is_string()) {
    json_string_into(out, v.as_string(), style.ensure_ascii);
  } else if (v.is_list()) {
    const auto& items = v.as_list().items;
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += item_sep;
      newline(level + 1);
      json_into(out, items[i], style, level + 1, max_depth - 1);
    }
    newline(level);
    out += ']';
  } else if (v.is_dict()) {
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& entry : v.as_dict().entries) entries.push_back(&entry);
    if (entries.empty()) {
      out += "{}";
      return;
    }
    if (style.sort_keys)
      std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
    out += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i) out += item_sep;
      newline(level + 1);
      json_string_into(out, entries[i]->first, style.ensure_ascii);
      out += key_sep;
      json_into(out, entries[i]->second, style, level + 1, max_depth - 1);
    }
    newline(level);
    out += '}';
  } else {
    throw ValueError(fmt::format("Object of type {} is not JSON serializable", type_name(v)));
  }
}

}  // namespace

std::string python_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    const uint32_t cp = decode_utf8(s, pos);
    if (cp == uint32_t(quote) || cp == '\\') {
      out += '\\';
      out += char(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (repr_escapes(cp)) {
      out += cp < 0x100 ? fmt::format("\\x{:02x}", cp) : fmt::format("\\u{:04x}", cp);
    } else {
      out.append(s, start, pos - start);
    }
  }
  out += quote;
  return out;
}

// Python's repr(float): the shortest digits that round-trip, printed positionally when the
// decimal exponent is in [-4, 16) and in scientific notation otherwise.
std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  const std::string sci(buf, result.ptr);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (const char c : mantissa)
    if (c != '.') digits += c;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) return sign + "0." + std::string(size_t(-exponent - 1), '0') + digits;
    const size_t int_digits = size_t(exponent) + 1;
    if (digits.size() <= int_digits) return sign + digits + std::string(int_digits - digits.size(), '0') + ".0";
    return sign + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
  }
  std::string out = sign + digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  return out + fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
}

std::string python_str(const Value& v, int max_depth) {
  switch (v.storage().index()) {
    case 0: return "";
    case 1: return "None";
    case 2: return v.as_bool() ? "True" : "False";
    case 3: return std::to_string(v.as_int());
    case 4: return python_float_repr(v.as_float());
    case 5: return v.as_string();
    case 6: case 7: case 8: {
      std::string out;
      repr_into(out, v, max_depth);
      return out;
    }
    default: return fmt::format("<function {}>", v.as_callable().name);
  }
}

std::string python_repr(const Value& v, int max_depth) {
  std::string out;
  repr_into(out, v, max_depth);
  return out;
}

std::string python_json_dumps(const Value& v, const JsonStyle& style, int max_depth) {
  std::string out;
  json_into(out, v, style, 0, max_depth);
  return out;
}

}  // namespace amk::tmpl
