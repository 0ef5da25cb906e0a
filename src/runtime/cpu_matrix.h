// A weight matrix prepared once for CPU matrix-vector products: rows contiguous and row-major
// (a GEMV streams each row once, front to back), stored as f32 or as bf16 (widened to f32 in
// registers, products summed in f32; half the bytes streamed per token). Which one is the
// caller's choice (amk/cpu_decoder.h's CpuWeights): bf16 of a bf16 checkpoint is exact.
//
// The products are plain loops over independent lane accumulators, which GCC vectorises at -O3
// for any x86-64 (SSE2); the kernels are also cloned for x86-64-v3 (AVX2 + FMA) and picked at
// load time, so one binary runs on every x86-64 machine and uses the wider units where present.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "amk/safetensors.h"

namespace amk {

enum class CpuWeightFormat { F32, BF16 };

class CpuMatrix {
 public:
  CpuMatrix() = default;
  // The checkpoint tensor `t` ([rows, cols], F32 / F16 / BF16) stored as `format` (bf16 rounds
  // to nearest even, unless `t` is bf16 already).
  static CpuMatrix from_tensor(const TensorView& t, CpuWeightFormat format);
  // Several tensors of one column count stacked: their rows in the order given.
  static CpuMatrix stacked(std::span<const TensorView* const> parts, CpuWeightFormat format);
  // Two tensors of the same shape with their rows interleaved (a0, b0, a1, b1, ...): a thread
  // that owns rows 2i and 2i+1 holds gate_i and up_i together and can finish SwiGLU alone.
  static CpuMatrix interleaved(const TensorView& a, const TensorView& b, CpuWeightFormat format);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  CpuWeightFormat format() const { return format_; }
  int64_t bytes() const;

  // out[r] = (accumulate ? out[r] : 0) + dot(row r, x) + (bias ? bias[r] : 0), r in [begin, end).
  // x has cols() values.
  void multiply_rows(const float* x, const float* bias, float* out, int64_t begin, int64_t end,
                     bool accumulate) const;
  // Row r widened to f32 (the embedding lookup).
  void copy_row(int64_t r, float* out) const;

 private:
  void allocate();
  // Elements [first, first + n) of `t` into the storage from element `at` on.
  void fill(const TensorView& t, int64_t first, int64_t n, int64_t at);

  int64_t rows_ = 0, cols_ = 0;
  CpuWeightFormat format_ = CpuWeightFormat::F32;
  std::vector<float> f32_;
  std::vector<uint16_t> bf16_;
};

}  // namespace amk
