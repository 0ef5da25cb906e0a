// SAMPLE_ARGMAX: for each row of the last dimension V of the logits, the index of the largest
// value, written as I32; mirrors src/vm/reference/ops/argmax.cpp (torch.argmax): the first index
// on ties, and NaN counts as larger than every number, so the first NaN wins.
//
// One block per row (V up to ~152k): every thread scans a strided share with 16-byte loads (four
// in flight per thread), keeping its best (value, index); warps merge with shuffles, then warp 0
// merges the per-warp bests through op scratch. The merge rule is a total order (NaN above all
// numbers, then value, then the smaller index), so the result does not depend on the thread
// count or the reduction order.
//
// Op scratch: 32 floats + 32 int32 (kArgmaxScratchBytes in scratch.h).
//
// op_fail codes (code >> 4 = AMK_OP_SAMPLE_ARGMAX): 1 empty last dimension or a non-float input,
// 2 output not I32 or not one element per row, 3 op scratch too small.
#pragma once

#include <climits>

#include "vm/cuda/ops/elementwise.cuh"

namespace amk::cuda {

// (v, i) is a better argmax than (best_v, best_i): NaN first, then larger, then earlier.
__device__ __forceinline__ bool argmax_beats(float v, int32_t i, float best_v, int32_t best_i) {
  const bool v_nan = v != v, best_nan = best_v != best_v;
  if (v_nan || best_nan) return v_nan && (!best_nan || i < best_i);
  return v > best_v || (v == best_v && i < best_i);
}

struct ArgmaxCandidate {
  float v = -__builtin_huge_valf();  // -inf with index INT_MAX: loses to every element
  int32_t i = INT_MAX;

  __device__ __forceinline__ void consider(float value, int32_t index) {
    if (argmax_beats(value, index, v, i)) {
      v = value;
      i = index;
    }
  }
  __device__ __forceinline__ void consider4(const float4& q, int32_t index) {
    consider(q.x, index);
    consider(q.y, index + 1);
    consider(q.z, index + 2);
    consider(q.w, index + 3);
  }
};

__device__ inline void op_sample_argmax(const OpContext& c) {
  const amk_buffer_t& logits = in_buf(c, 0);
  const amk_buffer_t& out = out_buf(c, 0);
  const int64_t V = logits.rank > 0 ? logits.shape[logits.rank - 1] : logits.numel;
  if (V < 1 || V > INT_MAX || !is_f32_or_bf16(logits.dtype))
    return op_fail(c, AMK_OP_SAMPLE_ARGMAX * 16 + 1);
  const int64_t rows = logits.numel / V;
  if (out.dtype != AMK_DTYPE_I32 || out.numel != rows)
    return op_fail(c, AMK_OP_SAMPLE_ARGMAX * 16 + 2);
  if (c.scratch_bytes < 32 * int(sizeof(float) + sizeof(int32_t)))
    return op_fail(c, AMK_OP_SAMPLE_ARGMAX * 16 + 3);
  float* red_v = c.scratch;
  int32_t* red_i = reinterpret_cast<int32_t*>(c.scratch + 32);
  const int tid = c.tid, nt = c.n_threads;
  const int warp = tid >> 5, lane = tid & 31, n_warps = nt >> 5;

  for (int64_t r = 0; r < rows; ++r) {
    ArgmaxCandidate best;
    // Each thread visits its elements in increasing index order.
    int64_t tail_start = 0;
    const float* row = static_cast<const float*>(logits.ptr) + r * V;
    if (logits.dtype == AMK_DTYPE_F32 && is_aligned16(row)) {
      const float4* row4 = reinterpret_cast<const float4*>(row);
      const int64_t n4 = V >> 2;
      int64_t q = tid;
      for (; q + 3 * nt < n4; q += 4 * nt) {
        const float4 a0 = row4[q], a1 = row4[q + nt], a2 = row4[q + 2 * nt], a3 = row4[q + 3 * nt];
        best.consider4(a0, int32_t(4 * q));
        best.consider4(a1, int32_t(4 * (q + nt)));
        best.consider4(a2, int32_t(4 * (q + 2 * nt)));
        best.consider4(a3, int32_t(4 * (q + 3 * nt)));
      }
      for (; q < n4; q += nt) best.consider4(row4[q], int32_t(4 * q));
      tail_start = n4 << 2;
    }
    for (int64_t j = tail_start + tid; j < V; j += nt) best.consider(load_f(logits, r * V + j), int32_t(j));

    // Warp merge, then across warps through scratch.
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, best.v, o);
      const int32_t i = __shfl_xor_sync(0xffffffffu, best.i, o);
      best.consider(v, i);
    }
    if (lane == 0) {
      red_v[warp] = best.v;
      red_i[warp] = best.i;
    }
    consumer_sync(nt);
    if (warp == 0) {
      ArgmaxCandidate total;
      if (lane < n_warps) {
        total.v = red_v[lane];
        total.i = red_i[lane];
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, total.v, o);
        const int32_t i = __shfl_xor_sync(0xffffffffu, total.i, o);
        total.consider(v, i);
      }
      if (lane == 0) static_cast<int32_t*>(out.ptr)[r] = total.i;
    }
    consumer_sync(nt);  // red_v/red_i are reused by the next row
  }
}

}  // namespace amk::cuda
