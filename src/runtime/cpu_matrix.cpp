#include "runtime/cpu_matrix.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <stdexcept>

#include "amk/tensor.h"

#include "runtime/cpu_kernel.h"

namespace amk {

namespace {

// Lanes of independent partial sums per row: the compiler keeps them in vector registers
// (2 AVX or 4 SSE registers per 16) without reassociating any sum, so no -ffast-math is needed,
// and 32 of them give the loads enough independent work to keep memory busy.
constexpr int64_t kLanes = 32;

inline float reduce_lanes(float (&acc)[kLanes]) {
  for (int64_t j = 0; j < kLanes / 2; ++j) acc[j] += acc[j + kLanes / 2];
  for (int64_t j = 0; j < kLanes / 4; ++j) acc[j] += acc[j + kLanes / 4];
  for (int64_t j = 0; j < kLanes / 8; ++j) acc[j] += acc[j + kLanes / 8];
  return (acc[0] + acc[2]) + (acc[1] + acc[3]);
}

AMK_CPU_KERNEL void rows_f32(const float* __restrict w, int64_t K, const float* __restrict x,
                             const float* __restrict bias, float* __restrict out, int64_t begin,
                             int64_t end, bool accumulate) {
  for (int64_t r = begin; r < end; ++r) {
    const float* __restrict row = w + r * K;
    float acc[kLanes] = {};
    int64_t k = 0;
    for (; k + kLanes <= K; k += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) acc[j] += row[k + j] * x[k + j];
    float tail = 0;
    for (; k < K; ++k) tail += row[k] * x[k];
    float v = reduce_lanes(acc) + tail;
    if (bias != nullptr) v += bias[r];
    out[r] = accumulate ? out[r] + v : v;
  }
}

// bf16 is the high half of an f32: widening is a shift, exact.
inline float widen_bf16(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

AMK_CPU_KERNEL void rows_bf16(const uint16_t* __restrict w, int64_t K, const float* __restrict x,
                              const float* __restrict bias, float* __restrict out, int64_t begin,
                              int64_t end, bool accumulate) {
  for (int64_t r = begin; r < end; ++r) {
    const uint16_t* __restrict row = w + r * K;
    float acc[kLanes] = {};
    int64_t k = 0;
    for (; k + kLanes <= K; k += kLanes)
      for (int64_t j = 0; j < kLanes; ++j)
        acc[j] += std::bit_cast<float>(uint32_t(row[k + j]) << 16) * x[k + j];
    float tail = 0;
    for (; k < K; ++k) tail += widen_bf16(row[k]) * x[k];
    float v = reduce_lanes(acc) + tail;
    if (bias != nullptr) v += bias[r];
    out[r] = accumulate ? out[r] + v : v;
  }
}

void require_matrix(const TensorView& t) {
  if (t.shape.size() != 2)
    throw std::invalid_argument(
        fmt::format("tensor '{}' has rank {}, a weight matrix has rank 2", t.name, t.shape.size()));
  if (t.dtype != StDType::F32 && t.dtype != StDType::F16 && t.dtype != StDType::BF16)
    throw std::invalid_argument(fmt::format("tensor '{}' has dtype {}; the CPU decoder reads F32, "
                                            "F16 and BF16 weights",
                                            t.name, name_of(t.dtype)));
}

// Elements [first, first + n) of `t` as f32 (exact for all three dtypes). The bytes may sit at
// any alignment inside a mapped file, so they are read with memcpy.
void widen(const TensorView& t, int64_t first, int64_t n, float* out) {
  const std::byte* p = t.bytes.data();
  switch (t.dtype) {
    case StDType::F32:
      std::memcpy(out, p + first * 4, size_t(n) * 4);
      return;
    case StDType::F16:
    case StDType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, p + (first + i) * 2, 2);
        out[i] = t.dtype == StDType::F16 ? f16_bits_to_float(bits) : widen_bf16(bits);
      }
      return;
    default:
      throw std::logic_error("widen: unchecked dtype");
  }
}

// Elements [first, first + n) of `t` as bf16: copied when they are bf16, else rounded.
void narrow(const TensorView& t, int64_t first, int64_t n, uint16_t* out) {
  if (t.dtype == StDType::BF16) {
    std::memcpy(out, t.bytes.data() + first * 2, size_t(n) * 2);
    return;
  }
  std::vector<float> wide(static_cast<size_t>(n));
  widen(t, first, n, wide.data());
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16_bits(wide[size_t(i)]);
}

}  // namespace

int64_t CpuMatrix::bytes() const {
  return rows_ * cols_ * (format_ == CpuWeightFormat::BF16 ? 2 : 4);
}

CpuMatrix CpuMatrix::from_tensor(const TensorView& t, CpuWeightFormat format) {
  const TensorView* parts[] = {&t};
  return stacked(parts, format);
}

CpuMatrix CpuMatrix::stacked(std::span<const TensorView* const> parts, CpuWeightFormat format) {
  CpuMatrix m;
  m.format_ = format;
  if (parts.empty()) return m;
  for (const TensorView* t : parts) {
    require_matrix(*t);
    if (t->shape[1] != parts[0]->shape[1])
      throw std::invalid_argument(fmt::format("tensor '{}' has {} columns; '{}' has {}", t->name,
                                              t->shape[1], parts[0]->name, parts[0]->shape[1]));
    m.rows_ += t->shape[0];
  }
  m.cols_ = parts[0]->shape[1];
  m.allocate();
  int64_t at = 0;
  for (const TensorView* t : parts) {
    m.fill(*t, 0, t->numel(), at);
    at += t->numel();
  }
  return m;
}

CpuMatrix CpuMatrix::interleaved(const TensorView& a, const TensorView& b, CpuWeightFormat format) {
  require_matrix(a);
  require_matrix(b);
  if (a.shape != b.shape)
    throw std::invalid_argument(
        fmt::format("tensors '{}' and '{}' must have one shape to interleave", a.name, b.name));
  CpuMatrix m;
  m.format_ = format;
  m.rows_ = 2 * a.shape[0];
  m.cols_ = a.shape[1];
  m.allocate();
  const int64_t K = m.cols_;
  for (int64_t r = 0; r < a.shape[0]; ++r) {
    m.fill(a, r * K, K, 2 * r * K);
    m.fill(b, r * K, K, (2 * r + 1) * K);
  }
  return m;
}

void CpuMatrix::allocate() {
  if (format_ == CpuWeightFormat::F32)
    f32_.resize(size_t(rows_ * cols_));
  else
    bf16_.resize(size_t(rows_ * cols_));
}

void CpuMatrix::fill(const TensorView& t, int64_t first, int64_t n, int64_t at) {
  if (format_ == CpuWeightFormat::F32)
    widen(t, first, n, f32_.data() + at);
  else
    narrow(t, first, n, bf16_.data() + at);
}

void CpuMatrix::multiply_rows(const float* x, const float* bias, float* out, int64_t begin,
                              int64_t end, bool accumulate) const {
  if (format_ == CpuWeightFormat::F32)
    rows_f32(f32_.data(), cols_, x, bias, out, begin, end, accumulate);
  else
    rows_bf16(bf16_.data(), cols_, x, bias, out, begin, end, accumulate);
}

void CpuMatrix::copy_row(int64_t r, float* out) const {
  if (format_ == CpuWeightFormat::F32) {
    std::memcpy(out, f32_.data() + r * cols_, size_t(cols_) * 4);
    return;
  }
  for (int64_t k = 0; k < cols_; ++k) out[k] = widen_bf16(bf16_[size_t(r * cols_ + k)]);
}

}  // namespace amk
