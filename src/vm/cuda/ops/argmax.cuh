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
// op_fail codes (code >> 4 = AMK_OP_SAMPLE_ARGMAX): 1 empty last dimension or a non-float input
// (or a partial's bad range), 2 output not I32 or not one element per row (or a partial's pairs
// row out of range), 3 op scratch too small, 4 unknown flags or a reduce input that is not pairs;
// sampling (flags bit 1, ops/sampling.cuh): 5, 6, 7.
#pragma once

#include <climits>

#include "vm/cuda/ops/buffer_dims.h"
#include "vm/cuda/ops/elementwise.cuh"
#include "vm/cuda/ops/sampling.cuh"

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

// The block's best of every thread's `best`: warp shuffles, then warp 0 through scratch. The
// result is valid on thread 0. Ends with a consumer barrier (red_v / red_i are free again).
__device__ __forceinline__ ArgmaxCandidate argmax_block(const OpContext& c, ArgmaxCandidate best,
                                                        float* red_v, int32_t* red_i) {
  const int warp = c.tid >> 5, lane = c.tid & 31, n_warps = c.n_threads >> 5;
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
  consumer_sync(c.n_threads);
  ArgmaxCandidate total;
  if (warp == 0) {
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
  }
  consumer_sync(c.n_threads);
  return total;
}

// This thread's best over elements [begin, end) of a float buffer, visited in increasing index
// order: 16-byte loads (four in flight) where the start is 16-byte aligned.
__device__ __forceinline__ ArgmaxCandidate argmax_scan(const OpContext& c, const amk_buffer_t& b,
                                                       int64_t begin, int64_t end) {
  ArgmaxCandidate best;
  const int tid = c.tid, nt = c.n_threads;
  int64_t tail_start = begin;
  const float* row = static_cast<const float*>(b.ptr) + begin;
  if (b.dtype == AMK_DTYPE_F32 && is_aligned16(row)) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int64_t n4 = (end - begin) >> 2;
    int64_t q = tid;
    for (; q + 3 * nt < n4; q += 4 * nt) {
      const float4 a0 = row4[q], a1 = row4[q + nt], a2 = row4[q + 2 * nt], a3 = row4[q + 3 * nt];
      best.consider4(a0, int32_t(begin + 4 * q));
      best.consider4(a1, int32_t(begin + 4 * (q + nt)));
      best.consider4(a2, int32_t(begin + 4 * (q + 2 * nt)));
      best.consider4(a3, int32_t(begin + 4 * (q + 3 * nt)));
    }
    for (; q < n4; q += nt) best.consider4(row4[q], int32_t(begin + 4 * q));
    tail_start = begin + (n4 << 2);
  }
  for (int64_t j = tail_start + tid; j < end; j += nt) best.consider(load_f(b, j), int32_t(j));
  return best;
}

// Modes (reference: src/vm/reference/ops/argmax.cpp): every row (no params); a PARTIAL over
// logits [n_off, n_off + N_tile) of one row writing (value, index) as row m_off of an F32 [P, 2]
// buffer (N_tile > 0); a REDUCE of such pairs (flags bit 0). The pairs carry indices as F32,
// exact below 2^24.
__device__ inline void op_sample_argmax(const OpContext& c) {
  const amk_params_t& p = c.inst->params;
  constexpr int code = AMK_OP_SAMPLE_ARGMAX * 16;
  const amk_buffer_t& in = in_buf(c, 0);
  const amk_buffer_t& out = out_buf(c, 0);
  if (c.scratch_bytes < 32 * int(sizeof(float) + sizeof(int32_t))) return op_fail(c, code + 3);
  float* red_v = c.scratch;
  int32_t* red_i = reinterpret_cast<int32_t*>(c.scratch + 32);
  const int64_t last = last_dim(in);
  if ((p.flags & ~3) != 0) return op_fail(c, code + 4);

  if ((p.flags & 2) != 0) {  // sample: [pairs,] logits row, settings floats, settings ints
    const int first = p.flags & 1;
    if (c.inst->n_inputs != first + 3) return op_fail(c, code + 7);
    const amk_buffer_t& logits = in_buf(c, first);
    const amk_buffer_t& floats = in_buf(c, first + 1);
    const amk_buffer_t& ints = in_buf(c, first + 2);
    const int64_t v_last = last_dim(logits);
    if (logits.numel < 1 || v_last != logits.numel || logits.numel > INT_MAX ||
        !is_f32_or_bf16(logits.dtype) || floats.dtype != AMK_DTYPE_F32 || floats.numel < 4 ||
        ints.dtype != AMK_DTYPE_I32 || ints.numel < 8)
      return op_fail(c, code + 7);
    if (out.dtype != AMK_DTYPE_I32 || out.numel != 1) return op_fail(c, code + 2);
    ArgmaxCandidate best;
    if (first == 1) {
      if (last != 2 || in.numel < 2 || in.dtype != AMK_DTYPE_F32) return op_fail(c, code + 4);
      const float* pairs = static_cast<const float*>(in.ptr);
      for (int64_t k = c.tid; k < in.numel / 2; k += c.n_threads)
        best.consider(pairs[2 * k], int32_t(pairs[2 * k + 1]));
    } else {
      best = argmax_scan(c, logits, 0, logits.numel);
    }
    const ArgmaxCandidate total = argmax_block(c, best, red_v, red_i);
    sample_from_logits(c, logits, floats, ints, out, total.v, total.i);
    return;
  }
  if (c.inst->n_inputs != 1) return op_fail(c, code + 7);
  if ((p.flags & 1) != 0) {  // reduce the (value, index) pairs
    if (last != 2 || in.numel < 2 || in.dtype != AMK_DTYPE_F32) return op_fail(c, code + 4);
    if (out.dtype != AMK_DTYPE_I32 || out.numel != 1) return op_fail(c, code + 2);
    const float* pairs = static_cast<const float*>(in.ptr);
    ArgmaxCandidate best;
    for (int64_t k = c.tid; k < in.numel / 2; k += c.n_threads)
      best.consider(pairs[2 * k], int32_t(pairs[2 * k + 1]));
    const ArgmaxCandidate total = argmax_block(c, best, red_v, red_i);
    if (c.tid == 0) static_cast<int32_t*>(out.ptr)[0] = total.i;
    return;
  }
  if (p.N_tile > 0) {  // partial: one slice of a single row
    const int64_t V = in.numel;
    if (last != V || V > (int64_t(1) << 24) || !is_f32_or_bf16(in.dtype) || p.n_off < 0 ||
        int64_t(p.n_off) + p.N_tile > V)
      return op_fail(c, code + 1);
    const int64_t out_last = last_dim(out);
    if (out.dtype != AMK_DTYPE_F32 || out_last != 2 || p.m_off < 0 ||
        2 * (int64_t(p.m_off) + 1) > out.numel)
      return op_fail(c, code + 2);
    const ArgmaxCandidate total =
        argmax_block(c, argmax_scan(c, in, p.n_off, int64_t(p.n_off) + p.N_tile), red_v, red_i);
    if (c.tid == 0) {
      float* o = static_cast<float*>(out.ptr) + 2 * int64_t(p.m_off);
      o[0] = total.v;
      o[1] = float(total.i);
    }
    return;
  }
  const int64_t V = last;
  if (V < 1 || in.numel > INT_MAX || !is_f32_or_bf16(in.dtype)) return op_fail(c, code + 1);
  const int64_t rows = in.numel / V;
  if (out.dtype != AMK_DTYPE_I32 || out.numel != rows) return op_fail(c, code + 2);
  for (int64_t r = 0; r < rows; ++r) {
    // The scan's indices are within the row: its begin is r * V, so subtract that back.
    ArgmaxCandidate best = argmax_scan(c, in, r * V, (r + 1) * V);
    if (best.i != INT_MAX) best.i = int32_t(int64_t(best.i) - r * V);
    const ArgmaxCandidate total = argmax_block(c, best, red_v, red_i);
    if (c.tid == 0) static_cast<int32_t*>(out.ptr)[r] = total.i;
  }
}

}  // namespace amk::cuda
