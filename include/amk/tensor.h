// Host tensors for the reference VM: typed storage, float access.
// Float storage types round-to-nearest-even on write; reads widen exactly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "amk/ir.h"

namespace amk {

float bf16_bits_to_float(uint16_t bits);
uint16_t float_to_bf16_bits(float v);  // round to nearest even; NaN stays NaN
float f16_bits_to_float(uint16_t bits);
uint16_t float_to_f16_bits(float v);   // round to nearest even; overflow -> inf
// The value `v` takes once stored as `dtype` and read back (identity for F32).
float round_to_dtype(DType dtype, float v);

struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // dtype_nbytes(dtype, numel()) bytes, little-endian

  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  static Tensor from_floats(DType dtype, std::vector<int64_t> shape, std::span<const float> values);
  static Tensor from_ints(DType dtype, std::vector<int64_t> shape, std::span<const int64_t> values);

  int64_t numel() const;
  // Element access, by flat row-major index. I4 is packed two per byte, low nibble first, and
  // reads as the unsigned nibble 0..15 (DEQUANT applies the -8 offset); I8 is signed.
  float get(int64_t i) const;
  void set(int64_t i, float v);
  int64_t get_int(int64_t i) const;
  void set_int(int64_t i, int64_t v);
  std::vector<float> to_floats() const;
  void fill(float v);
};

}  // namespace amk
