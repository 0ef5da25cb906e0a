// RMSNORM: every row of `hidden` elements of x (rows = numel / hidden) becomes
// x * rsqrt(mean(x^2) + eps) * w; mirrors op_rmsnorm in src/vm/reference/ops/norm.cpp.
//
// Two shapes of work, because the lowering emits two kinds of RMSNORM:
//   - short rows (hidden <= kWarpRowMax, Qwen3's per-head q/k norms: [n_heads, head_dim]):
//     one warp per row, rows spread over the warps, reduced with shuffles; no barrier at all;
//   - long rows (the unfused layer norms, one row of the model width): the whole block per row,
//     reduced with block_sum over 32 floats of op scratch.
// The inverse RMS is rms_inv()'s formula, rsqrtf(sum / hidden + eps), so the unfused norm and
// the fused RMSNORM_GEMV_TILE prologue agree.
//
// Aliasing: every element is re-read and written by the thread that read it for the sum, after
// the row's reduction, so out may alias x.
//
// op_fail codes (code >> 4 = AMK_OP_RMSNORM): 1 bad hidden / x shape, 2 weight or output size,
// 3 a non-float operand, 4 op scratch smaller than the 32 floats of block_sum.
#pragma once

#include "vm/cuda/ops/buffer_dims.h"
#include "vm/cuda/ops/elementwise.cuh"

namespace amk::cuda {

inline constexpr int kWarpRowMax = 256;  // rows up to this long take a warp each

__device__ inline void op_rmsnorm(const OpContext& c) {
  const amk_buffer_t& x = in_buf(c, 0);
  const amk_buffer_t& w = in_buf(c, 1);
  const amk_buffer_t& out = out_buf(c, 0);
  const int64_t hidden = c.inst->params.hidden;
  const float eps = c.inst->params.eps;
  if (hidden < 1 || last_dim(x) != hidden || x.numel % hidden != 0)
    return op_fail(c, AMK_OP_RMSNORM * 16 + 1);
  if (w.numel != hidden || out.numel != x.numel) return op_fail(c, AMK_OP_RMSNORM * 16 + 2);
  if (!is_f32_or_bf16(x.dtype) || !is_f32_or_bf16(w.dtype) || !is_f32_or_bf16(out.dtype))
    return op_fail(c, AMK_OP_RMSNORM * 16 + 3);
  const int64_t rows = x.numel / hidden;
  const float hidden_f = float(hidden);

  if (hidden <= kWarpRowMax) {
    const int warp = c.tid >> 5, lane = c.tid & 31, n_warps = c.n_threads >> 5;
    for (int64_t r = warp; r < rows; r += n_warps) {
      const int64_t base = r * hidden;
      float sum_sq = 0.0f;
      for (int64_t j = lane; j < hidden; j += 32) {
        const float v = load_f(x, base + j);
        sum_sq = fmaf(v, v, sum_sq);
      }
      const float inv = rsqrtf(warp_sum(sum_sq) / hidden_f + eps);
      for (int64_t j = lane; j < hidden; j += 32)
        store_f(out, base + j, load_f(x, base + j) * inv * load_f(w, j));
    }
    return;
  }

  if (c.scratch_bytes < 32 * int(sizeof(float))) return op_fail(c, AMK_OP_RMSNORM * 16 + 4);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * hidden;
    float sum_sq = 0.0f;
    for (int64_t j = c.tid; j < hidden; j += c.n_threads) {
      const float v = load_f(x, base + j);
      sum_sq = fmaf(v, v, sum_sq);
    }
    // block_sum ends with a barrier, so no thread writes before every thread has read the row.
    const float total = block_sum(sum_sq, c.scratch, c.tid, c.n_threads);
    const float inv = rsqrtf(total / hidden_f + eps);
    for (int64_t j = c.tid; j < hidden; j += c.n_threads)
      store_f(out, base + j, load_f(x, base + j) * inv * load_f(w, j));
  }
}

}  // namespace amk::cuda
