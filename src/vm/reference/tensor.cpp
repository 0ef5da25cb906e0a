// Host tensors of the reference VM and the storage codecs of every dtype.
//
// All narrow float formats (F16, BF16, F8E4M3, F8E5M2) go through one rounding routine that
// works on a double: the value is scaled by a power of two (exact) so that one quantum of the
// target format is 1.0, rounded to the nearest integer with ties to even, and scaled back. That
// is round-to-nearest-even by definition, including subnormals and the overflow boundary, with
// no bit tricks to get wrong, and it lets the ops round a double result exactly once.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "amk/reference_ops.h"
#include "amk/tensor.h"
#include "vm/reference/ops/numeric.h"

namespace amk {

static_assert(std::endian::native == std::endian::little,
              "Tensor bytes are little-endian; this host code stores them with memcpy");

namespace {

[[noreturn]] void fail(const std::string& msg) { throw OpError("Tensor: " + msg); }

// A binary float format: 1 sign bit, `ebits` exponent bits, `mbits` mantissa bits.
// `ieee` formats reserve the all-ones exponent for inf/NaN. F8E4M3 is the "fn" variant used by
// torch.float8_e4m3fn: no infinities, only S.1111.111 is NaN, so the all-ones exponent holds
// normal numbers up to 448, and anything that rounds beyond 448 becomes NaN (torch does the same).
struct Format {
  int ebits;
  int mbits;
  bool ieee;

  int bias() const { return (1 << (ebits - 1)) - 1; }
  uint32_t exp_all_ones() const { return (1u << ebits) - 1; }
  uint32_t mant_all_ones() const { return (1u << mbits) - 1; }
  uint32_t sign_bit() const { return 1u << (ebits + mbits); }
  int min_normal_exp() const { return 1 - bias(); }
  double max_finite() const {
    // ieee: largest exponent below all-ones, full mantissa. fn: all-ones exponent, mantissa
    // all-ones minus one (all-ones is NaN).
    const int e = ieee ? int(exp_all_ones()) - 1 - bias() : int(exp_all_ones()) - bias();
    const double m = ieee ? double(mant_all_ones()) : double(mant_all_ones() - 1);
    return std::ldexp(1.0 + m / double(1u << mbits), e);
  }
  uint32_t inf_bits() const { return exp_all_ones() << mbits; }  // ieee only
};

constexpr Format kF16{5, 10, true};
constexpr Format kBF16{8, 7, true};
constexpr Format kE4M3{4, 3, false};
constexpr Format kE5M2{5, 2, true};

// Ties-to-even rounding of a non-negative double to an integer, independent of the FP rounding
// mode. Exact: every caller passes a value below 2^(mbits+1).
double round_half_even(double n) {
  const double fl = std::floor(n);
  const double diff = n - fl;
  if (diff > 0.5) return fl + 1.0;
  if (diff < 0.5) return fl;
  return std::fmod(fl, 2.0) == 0.0 ? fl : fl + 1.0;
}

uint32_t encode(double v, const Format& f) {
  const uint32_t sign = std::signbit(v) ? f.sign_bit() : 0u;
  if (std::isnan(v)) {
    if (!f.ieee) return sign | (f.exp_all_ones() << f.mbits) | f.mant_all_ones();
    // Keep the top payload bits (float -> double conversion put them at the top of the double's
    // mantissa) and force the quiet bit so the result is a NaN, never inf.
    const uint64_t dbits = std::bit_cast<uint64_t>(v);
    const uint32_t payload = uint32_t((dbits & ((uint64_t{1} << 52) - 1)) >> (52 - f.mbits));
    return sign | f.inf_bits() | payload | (1u << (f.mbits - 1));
  }
  const uint32_t overflow =
      sign | (f.ieee ? f.inf_bits() : (f.exp_all_ones() << f.mbits) | f.mant_all_ones());
  const double a = std::fabs(v);
  if (std::isinf(a)) return overflow;
  if (a == 0.0) return sign;

  int e = 0;
  std::frexp(a, &e);
  e -= 1;  // a in [2^e, 2^(e+1))
  // One quantum of the format at this magnitude; below the normal range the quantum is fixed.
  const int quantum_exp = std::max(e, f.min_normal_exp()) - f.mbits;
  const double count = round_half_even(std::ldexp(a, -quantum_exp));
  const double rounded = std::ldexp(count, quantum_exp);
  if (rounded > f.max_finite()) return overflow;
  if (rounded < std::ldexp(1.0, f.min_normal_exp()))  // subnormal: exponent field 0
    return sign | uint32_t(count);
  int re = 0;
  std::frexp(rounded, &re);
  re -= 1;
  const auto mant = uint32_t(std::ldexp(rounded, f.mbits - re)) - (1u << f.mbits);
  return sign | (uint32_t(re + f.bias()) << f.mbits) | mant;
}

double decode(uint32_t bits, const Format& f) {
  const bool neg = (bits & f.sign_bit()) != 0;
  const uint32_t ef = (bits >> f.mbits) & f.exp_all_ones();
  const uint32_t mf = bits & f.mant_all_ones();
  double mag = 0.0;
  if (f.ieee && ef == f.exp_all_ones()) {
    mag = mf == 0 ? std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  } else if (!f.ieee && ef == f.exp_all_ones() && mf == f.mant_all_ones()) {
    mag = std::numeric_limits<double>::quiet_NaN();
  } else if (ef == 0) {
    mag = std::ldexp(double(mf), f.min_normal_exp() - f.mbits);
  } else {
    mag = std::ldexp(1.0 + double(mf) / double(1u << f.mbits), int(ef) - f.bias());
  }
  return neg ? -mag : mag;
}

const Format* narrow_format(DType d) {
  switch (d) {
    case DType::F16: return &kF16;
    case DType::BF16: return &kBF16;
    case DType::F8E4M3: return &kE4M3;
    case DType::F8E5M2: return &kE5M2;
    default: return nullptr;
  }
}

int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) fail("negative dimension in shape " + ref::shape_str(shape));
    if (__builtin_mul_overflow(n, d, &n)) fail("element count of " + ref::shape_str(shape) + " overflows");
  }
  return n;
}

// Byte offset of element i, after checking that the element exists and its bytes are there
// (a hand-built Tensor may carry a shape and a byte vector that disagree).
size_t byte_offset(const Tensor& t, int64_t i) {
  const int64_t n = t.numel();
  if (i < 0 || i >= n)
    fail("index " + std::to_string(i) + " out of range [0, " + std::to_string(n) + ") for " +
         std::string(name_of(t.dtype)) + " " + ref::shape_str(t.shape));
  const int bits = dtype_bits(t.dtype);
  const auto off = size_t(bits == 4 ? i / 2 : i * (bits / 8));
  const size_t need = off + size_t(bits == 4 ? 1 : bits / 8);
  if (need > t.bytes.size())
    fail("storage holds " + std::to_string(t.bytes.size()) + " bytes but element " +
         std::to_string(i) + " of " + ref::shape_str(t.shape) + " needs " + std::to_string(need));
  return off;
}

template <typename T>
T read_as(const Tensor& t, size_t off) {
  T v;
  std::memcpy(&v, &t.bytes[off], sizeof(T));
  return v;
}

template <typename T>
void write_as(Tensor& t, size_t off, T v) {
  std::memcpy(&t.bytes[off], &v, sizeof(T));
}

// Integer range of each integer storage type (I4 is the unsigned nibble).
void int_range(DType d, int64_t& lo, int64_t& hi) {
  switch (d) {
    case DType::I32: lo = INT32_MIN; hi = INT32_MAX; return;
    case DType::I8: lo = -128; hi = 127; return;
    case DType::I4: lo = 0; hi = 15; return;
    case DType::U8: lo = 0; hi = 255; return;
    default: lo = 0; hi = 1; return;
  }
}

void store_int(Tensor& t, int64_t i, int64_t v) {
  const size_t off = byte_offset(t, i);
  if (t.dtype == DType::BOOL) {
    t.bytes[off] = v != 0 ? 1 : 0;
    return;
  }
  int64_t lo = 0, hi = 0;
  int_range(t.dtype, lo, hi);
  if (v < lo || v > hi)
    fail("value " + std::to_string(v) + " does not fit " + std::string(name_of(t.dtype)) +
         " [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  switch (t.dtype) {
    case DType::I32: write_as<int32_t>(t, off, int32_t(v)); return;
    case DType::I8: write_as<int8_t>(t, off, int8_t(v)); return;
    case DType::U8: t.bytes[off] = uint8_t(v); return;
    case DType::I4: {
      const int shift = (i & 1) ? 4 : 0;  // low nibble first
      t.bytes[off] = uint8_t((t.bytes[off] & ~(0xF << shift)) | (v << shift));
      return;
    }
    default: fail("store_int on a float dtype");
  }
}

int64_t load_int(const Tensor& t, int64_t i) {
  const size_t off = byte_offset(t, i);
  switch (t.dtype) {
    case DType::I32: return read_as<int32_t>(t, off);
    case DType::I8: return read_as<int8_t>(t, off);
    case DType::U8: return t.bytes[off];
    case DType::BOOL: return t.bytes[off] != 0 ? 1 : 0;
    case DType::I4: return (i & 1) ? (t.bytes[off] >> 4) : (t.bytes[off] & 0xF);
    default: fail("load_int on a float dtype");
  }
}

}  // namespace

// ---- scalar conversions -----------------------------------------------------------------------
float bf16_bits_to_float(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }
uint16_t float_to_bf16_bits(float v) { return uint16_t(encode(v, kBF16)); }
float f16_bits_to_float(uint16_t bits) { return float(decode(bits, kF16)); }
uint16_t float_to_f16_bits(float v) { return uint16_t(encode(v, kF16)); }

float round_to_dtype(DType dtype, float v) {
  if (dtype == DType::F32) return v;
  if (const Format* f = narrow_format(dtype)) return float(decode(encode(v, *f), *f));
  Tensor t = Tensor::zeros(dtype, {1});  // integers: truncation and range check as in store
  t.set(0, v);
  return t.get(0);
}

namespace ref {

bool is_float_dtype(DType d) {
  return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F8E4M3 ||
         d == DType::F8E5M2;
}

bool is_integer_dtype(DType d) {
  return d == DType::I32 || d == DType::I8 || d == DType::I4 || d == DType::U8;
}

std::string shape_str(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

// f(read), where read(off) widens the float element stored at byte offset `off` of t (a float
// dtype): one dispatch on the dtype for however many elements f reads.
template <typename F>
auto with_float_reader(const Tensor& t, F&& f) {
  switch (t.dtype) {
    case DType::F32: return f([&](size_t at) { return double(read_as<float>(t, at)); });
    case DType::BF16:
      return f([&](size_t at) { return double(bf16_bits_to_float(read_as<uint16_t>(t, at))); });
    case DType::F16: return f([&](size_t at) { return decode(read_as<uint16_t>(t, at), kF16); });
    default:  // F8
      return f([&](size_t at) { return decode(t.bytes[at], *narrow_format(t.dtype)); });
  }
}

double load(const Tensor& t, int64_t i) {
  if (!is_float_dtype(t.dtype)) return double(load_int(t, i));
  const size_t off = byte_offset(t, i);
  return with_float_reader(t, [&](auto read) { return read(off); });
}

void load_range(const Tensor& t, int64_t first, std::span<double> out) {
  if (out.empty()) return;
  const int bits = dtype_bits(t.dtype);
  if (bits < 8 || !is_float_dtype(t.dtype)) {  // packed or integer: element by element
    for (size_t j = 0; j < out.size(); ++j) out[j] = load(t, first + int64_t(j));
    return;
  }
  // Both ends checked (the elements exist, their bytes are there): every element between is.
  const size_t off = byte_offset(t, first);
  byte_offset(t, first + int64_t(out.size()) - 1);
  const size_t width = size_t(bits / 8);
  with_float_reader(t, [&](auto read) {
    for (size_t j = 0; j < out.size(); ++j) out[j] = read(off + j * width);
  });
}

void store(Tensor& t, int64_t i, double v) {
  if (t.dtype == DType::BOOL) {
    store_int(t, i, v != 0.0 ? 1 : 0);  // NaN != 0, so NaN -> true as in torch
    return;
  }
  if (is_integer_dtype(t.dtype)) {
    if (!std::isfinite(v))
      fail("cannot store " + std::to_string(v) + " in " + std::string(name_of(t.dtype)));
    const double tv = std::trunc(v);  // like torch's float -> int cast
    if (tv < -9.2e18 || tv > 9.2e18)
      fail("value " + std::to_string(v) + " does not fit " + std::string(name_of(t.dtype)));
    store_int(t, i, int64_t(tv));
    return;
  }
  const size_t off = byte_offset(t, i);
  switch (t.dtype) {
    case DType::F32: write_as<float>(t, off, float(v)); return;  // one IEEE rounding
    case DType::F16: write_as<uint16_t>(t, off, uint16_t(encode(v, kF16))); return;
    case DType::BF16: write_as<uint16_t>(t, off, uint16_t(encode(v, kBF16))); return;
    default: t.bytes[off] = uint8_t(encode(v, *narrow_format(t.dtype))); return;  // F8
  }
}

}  // namespace ref

// ---- Tensor -----------------------------------------------------------------------------------
Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  if (int(dtype) < 0 || int(dtype) >= kNumDTypes) fail("unknown dtype code " + std::to_string(int(dtype)));
  const int64_t n = checked_numel(shape);
  const int64_t nbytes = dtype_nbytes(dtype, n);
  if (nbytes == std::numeric_limits<int64_t>::max())
    fail("byte size of " + ref::shape_str(shape) + " overflows");
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.assign(size_t(nbytes), 0);
  return t;
}

Tensor Tensor::from_floats(DType dtype, std::vector<int64_t> shape, std::span<const float> values) {
  Tensor t = zeros(dtype, std::move(shape));
  if (int64_t(values.size()) != t.numel())
    fail(std::to_string(values.size()) + " values for shape " + ref::shape_str(t.shape));
  // Binding a checkpoint converts billions of weights: F32 is a copy, and F32 -> BF16 is the
  // round-to-nearest-even bit trick, which gives exactly what encode() gives for a float input
  // (NaN: the top payload bits with the quiet bit set). Everything else goes through set().
  if (dtype == DType::F32) {
    std::memcpy(t.bytes.data(), values.data(), values.size() * sizeof(float));
  } else if (dtype == DType::BF16) {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint32_t u = std::bit_cast<uint32_t>(values[i]);
      const uint16_t b = (u & 0x7fffffffu) > 0x7f800000u
                             ? uint16_t((u >> 16) | 0x40u)
                             : uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
      std::memcpy(t.bytes.data() + 2 * i, &b, 2);
    }
  } else {
    for (size_t i = 0; i < values.size(); ++i) t.set(int64_t(i), values[i]);
  }
  return t;
}

Tensor Tensor::from_ints(DType dtype, std::vector<int64_t> shape, std::span<const int64_t> values) {
  Tensor t = zeros(dtype, std::move(shape));
  if (int64_t(values.size()) != t.numel())
    fail(std::to_string(values.size()) + " values for shape " + ref::shape_str(t.shape));
  for (size_t i = 0; i < values.size(); ++i) t.set_int(int64_t(i), values[i]);
  return t;
}

int64_t Tensor::numel() const { return checked_numel(shape); }

float Tensor::get(int64_t i) const { return float(ref::load(*this, i)); }

void Tensor::set(int64_t i, float v) { ref::store(*this, i, v); }

int64_t Tensor::get_int(int64_t i) const {
  if (!ref::is_float_dtype(dtype)) return load_int(*this, i);
  const double v = ref::load(*this, i);
  if (!std::isfinite(v) || std::fabs(v) >= 9.2e18)
    fail("element " + std::to_string(i) + " (" + std::to_string(v) + ") is not an int64");
  return int64_t(std::trunc(v));
}

void Tensor::set_int(int64_t i, int64_t v) {
  if (ref::is_float_dtype(dtype))
    ref::store(*this, i, double(v));
  else
    store_int(*this, i, v);
}

std::vector<float> Tensor::to_floats() const {
  const int64_t n = numel();
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = get(i);
  return out;
}

void Tensor::fill(float v) {
  const int64_t n = numel();
  if (n == 0) return;
  if (int64_t(bytes.size()) < dtype_nbytes(dtype, n))
    fail("storage holds " + std::to_string(bytes.size()) + " bytes, " + ref::shape_str(shape) +
         " needs " + std::to_string(dtype_nbytes(dtype, n)));
  set(0, v);  // rounds (or range-checks) once; every element then takes the same bits
  if (dtype == DType::I4) {
    const uint8_t nib = bytes[0] & 0xF;
    for (int64_t i = 0; i < n; ++i) store_int(*this, i, nib);
    return;
  }
  const size_t w = size_t(dtype_bits(dtype) / 8);
  for (size_t off = w; off + w <= size_t(n) * w; off += w) std::memcpy(&bytes[off], &bytes[0], w);
}

}  // namespace amk
