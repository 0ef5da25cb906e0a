#include "template/operations.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "template/methods.h"
#include "template/utf8.h"

namespace amk::tmpl {
namespace {

[[noreturn]] void unsupported_operands(std::string_view op, const Value& a, const Value& b) {
  throw ValueError(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op,
                               type_name(a), type_name(b)));
}

// bool is an int to Python's arithmetic.
bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }
int64_t integral(const Value& v) { return v.is_bool() ? int64_t(v.as_bool()) : v.as_int(); }

[[noreturn]] void overflow() {
  throw ValueError("integer overflow (amk's template integers are 64-bit)");
}

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw ValueError("integer division or modulo by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1) overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == 0) throw ValueError("integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double float_mod(double a, double b) {
  if (b == 0) throw ValueError("float modulo");
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value repeat(const Value& seq, int64_t times, const TemplateLimits& limits) {
  if (times <= 0) return seq.is_string() ? Value::string("") : Value::list({}, seq.as_list().is_tuple);
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && uint64_t(times) > limits.max_output_bytes / s.size())
      throw ValueError(fmt::format("string repetition beyond the {}-byte limit", limits.max_output_bytes));
    std::string out;
    out.reserve(s.size() * size_t(times));
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value::string(std::move(out));
  }
  const auto& items = seq.as_list().items;
  if (!items.empty() && uint64_t(times) > limits.max_output_bytes / items.size())
    throw ValueError(fmt::format("list repetition beyond the {}-item limit", limits.max_output_bytes));
  std::vector<Value> out;
  out.reserve(items.size() * size_t(times));
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.as_list().is_tuple);
}

Value power(const Value& a, const Value& b) {
  if (is_integral(a) && is_integral(b) && integral(b) >= 0) {
    int64_t base = integral(a), exp = integral(b), result = 1;
    while (exp > 0) {
      if (exp & 1) result = checked_mul(result, base);
      exp >>= 1;
      if (exp > 0) base = checked_mul(base, base);
    }
    return Value::integer(result);
  }
  const double x = a.numeric(), y = b.numeric();
  if (x == 0 && y < 0) throw ValueError("0.0 cannot be raised to a negative power");
  const double r = std::pow(x, y);
  if (std::isnan(r) && !std::isnan(x) && !std::isnan(y))
    throw ValueError("negative number cannot be raised to a fractional power (complex result)");
  if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) throw ValueError("float power overflow");
  return Value::real(r);
}

// Python's slice.indices(): clamps start and stop to the sequence for the step's direction.
void slice_indices(int64_t length, const Value& start_v, const Value& stop_v, const Value& step_v,
                   int64_t& start, int64_t& stop, int64_t& step) {
  auto as_index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!is_integral(v))
      throw ValueError(fmt::format("slice {} must be an integer or None, not '{}'", what, type_name(v)));
    return integral(v);
  };
  step = as_index(step_v, "step").value_or(1);
  if (step == 0) throw ValueError("slice step cannot be zero");
  if (step == std::numeric_limits<int64_t>::min()) step = -std::numeric_limits<int64_t>::max();
  auto adjust = [&](std::optional<int64_t> index, int64_t fallback) {
    if (!index) return fallback;
    int64_t i = *index;
    if (i < 0) {
      i = i < -length ? (step < 0 ? -1 : 0) : i + length;
    } else if (i >= length) {
      i = step < 0 ? length - 1 : length;
    }
    return i;
  };
  start = adjust(as_index(start_v, "start"), step < 0 ? length - 1 : 0);
  stop = adjust(as_index(stop_v, "stop"), step < 0 ? -1 : length);
}

}  // namespace

void fail_undefined(const Value& v) { throw ValueError(v.as_undefined().message); }

void check_size(size_t size, const TemplateLimits& limits, std::string_view what) {
  if (size > limits.max_output_bytes)
    throw ValueError(fmt::format("{} longer than the {}-byte limit", what, limits.max_output_bytes));
}

std::string to_text(const Value& v, const TemplateLimits& limits) {
  std::string s = python_str(v, limits.max_value_depth);
  check_size(s.size(), limits, "a string");
  return s;
}

bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

Value negate(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (is_integral(v)) {
    if (integral(v) == std::numeric_limits<int64_t>::min()) overflow();
    return Value::integer(-integral(v));
  }
  if (v.is_float()) return Value::real(-v.as_float());
  throw ValueError(fmt::format("bad operand type for unary -: '{}'", type_name(v)));
}

Value binary_operation(std::string_view op, const Value& a, const Value& b, const TemplateLimits& limits) {
  if (op == "~") {  // jinja2's concatenation: str() of both, Undefined as ""
    std::string s = to_text(a, limits);
    s += to_text(b, limits);
    check_size(s.size(), limits, "a string");
    return Value::string(std::move(s));
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool numbers = a.is_number() && b.is_number();
  const bool ints = is_integral(a) && is_integral(b);
  if (op == "+") {
    if (ints) return Value::integer(checked_add(integral(a), integral(b)));
    if (numbers) return Value::real(a.numeric() + b.numeric());
    if (a.is_string() && b.is_string()) {
      check_size(a.as_string().size() + b.as_string().size(), limits, "a string");
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_string())
      throw ValueError(fmt::format("can only concatenate str (not \"{}\") to str", type_name(b)));
    if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
      check_size(a.as_list().items.size() + b.as_list().items.size(), limits, "a list");
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(items), a.as_list().is_tuple);
    }
    if (a.is_list())
      throw ValueError(fmt::format("can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b), type_name(a)));
    unsupported_operands(op, a, b);
  }
  if (op == "-") {
    if (ints) return Value::integer(checked_sub(integral(a), integral(b)));
    if (numbers) return Value::real(a.numeric() - b.numeric());
    unsupported_operands(op, a, b);
  }
  if (op == "*") {
    if (ints) return Value::integer(checked_mul(integral(a), integral(b)));
    if (numbers) return Value::real(a.numeric() * b.numeric());
    if ((a.is_string() || a.is_list()) && is_integral(b)) return repeat(a, integral(b), limits);
    if ((b.is_string() || b.is_list()) && is_integral(a)) return repeat(b, integral(a), limits);
    unsupported_operands(op, a, b);
  }
  if (op == "/") {
    if (!numbers) unsupported_operands(op, a, b);
    if (b.numeric() == 0) throw ValueError("division by zero");
    return Value::real(a.numeric() / b.numeric());
  }
  if (op == "//") {
    if (ints) return Value::integer(floor_div(integral(a), integral(b)));
    if (!numbers) unsupported_operands(op, a, b);
    if (b.numeric() == 0) throw ValueError("float floor division by zero");
    return Value::real(std::floor(a.numeric() / b.numeric()));
  }
  if (op == "%") {
    if (ints) return Value::integer(floor_mod(integral(a), integral(b)));
    if (numbers) return Value::real(float_mod(a.numeric(), b.numeric()));
    if (a.is_string()) throw ValueError("printf-style string formatting ('...' % x) is not supported");
    unsupported_operands(op, a, b);
  }
  if (op == "**") {
    if (!numbers) unsupported_operands("** or pow()", a, b);
    return power(a, b);
  }
  throw ValueError(fmt::format("unknown operator '{}'", op));
}

bool python_equals(const Value& a, const Value& b, int max_depth) {
  if (max_depth <= 0) throw ValueError("values nested too deeply to compare");
  if (a.is_number() && b.is_number()) {
    if (is_integral(a) && is_integral(b)) return integral(a) == integral(b);
    return a.numeric() == b.numeric();
  }
  if (a.storage().index() != b.storage().index()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.as_string() == b.as_string();
  if (a.is_list()) {
    const ListValue &x = a.as_list(), &y = b.as_list();
    if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
    for (size_t i = 0; i < x.items.size(); ++i)
      if (!python_equals(x.items[i], y.items[i], max_depth - 1)) return false;
    return true;
  }
  if (a.is_dict()) {
    const DictValue &x = a.as_dict(), &y = b.as_dict();
    if (x.entries.size() != y.entries.size()) return false;
    for (const auto& [key, value] : x.entries) {
      const Value* other = y.find(key);
      if (!other || !python_equals(value, *other, max_depth - 1)) return false;
    }
    return true;
  }
  if (a.is_namespace())
    return std::get<std::shared_ptr<NamespaceValue>>(a.storage()) == std::get<std::shared_ptr<NamespaceValue>>(b.storage());
  return std::get<std::shared_ptr<const Callable>>(a.storage()) == std::get<std::shared_ptr<const Callable>>(b.storage());
}

bool python_order(std::string_view op, const Value& a, const Value& b, int max_depth) {
  if (max_depth <= 0) throw ValueError("values nested too deeply to compare");
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  // -1, 0, 1 once the types are known to be comparable.
  int cmp;
  if (a.is_number() && b.is_number()) {
    if (is_integral(a) && is_integral(b)) {
      cmp = integral(a) < integral(b) ? -1 : integral(a) > integral(b) ? 1 : 0;
    } else {
      const double x = a.numeric(), y = b.numeric();
      if (std::isnan(x) || std::isnan(y)) return false;
      cmp = x < y ? -1 : x > y ? 1 : 0;
    }
  } else if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
    cmp = c < 0 ? -1 : c > 0 ? 1 : 0;
  } else if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto &x = a.as_list().items, &y = b.as_list().items;
    size_t i = 0;
    while (i < x.size() && i < y.size() && python_equals(x[i], y[i], max_depth - 1)) ++i;
    if (i < x.size() && i < y.size()) return python_order(op, x[i], y[i], max_depth - 1);
    cmp = x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  } else {
    throw ValueError(fmt::format("'{}' not supported between instances of '{}' and '{}'", op,
                                 type_name(a), type_name(b)));
  }
  if (op == "<") return cmp < 0;
  if (op == "<=") return cmp <= 0;
  if (op == ">") return cmp > 0;
  return cmp >= 0;
}

bool python_contains(const Value& container, const Value& item, int max_depth) {
  if (container.is_undefined()) return false;  // jinja2's Undefined iterates as empty
  if (container.is_string()) {
    if (!item.is_string())
      throw ValueError(fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& v : container.as_list().items)
      if (python_equals(v, item, max_depth)) return true;
    return false;
  }
  if (container.is_dict()) return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
  throw ValueError(fmt::format("argument of type '{}' is not iterable", type_name(container)));
}

Value get_attribute(const Value& obj, std::string_view name, const TemplateLimits& limits) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_string()) {
    if (auto method = string_method(obj.as_string(), name, limits)) return *method;
  } else if (obj.is_dict()) {
    if (auto method = dict_method(obj, name)) return *method;
    if (const Value* v = obj.as_dict().find(name)) return *v;
  } else if (obj.is_namespace()) {
    if (const Value* v = obj.as_namespace().attributes.find(name)) return *v;
  }
  const std::string what = obj.is_none() ? "None" : fmt::format("{} object", type_name(obj));
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", what, name));
}

Value get_item(const Value& obj, const Value& key, const TemplateLimits& limits) {
  if (obj.is_undefined()) fail_undefined(obj);
  if ((obj.is_list() || obj.is_string()) && is_integral(key)) {
    int64_t i = integral(key);
    if (obj.is_list()) {
      const auto& items = obj.as_list().items;
      const auto n = int64_t(items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return items[size_t(i)];
    } else {
      const std::vector<size_t> offsets = code_point_offsets(obj.as_string());
      const auto n = int64_t(offsets.size()) - 1;
      if (i < 0) i += n;
      if (i >= 0 && i < n)
        return Value::string(obj.as_string().substr(offsets[size_t(i)], offsets[size_t(i) + 1] - offsets[size_t(i)]));
    }
    return Value::undefined(fmt::format("{} object has no element {}", type_name(obj), integral(key)));
  }
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
  }
  if (key.is_string()) return get_attribute(obj, key.as_string(), limits);
  if (key.is_undefined()) fail_undefined(key);
  return Value::undefined(fmt::format("{} object has no element {}", type_name(obj), python_repr(key, 2)));
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!obj.is_list() && !obj.is_string())
    throw ValueError(fmt::format("'{}' object is not subscriptable", type_name(obj)));
  std::vector<size_t> offsets;
  int64_t length;
  if (obj.is_string()) {
    offsets = code_point_offsets(obj.as_string());
    length = int64_t(offsets.size()) - 1;
  } else {
    length = int64_t(obj.as_list().items.size());
  }
  int64_t start, stop, step;
  slice_indices(length, start_v, stop_v, step_v, start, stop, step);
  std::vector<int64_t> picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    picked.push_back(i);
    if ((step > 0 && i > std::numeric_limits<int64_t>::max() - step) ||
        (step < 0 && i < std::numeric_limits<int64_t>::min() - step))
      break;
  }
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    std::string out;
    for (const int64_t i : picked) out.append(s, offsets[size_t(i)], offsets[size_t(i) + 1] - offsets[size_t(i)]);
    return Value::string(std::move(out));
  }
  std::vector<Value> out;
  for (const int64_t i : picked) out.push_back(obj.as_list().items[size_t(i)]);
  return Value::list(std::move(out), obj.as_list().is_tuple);
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_list()) return v.as_list().items;
  if (v.is_dict()) {
    std::vector<Value> keys;
    for (const auto& entry : v.as_dict().entries) keys.push_back(Value::string(entry.first));
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> chars;
    const std::string& s = v.as_string();
    for (size_t pos = 0; pos < s.size();) {
      const size_t start = pos;
      decode_utf8(s, pos);
      chars.push_back(Value::string(s.substr(start, pos - start)));
    }
    return chars;
  }
  throw ValueError(fmt::format("'{}' object is not iterable", type_name(v)));
}

size_t python_len(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return code_point_count(v.as_string());
  if (v.is_list()) return v.as_list().items.size();
  if (v.is_dict()) return v.as_dict().entries.size();
  throw ValueError(fmt::format("object of type '{}' has no len()", type_name(v)));
}

}  // namespace amk::tmpl
