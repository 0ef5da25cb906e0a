// GGUF dequantisation to f32, block by block. Each formula keeps gguf.quants' operation order
// (see amk/gguf_dequant.h): a scale times a quant is rounded to f32 before a min is added or
// subtracted, and sub-block scales are formed (d * sc) before they multiply a quant.
#include "amk/gguf_dequant.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "model/strict_json.h"

namespace amk {
namespace {

uint16_t u16_at(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float f16_at(const std::byte* p) { return f16_bits_to_f32(u16_at(p)); }
uint8_t u8_at(const std::byte* p) { return static_cast<uint8_t>(*p); }

void q4_0_block(const std::byte* b, float* y) {
  const float d = f16_at(b);
  const std::byte* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(int(u8_at(qs + j) & 0x0F) - 8);
    y[j + 16] = d * static_cast<float>(int(u8_at(qs + j) >> 4) - 8);
  }
}

void q4_1_block(const std::byte* b, float* y) {
  const float d = f16_at(b);
  const float m = f16_at(b + 2);
  const std::byte* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    const float lo = d * static_cast<float>(u8_at(qs + j) & 0x0F);
    const float hi = d * static_cast<float>(u8_at(qs + j) >> 4);
    y[j] = lo + m;
    y[j + 16] = hi + m;
  }
}

void q8_0_block(const std::byte* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(u8_at(b + 2 + j))) * d;
}

// The K-quants' 12 bytes of packed 6-bit scales and mins for 8 sub-blocks of 32.
void k_scales(const std::byte* s, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = u8_at(s + j) & 63;
    mn[j] = u8_at(s + 4 + j) & 63;
    sc[j + 4] = uint8_t((u8_at(s + 8 + j) & 0x0F) | ((u8_at(s + j) >> 2) & 0x30));
    mn[j + 4] = uint8_t((u8_at(s + 8 + j) >> 4) | ((u8_at(s + 4 + j) >> 2) & 0x30));
  }
}

// Q4_K and Q5_K share everything but the fifth bit (qh, Q5_K only).
void q45_k_block(const std::byte* b, float* y, bool five_bit) {
  const float d = f16_at(b);
  const float dmin = f16_at(b + 2);
  uint8_t sc[8], mn[8];
  k_scales(b + 4, sc, mn);
  const std::byte* qh = b + 16;
  const std::byte* qs = five_bit ? b + 48 : b + 16;
  for (int sb = 0; sb < 8; ++sb) {
    const float dl = d * static_cast<float>(sc[sb]);
    const float ml = dmin * static_cast<float>(mn[sb]);
    const int shift = (sb % 2) * 4;
    for (int l = 0; l < 32; ++l) {
      int q = (u8_at(qs + (sb / 2) * 32 + l) >> shift) & 0x0F;
      if (five_bit) q |= ((u8_at(qh + l) >> sb) & 1) << 4;
      const float scaled = dl * static_cast<float>(q);
      y[sb * 32 + l] = scaled - ml;
    }
  }
}

void q6_k_block(const std::byte* b, float* y) {
  const std::byte* ql = b;
  const std::byte* qh = b + 128;
  const std::byte* scales = b + 192;
  const float d = f16_at(b + 208);
  float ds[16];
  for (int s = 0; s < 16; ++s) ds[s] = d * static_cast<float>(static_cast<int8_t>(u8_at(scales + s)));
  // Two halves of 128; within one, output r takes the nibble r / 64 of ql[r % 64] and the
  // two bits r / 32 of qh[r % 32].
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < 128; ++r) {
      const int lo = (u8_at(ql + h * 64 + r % 64) >> (4 * (r / 64))) & 0x0F;
      const int hi = (u8_at(qh + h * 32 + r % 32) >> (2 * (r / 32))) & 0x03;
      const int q = (lo | (hi << 4)) - 32;
      const int o = h * 128 + r;
      y[o] = ds[o / 16] * static_cast<float>(q);
    }
}

}  // namespace

float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float mag = std::ldexp(static_cast<float>(mant), -24);  // exact: mant < 2^10
    return sign ? -mag : mag;
  }
  const uint32_t bits = exp == 0x1f ? (sign | 0x7f800000u | (mant << 13))
                                    : (sign | ((exp + 112u) << 23) | (mant << 13));
  return std::bit_cast<float>(bits);
}

bool can_dequantize(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0:
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q4_K: case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

std::string_view dequantizable_types_text() {
  return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K";
}

void dequantize_to_f32(GgmlType t, std::span<const std::byte> src, std::span<float> out,
                       std::string_view what) {
  if (!can_dequantize(t))
    throw GgufError(fmt::format("{}: tensor type {} is not supported (AMK dequantises {})", what,
                                name_of(t), dequantizable_types_text()));
  const auto n = static_cast<int64_t>(out.size());
  const int64_t block = ggml_block_elements(t);
  if (n % block != 0)
    throw GgufError(fmt::format("{}: {} weights are not a whole number of {} blocks of {}", what,
                                n, name_of(t), block));
  const int64_t blocks = n / block;
  if (static_cast<uint64_t>(blocks) * uint64_t(ggml_block_bytes(t)) != src.size())
    throw GgufError(fmt::format("{}: {} {} weights need {} bytes, got {}", what, n, name_of(t),
                                blocks * ggml_block_bytes(t), src.size()));
  const std::byte* p = src.data();
  float* y = out.data();
  switch (t) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(y, p, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) y[i] = f16_at(p + 2 * i);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i)
        y[i] = std::bit_cast<float>(static_cast<uint32_t>(u16_at(p + 2 * i)) << 16);
      return;
    default:
      break;
  }
  const int64_t bb = ggml_block_bytes(t);
  for (int64_t i = 0; i < blocks; ++i) {
    const std::byte* b = p + i * bb;
    float* yb = y + i * block;
    switch (t) {
      case GgmlType::Q4_0: q4_0_block(b, yb); break;
      case GgmlType::Q4_1: q4_1_block(b, yb); break;
      case GgmlType::Q8_0: q8_0_block(b, yb); break;
      case GgmlType::Q4_K: q45_k_block(b, yb, false); break;
      case GgmlType::Q5_K: q45_k_block(b, yb, true); break;
      case GgmlType::Q6_K: q6_k_block(b, yb); break;
      default: break;  // unreachable: can_dequantize() above
    }
  }
}

std::vector<float> dequantize(const GgufTensor& tensor, std::string_view file) {
  std::vector<float> out(static_cast<size_t>(tensor.numel()));
  dequantize_to_f32(tensor.type, tensor.data, out,
                    fmt::format("{}: tensor {}", file, model_detail::quote_name(tensor.name)));
  return out;
}

}  // namespace amk
