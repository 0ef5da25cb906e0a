// One query head's attention over a contiguous run of cached keys and values, in f32: the
// inner loop of the fast CPU decoder's attention (its KV cache keeps one head's positions
// contiguous, [position][head_dim], so both passes stream memory front to back).
#pragma once

#include <cstdint>

namespace amk {

// out[d] = sum_t softmax_t(scale * dot(q, k[t])) * v[t][d] over t in [0, len), d in
// [0, head_dim). `scores` is scratch for len values. The softmax subtracts the largest score
// first, so no exp overflows whatever the scores.
void attend_one_head(const float* q, const float* keys, const float* values, int64_t len,
                     int64_t head_dim, float scale, float* scores, float* out);

}  // namespace amk
