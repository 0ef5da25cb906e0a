#include "runtime/cpu_attention.h"

#include <algorithm>
#include <cmath>

#include "runtime/cpu_kernel.h"

namespace amk {

namespace {

// Independent partial sums, as in the GEMV (cpu_matrix.cpp): vectorised without reassociation.
constexpr int64_t kLanes = 16;

AMK_CPU_KERNEL void scores_of(const float* __restrict q, const float* __restrict keys,
                              int64_t len, int64_t head_dim, float scale,
                              float* __restrict scores) {
  for (int64_t t = 0; t < len; ++t) {
    const float* __restrict k = keys + t * head_dim;
    float acc[kLanes] = {};
    int64_t d = 0;
    for (; d + kLanes <= head_dim; d += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) acc[j] += q[d + j] * k[d + j];
    float s = 0;
    for (; d < head_dim; ++d) s += q[d] * k[d];
    for (int64_t j = 0; j < kLanes; ++j) s += acc[j];
    scores[t] = s * scale;
  }
}

AMK_CPU_KERNEL void weighted_values(const float* __restrict p, const float* __restrict values,
                                    int64_t len, int64_t head_dim, float* __restrict out) {
  std::fill(out, out + head_dim, 0.0f);
  for (int64_t t = 0; t < len; ++t) {
    const float* __restrict v = values + t * head_dim;
    const float w = p[t];
    for (int64_t d = 0; d < head_dim; ++d) out[d] += w * v[d];
  }
}

}  // namespace

void attend_one_head(const float* q, const float* keys, const float* values, int64_t len,
                     int64_t head_dim, float scale, float* scores, float* out) {
  scores_of(q, keys, len, head_dim, scale, scores);
  const float top = *std::max_element(scores, scores + len);
  // The normaliser in double: thousands of positions of similar weight sum without drift.
  double sum = 0;
  for (int64_t t = 0; t < len; ++t) {
    scores[t] = std::exp(scores[t] - top);
    sum += scores[t];
  }
  const auto inv = float(1.0 / sum);
  for (int64_t t = 0; t < len; ++t) scores[t] *= inv;
  weighted_values(scores, values, len, head_dim, out);
}

}  // namespace amk
