// Storage codecs and Tensor access. The rounding references here are written independently of
// src/vm/reference/tensor.cpp: every finite value of a format is enumerated from the textbook
// formula, and a value rounds to the nearest entry of that sorted table, ties to the even code.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "amk/reference_ops.h"
#include "amk/tensor.h"
#include "vm/reference/ops/numeric.h"

namespace {

using amk::DType;
using amk::OpError;
using amk::Tensor;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A float format described by its field widths; `fn` = no infinities, only S.1..1.1..1 is NaN.
struct Fmt {
  int ebits, mbits;
  bool fn;
};
constexpr Fmt kF16{5, 10, false}, kBF16{8, 7, false}, kE4M3{4, 3, true}, kE5M2{5, 2, false};

// (-1)^s * 2^(e - bias) * 1.m, or 2^(1 - bias) * 0.m for e == 0.
double textbook_value(uint32_t code, Fmt f) {
  const int bias = (1 << (f.ebits - 1)) - 1;
  const uint32_t e = (code >> f.mbits) & ((1u << f.ebits) - 1);
  const uint32_t m = code & ((1u << f.mbits) - 1);
  const double frac = double(m) / double(1u << f.mbits);
  const double mag = e == 0 ? std::ldexp(frac, 1 - bias) : std::ldexp(1.0 + frac, int(e) - bias);
  return (code >> (f.ebits + f.mbits)) & 1 ? -mag : mag;
}

bool is_special(uint32_t code, Fmt f) {
  const uint32_t e = (code >> f.mbits) & ((1u << f.ebits) - 1);
  const uint32_t m = code & ((1u << f.mbits) - 1);
  if (f.fn) return e == (1u << f.ebits) - 1 && m == (1u << f.mbits) - 1;
  return e == (1u << f.ebits) - 1;
}

// Nearest finite code to |v| with ties to the even code; beyond the largest finite value the
// next code up (inf, or NaN for fn formats) competes as if it were max + one ulp.
class ReferenceRounding {
 public:
  explicit ReferenceRounding(Fmt f) : sign_bit_(1u << (f.ebits + f.mbits)) {
    for (uint32_t code = 0; code < sign_bit_; ++code)
      if (!is_special(code, f)) table_.emplace_back(textbook_value(code, f), code);
    const auto [max_v, max_code] = table_.back();
    const double ulp_max = max_v - table_[table_.size() - 2].first;
    table_.emplace_back(max_v + ulp_max, max_code + 1);
  }

  uint32_t operator()(double v) const {
    const double a = std::fabs(v);
    const uint32_t sign = std::signbit(v) ? sign_bit_ : 0;
    if (a >= table_.back().first) return sign | table_.back().second;
    const auto hi = std::upper_bound(table_.begin(), table_.end(), std::make_pair(a, ~0u));
    const auto lo = hi - 1;
    const double dlo = a - lo->first, dhi = hi->first - a;
    const uint32_t pick = dlo < dhi ? lo->second : dhi < dlo ? hi->second
                          : (lo->second % 2 == 0 ? lo->second : hi->second);
    return sign | pick;
  }

 private:
  uint32_t sign_bit_;
  std::vector<std::pair<double, uint32_t>> table_;
};

uint8_t f8_bits(DType d, float v) { return Tensor::from_floats(d, {1}, std::vector<float>{v}).bytes[0]; }

float f8_value(DType d, uint8_t bits) {
  Tensor t = Tensor::zeros(d, {1});
  t.bytes[0] = bits;
  return t.get(0);
}

// A spread of floats over every binade the formats cover, with exact ties mixed in.
std::vector<float> sample_floats(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out;
  std::uniform_int_distribution<int> exp(-30, 20);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int i = 0; i < 20000; ++i) {
    const float v = std::ldexp(mant(rng), exp(rng));
    out.push_back(i % 2 ? -v : v);
  }
  // Exact midpoints between neighbours of the narrow formats (ties).
  for (float base : {1.0f, 3.0f, 1000.0f, 0.0001f})
    for (int k = 1; k < 64; ++k) out.push_back(base + std::ldexp(float(k), -12) * base);
  return out;
}

// ---- BF16 -----------------------------------------------------------------------------------
TEST(TensorBf16, EveryNonNanPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float v = amk::bf16_bits_to_float(uint16_t(b));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(amk::bf16_bits_to_float(amk::float_to_bf16_bits(v)))) << b;
      continue;
    }
    ASSERT_EQ(amk::float_to_bf16_bits(v), b) << "bits " << b;
    if (!std::isinf(v)) {
      ASSERT_EQ(double(v), textbook_value(b, kBF16)) << b;
    }
  }
}

TEST(TensorBf16, RoundsTiesToEven) {
  // 1 + 2^-8 is halfway between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81): stays at 1.
  EXPECT_EQ(amk::float_to_bf16_bits(1.0f + 0x1p-8f), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 0x3F81 (odd) and 0x3F82 (even): goes up.
  EXPECT_EQ(amk::float_to_bf16_bits(1.0f + 3 * 0x1p-8f), 0x3F82);
  // Just above a tie rounds up, just below rounds down.
  EXPECT_EQ(amk::float_to_bf16_bits(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 0x3F81);
  EXPECT_EQ(amk::float_to_bf16_bits(std::nextafter(1.0f + 3 * 0x1p-8f, 0.0f)), 0x3F81);
  EXPECT_EQ(amk::float_to_bf16_bits(-(1.0f + 0x1p-8f)), 0xBF80);
}

TEST(TensorBf16, NanStaysNanAndOverflowIsInf) {
  EXPECT_EQ(amk::float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(amk::float_to_bf16_bits(-kInf), 0xFF80);
  // A NaN whose payload lives only in the low 16 bits must not truncate to inf.
  const float low_payload_nan = std::bit_cast<float>(0x7F800001u);
  ASSERT_TRUE(std::isnan(low_payload_nan));
  EXPECT_TRUE(std::isnan(amk::bf16_bits_to_float(amk::float_to_bf16_bits(low_payload_nan))));
  EXPECT_TRUE(std::isnan(amk::bf16_bits_to_float(amk::float_to_bf16_bits(kNaN))));
  EXPECT_TRUE(std::signbit(amk::bf16_bits_to_float(amk::float_to_bf16_bits(-kNaN))));
}

TEST(TensorBf16, MatchesNearestValueSearch) {
  const ReferenceRounding reference_round(kBF16);
  for (float v : sample_floats(1)) ASSERT_EQ(amk::float_to_bf16_bits(v), reference_round(v)) << v;
  // Float subnormals land in bf16 subnormals.
  for (float v : {0x1p-130f, 0x1.4p-133f, 0x1.8p-133f, 0x1p-134f, 0x1p-149f})
    EXPECT_EQ(amk::float_to_bf16_bits(v), reference_round(v)) << v;
}

// ---- F16 ------------------------------------------------------------------------------------
TEST(TensorF16, EveryNonNanPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float v = amk::f16_bits_to_float(uint16_t(b));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(amk::f16_bits_to_float(amk::float_to_f16_bits(v)))) << b;
      continue;
    }
    ASSERT_EQ(amk::float_to_f16_bits(v), b) << "bits " << b;
    if (!std::isinf(v)) {
      ASSERT_EQ(double(v), textbook_value(b, kF16)) << b;
    }
  }
}

TEST(TensorF16, OverflowAndLargestFinite) {
  EXPECT_EQ(amk::float_to_f16_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(amk::float_to_f16_bits(65519.996f), 0x7BFF);  // below the midpoint to 65536
  EXPECT_EQ(amk::float_to_f16_bits(65520.0f), 0x7C00);    // the midpoint: ties to even = inf
  EXPECT_EQ(amk::float_to_f16_bits(1e10f), 0x7C00);
  EXPECT_EQ(amk::float_to_f16_bits(-1e10f), 0xFC00);
  EXPECT_EQ(amk::float_to_f16_bits(kInf), 0x7C00);
  EXPECT_TRUE(std::isnan(amk::f16_bits_to_float(amk::float_to_f16_bits(kNaN))));
}

TEST(TensorF16, Subnormals) {
  EXPECT_EQ(amk::float_to_f16_bits(0x1p-24f), 0x0001);      // smallest subnormal
  EXPECT_EQ(amk::float_to_f16_bits(0x1p-25f), 0x0000);      // half of it: tie to even (0)
  EXPECT_EQ(amk::float_to_f16_bits(0x1.8p-25f), 0x0001);    // 0.75 quantum
  EXPECT_EQ(amk::float_to_f16_bits(0x1.8p-24f), 0x0002);    // 1.5 quanta: tie to even (2)
  EXPECT_EQ(amk::float_to_f16_bits(0x1.4p-23f), 0x0002);    // 2.5 quanta: tie to even (2)
  EXPECT_EQ(amk::float_to_f16_bits(0x1p-14f), 0x0400);      // smallest normal
  EXPECT_EQ(amk::float_to_f16_bits(0x1p-14f - 0x1p-25f), 0x0400);  // rounds up into normals
  EXPECT_EQ(amk::float_to_f16_bits(-0x1p-24f), 0x8001);
  EXPECT_EQ(amk::float_to_f16_bits(-0.0f), 0x8000);
  EXPECT_FLOAT_EQ(amk::f16_bits_to_float(0x03FF), 0x1.ff8p-15f);  // largest subnormal
}

TEST(TensorF16, MatchesNearestValueSearch) {
  const ReferenceRounding reference_round(kF16);
  for (float v : sample_floats(2)) ASSERT_EQ(amk::float_to_f16_bits(v), reference_round(v)) << v;
}

#if defined(__FLT16_MAX__)
// A second, unrelated implementation: the compiler's own float -> _Float16 conversion.
TEST(TensorF16, MatchesCompilerFloat16) {
  for (float v : sample_floats(3)) {
    const auto h = static_cast<_Float16>(v);
    ASSERT_EQ(amk::float_to_f16_bits(v), std::bit_cast<uint16_t>(h)) << v;
  }
}
#endif

// ---- F8 -------------------------------------------------------------------------------------
TEST(TensorF8, E4M3FnRoundTripAndSaturation) {
  for (uint32_t b = 0; b < 256; ++b) {
    const float v = f8_value(DType::F8E4M3, uint8_t(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    EXPECT_EQ(double(v), textbook_value(b, kE4M3)) << b;
    EXPECT_EQ(f8_bits(DType::F8E4M3, v), b) << b;
  }
  EXPECT_EQ(f8_bits(DType::F8E4M3, 448.0f), 0x7E);
  EXPECT_EQ(f8_bits(DType::F8E4M3, 464.0f), 0x7E);  // tie between 448 and (NaN-coded) 480: even
  EXPECT_EQ(f8_bits(DType::F8E4M3, 470.0f), 0x7F);  // rounds past the largest finite: NaN
  EXPECT_EQ(f8_bits(DType::F8E4M3, kInf), 0x7F);    // no infinities in the fn variant
  EXPECT_EQ(f8_bits(DType::F8E4M3, -1e6f), 0xFF);
  EXPECT_EQ(f8_bits(DType::F8E4M3, 0x1p-9f), 0x01);  // smallest subnormal
  const ReferenceRounding reference_round(kE4M3);
  for (float v : sample_floats(4)) ASSERT_EQ(f8_bits(DType::F8E4M3, v), reference_round(v)) << v;
}

TEST(TensorF8, E5M2RoundTripAndOverflow) {
  for (uint32_t b = 0; b < 256; ++b) {
    const float v = f8_value(DType::F8E5M2, uint8_t(b));
    if ((b & 0x7C) == 0x7C && (b & 3) != 0) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    if ((b & 0x7F) == 0x7C) {
      EXPECT_TRUE(std::isinf(v)) << b;
    } else {
      EXPECT_EQ(double(v), textbook_value(b, kE5M2)) << b;
    }
    EXPECT_EQ(f8_bits(DType::F8E5M2, v), b) << b;
  }
  EXPECT_EQ(f8_bits(DType::F8E5M2, 57344.0f), 0x7B);
  EXPECT_EQ(f8_bits(DType::F8E5M2, 61440.0f), 0x7C);  // midpoint to 65536: ties to even = inf
  EXPECT_TRUE(std::isnan(f8_value(DType::F8E5M2, f8_bits(DType::F8E5M2, kNaN))));
  const ReferenceRounding reference_round(kE5M2);
  for (float v : sample_floats(5)) ASSERT_EQ(f8_bits(DType::F8E5M2, v), reference_round(v)) << v;
}

// ---- integer storage ------------------------------------------------------------------------
TEST(TensorStorage, I4PacksTwoPerByteLowNibbleFirst) {
  const Tensor t = Tensor::from_ints(DType::I4, {5}, std::vector<int64_t>{1, 2, 3, 15, 0});
  ASSERT_EQ(t.bytes.size(), 3u);
  EXPECT_EQ(t.bytes[0], 0x21);
  EXPECT_EQ(t.bytes[1], 0xF3);
  EXPECT_EQ(t.bytes[2], 0x00);
  EXPECT_EQ(t.get_int(3), 15);
  EXPECT_EQ(t.get(3), 15.0f);  // the unsigned nibble; DEQUANT applies the -8

  Tensor u = t;
  u.set_int(1, 7);  // the high nibble of byte 0; the low nibble must survive
  EXPECT_EQ(u.bytes[0], 0x71);
  u.set(0, 9.0f);
  EXPECT_EQ(u.bytes[0], 0x79);
  EXPECT_THROW(u.set_int(0, 16), OpError);
  EXPECT_THROW(u.set_int(0, -1), OpError);
}

TEST(TensorStorage, SignedAndUnsignedBytes) {
  const Tensor i8 = Tensor::from_ints(DType::I8, {3}, std::vector<int64_t>{-128, 127, -1});
  EXPECT_EQ(i8.bytes, (std::vector<uint8_t>{0x80, 0x7F, 0xFF}));
  EXPECT_EQ(i8.get_int(0), -128);
  EXPECT_EQ(i8.get(2), -1.0f);
  EXPECT_THROW(Tensor::from_ints(DType::I8, {1}, std::vector<int64_t>{128}), OpError);

  const Tensor u8 = Tensor::from_ints(DType::U8, {2}, std::vector<int64_t>{0, 255});
  EXPECT_EQ(u8.get_int(1), 255);
  EXPECT_THROW(Tensor::from_ints(DType::U8, {1}, std::vector<int64_t>{-1}), OpError);

  const Tensor i32 = Tensor::from_ints(DType::I32, {2}, std::vector<int64_t>{INT32_MAX, INT32_MIN});
  EXPECT_EQ(i32.get_int(0), INT32_MAX);  // exact, unlike get(), which widens through float
  EXPECT_EQ(i32.get_int(1), INT32_MIN);
  EXPECT_EQ(i32.bytes[3], 0x7F);  // little-endian
  EXPECT_THROW(Tensor::from_ints(DType::I32, {1}, std::vector<int64_t>{int64_t{1} << 31}), OpError);

  Tensor b = Tensor::zeros(DType::BOOL, {3});
  b.set(0, 0.5f);
  b.set_int(1, 7);
  b.set(2, 0.0f);
  EXPECT_EQ(b.bytes, (std::vector<uint8_t>{1, 1, 0}));
  EXPECT_EQ(b.get(0), 1.0f);
}

TEST(TensorStorage, FloatToIntegerTruncatesTowardZero) {
  Tensor t = Tensor::zeros(DType::I32, {3});
  t.set(0, -2.7f);
  t.set(1, 2.7f);
  EXPECT_EQ(t.get_int(0), -2);
  EXPECT_EQ(t.get_int(1), 2);
  EXPECT_THROW(t.set(2, kNaN), OpError);
  EXPECT_THROW(t.set(2, 3e9f), OpError);
  // And the other way: a float tensor read as an integer.
  const Tensor f = Tensor::from_floats(DType::F32, {2}, std::vector<float>{-3.5f, kNaN});
  EXPECT_EQ(f.get_int(0), -3);
  EXPECT_THROW((void)f.get_int(1), OpError);
}

TEST(TensorStorage, SizesShapesAndBounds) {
  EXPECT_EQ(Tensor::zeros(DType::F32, {2, 3}).bytes.size(), 24u);
  EXPECT_EQ(Tensor::zeros(DType::BF16, {2, 3}).bytes.size(), 12u);
  EXPECT_EQ(Tensor::zeros(DType::F8E5M2, {5}).bytes.size(), 5u);
  EXPECT_EQ(Tensor::zeros(DType::I4, {3, 3}).bytes.size(), 5u);  // 9 nibbles round up
  EXPECT_EQ(Tensor::zeros(DType::F32, {}).numel(), 1);            // a scalar
  EXPECT_EQ(Tensor::zeros(DType::F32, {4, 0}).numel(), 0);
  EXPECT_THROW(Tensor::zeros(DType::F32, {2, -1}), OpError);
  EXPECT_THROW(Tensor::from_floats(DType::F32, {3}, std::vector<float>{1, 2}), OpError);

  Tensor t = Tensor::zeros(DType::F16, {4});
  EXPECT_THROW((void)t.get(4), OpError);
  EXPECT_THROW((void)t.get(-1), OpError);
  EXPECT_THROW(t.set(4, 1.0f), OpError);
  // A hand-built tensor whose bytes do not cover its shape is caught, not read past.
  Tensor bad;
  bad.dtype = DType::F32;
  bad.shape = {4};
  bad.bytes.resize(8);
  EXPECT_EQ(bad.get(1), 0.0f);
  EXPECT_THROW((void)bad.get(2), OpError);
  EXPECT_THROW(bad.fill(1.0f), OpError);
}

// ref::load_range (the reference ops' row reads: cached keys and values, weight rows) gives
// what ref::load gives element by element, for every storage type, and checks its range once:
// an index outside the shape, or bytes that do not cover it, is an error, not a read past.
TEST(TensorStorage, RangeLoadsMatchElementLoadsAndCheckTheRange) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> small(0, 15);
  for (const DType d : {DType::F32, DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2,
                        DType::I32, DType::I8, DType::U8, DType::I4}) {
    SCOPED_TRACE(int(d));
    std::vector<float> values(21);
    for (float& v : values) v = float(small(rng)) * 0.37f;
    const bool integer = d == DType::I32 || d == DType::I8 || d == DType::U8 || d == DType::I4;
    if (integer)
      for (float& v : values) v = std::trunc(v);
    const Tensor t = Tensor::from_floats(d, {3, 7}, values);
    for (const int64_t first : {0, 5, 14})
      for (const size_t n : {size_t(1), size_t(7)}) {
        std::vector<double> got(n, -1.0);
        amk::ref::load_range(t, first, got);
        for (size_t j = 0; j < n; ++j)
          EXPECT_EQ(got[j], amk::ref::load(t, first + int64_t(j))) << first << " + " << j;
      }
    std::vector<double> two(2);
    EXPECT_THROW(amk::ref::load_range(t, 20, two), OpError);  // element 21 of 21
    EXPECT_THROW(amk::ref::load_range(t, -1, two), OpError);
    std::vector<double> none;
    EXPECT_NO_THROW(amk::ref::load_range(t, 21, none));  // nothing asked, nothing read
  }
  Tensor bad;  // a hand-built tensor whose bytes do not cover its shape
  bad.dtype = DType::BF16;
  bad.shape = {8};
  bad.bytes.resize(8);
  std::vector<double> four(4), five(5);
  EXPECT_NO_THROW(amk::ref::load_range(bad, 0, four));
  EXPECT_THROW(amk::ref::load_range(bad, 0, five), OpError);
}

TEST(TensorStorage, FillToFloatsAndRoundToDtype) {
  Tensor h = Tensor::zeros(DType::F16, {3});
  h.fill(0.1f);
  for (float v : h.to_floats()) EXPECT_EQ(v, amk::f16_bits_to_float(amk::float_to_f16_bits(0.1f)));

  Tensor q = Tensor::zeros(DType::I4, {3});
  q.fill(5.0f);
  EXPECT_EQ(q.bytes, (std::vector<uint8_t>{0x55, 0x05}));  // the padding nibble stays zero

  Tensor n = Tensor::zeros(DType::BF16, {2});
  n.fill(kNaN);
  EXPECT_TRUE(std::isnan(n.get(1)));

  EXPECT_EQ(amk::round_to_dtype(DType::F32, 0.1f), 0.1f);
  EXPECT_EQ(amk::round_to_dtype(DType::BF16, 1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(amk::round_to_dtype(DType::F16, 70000.0f), kInf);
  EXPECT_EQ(amk::round_to_dtype(DType::I8, -3.9f), -3.0f);

  const Tensor f = Tensor::from_floats(DType::BF16, {2, 2}, std::vector<float>{1, 2, 3, 1.0f + 0x1p-8f});
  EXPECT_EQ(f.to_floats(), (std::vector<float>{1, 2, 3, 1}));
}

}  // namespace

// from_floats takes a bit-trick fast path for BF16; it must agree with the general encoder
// (set()) on every class of float: normals, subnormals, ties, overflow, infinities and NaNs.
TEST(TensorBf16, FromFloatsFastPathMatchesSet) {
  std::vector<float> v;
  uint32_t state = 12345u;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    v.push_back(std::bit_cast<float>(state));  // every exponent, NaNs and subnormals included
  }
  for (uint32_t bits : {0x00000000u, 0x80000000u, 0x00000001u, 0x7f7fffffu, 0x7f800000u,
                        0xff800000u, 0x7fc00001u, 0x3f808000u, 0x3f818000u, 0x00008000u})
    v.push_back(std::bit_cast<float>(bits));
  const Tensor fast = Tensor::from_floats(DType::BF16, {int64_t(v.size())}, v);
  Tensor slow = Tensor::zeros(DType::BF16, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) slow.set(int64_t(i), v[i]);
  ASSERT_EQ(fast.bytes.size(), slow.bytes.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t a, b;
    std::memcpy(&a, fast.bytes.data() + 2 * i, 2);
    std::memcpy(&b, slow.bytes.data() + 2 * i, 2);
    ASSERT_EQ(a, b) << "float bits 0x" << std::hex << std::bit_cast<uint32_t>(v[i]);
  }
}
