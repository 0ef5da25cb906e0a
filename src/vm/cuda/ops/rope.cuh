// ROPE (opcode 8) and ROPE_FREQ (opcode 19): Llama rotate-half rotary embedding; mirrors
// src/vm/reference/ops/rope.cpp. For each head and i < half = head_dim / 2 the pair
// (x[i], x[i + half]) is rotated by the angle pos * inv_freq[i]. x is [n_heads, head_dim]
// (positions[0]) or [S, n_heads, head_dim] (positions[s] for row s); positions is I32.
//
// The angle is the reference's float32 arithmetic, step by step and immune to contraction or
// fast-math division (explicit _rn intrinsics):
//   ROPE:      inv_freq[i] = 1 / float(pow(double(theta), double(float(i) / float(half))))
//              (amk/rope.h default_rope_inv_freq_f32, src/model/rope.cpp)
//   ROPE_FREQ: inv_freq[i] = input 2 (F32 or BF16, read as float32, must be finite)
//   angle      = float(pos) * inv_freq[i] in float32.
// Angles reach ~1e3 rad at long positions, so cos/sin are taken in double of that float angle,
// exactly as the reference, once per (row, i) into a table in op scratch (head_dim doubles);
// the rotation itself is done in double and rounded once. The table costs half threads one
// sincos each, so the double arithmetic is noise next to the step.
//
// Aliasing: each pair is read and written by one thread, so out may alias x.
//
// op_fail codes (code >> 4 = the opcode): 1 bad head_dim / theta, 2 x not [.., n_heads, head_dim]
// of rank 2 or 3, 3 positions not I32 or of the wrong size, 4 output size or a non-float operand,
// 5 inv_freq table size or a non-finite entry, 6 op scratch < head_dim doubles, 7 another opcode.
#pragma once

#include "vm/cuda/ops/elementwise.cuh"

namespace amk::cuda {

// inv_freq[i] of the default RoPE, the float32 steps of default_rope_inv_freq_f32.
__device__ __forceinline__ float default_rope_inv_freq(float theta, int i, int half) {
  const float exponent = __fdiv_rn(float(i), float(half));
  const float power = float(pow(double(theta), double(exponent)));
  return __fdiv_rn(1.0f, power);
}

// inv_freq[i] for i < half into freq[i] (each thread its share: i = tid, tid + n_threads, ...):
// `table` (ROPE_FREQ) or ROPE's default of `theta`. Position-independent, so an op may run it
// before its task's gate. False on a thread that read a non-finite table entry.
__device__ __forceinline__ bool rope_inv_freqs(int tid, int n_threads, const amk_buffer_t* table,
                                               float theta, int half, double* freq) {
  bool finite = true;
  for (int i = tid; i < half; i += n_threads) {
    const float inv_freq = table ? load_f(*table, i) : default_rope_inv_freq(theta, i, half);
    finite &= isfinite(inv_freq);
    freq[i] = double(inv_freq);
  }
  return finite;
}
// cos/sin of the angles pos * inv_freq[i], i < half, where cos_t[i] holds inv_freq[i] (from
// rope_inv_freqs on the same thread: the same i's) and is overwritten by the cosine; thread
// `tid` of `n_threads` takes i = tid, tid + n_threads, ... The caller barriers before other
// threads read the table.
__device__ __forceinline__ void rope_angles_at(int tid, int n_threads, float pos, int half,
                                               double* cos_t, double* sin_t) {
  for (int i = tid; i < half; i += n_threads)
    sincos(double(__fmul_rn(pos, float(cos_t[i]))), &sin_t[i], &cos_t[i]);
}
// Both: the angles' table in op scratch. False on a thread that read a non-finite table entry.
__device__ __forceinline__ bool rope_angles(const OpContext& c, float pos,
                                            const amk_buffer_t* table, float theta, int half,
                                            double* cos_t, double* sin_t) {
  const bool finite = rope_inv_freqs(c.tid, c.n_threads, table, theta, half, cos_t);
  rope_angles_at(c.tid, c.n_threads, pos, half, cos_t, sin_t);
  return finite;
}

// The rotate-half pair (a, b) = (x[i], x[i + half]) by angle i: in double, rounded once.
__device__ __forceinline__ float2 rope_rotate(double a, double b, double cos_i, double sin_i) {
  return make_float2(float(a * cos_i - b * sin_i), float(b * cos_i + a * sin_i));
}

__device__ inline void op_rope(const OpContext& c) {
  const amk_params_t& p = c.inst->params;
  const int op = c.inst->op;
  const int code = op * 16;
  if (op != AMK_OP_ROPE && op != AMK_OP_ROPE_FREQ) return op_fail(c, AMK_OP_ROPE * 16 + 7);
  const bool table_given = op == AMK_OP_ROPE_FREQ;
  const int head_dim = p.head_dim;
  if (head_dim < 2 || head_dim % 2 != 0 || (!table_given && !(p.theta > 0.0f)))
    return op_fail(c, code + 1);
  const amk_buffer_t& x = in_buf(c, 0);
  const amk_buffer_t& positions = in_buf(c, 1);
  const amk_buffer_t& out = out_buf(c, 0);
  // [n_heads, head_dim], [S, n_heads, head_dim], or a flat row [1, n_heads * head_dim].
  const bool flat_row = x.rank == 2 && x.shape[0] == 1 && x.shape[1] % head_dim == 0;
  if ((x.rank != 2 && x.rank != 3) || (x.shape[x.rank - 1] != head_dim && !flat_row))
    return op_fail(c, code + 2);
  const int64_t S = x.rank == 3 ? x.shape[0] : 1;
  const int64_t heads = x.shape[x.rank - 1] == head_dim ? x.shape[x.rank - 2] : x.shape[1] / head_dim;
  if (positions.dtype != AMK_DTYPE_I32 || positions.numel != S) return op_fail(c, code + 3);
  if (out.numel != x.numel || !is_f32_or_bf16(x.dtype) || !is_f32_or_bf16(out.dtype))
    return op_fail(c, code + 4);
  const int half = head_dim / 2;
  const amk_buffer_t* table = nullptr;
  if (table_given) {
    table = &in_buf(c, 2);
    if (table->numel != half || !is_f32_or_bf16(table->dtype)) return op_fail(c, code + 5);
  }
  if (c.scratch_bytes < head_dim * int(sizeof(double))) return op_fail(c, code + 6);

  // [cos | sin] of the current row's angles.
  double* cos_t = reinterpret_cast<double*>(c.scratch);
  double* sin_t = cos_t + half;
  for (int64_t s = 0; s < S; ++s) {
    const float pos = float(load_i32(positions, s));
    // Every thread evaluates the same finiteness test on the entries it owns; a bad entry makes
    // the thread that saw it fail the op, and the barrier below still runs for all.
    if (!rope_angles(c, pos, table, p.theta, half, cos_t, sin_t)) op_fail(c, code + 5);
    consumer_sync(c.n_threads);
    const int64_t row = s * heads * head_dim;
    for (int64_t k = c.tid; k < heads * half; k += c.n_threads) {
      const int64_t h = k / half;
      const int i = int(k - h * half);
      const int64_t lo = row + h * head_dim + i;
      const float2 r = rope_rotate(load_f(x, lo), load_f(x, lo + half), cos_t[i], sin_t[i]);
      store_f(out, lo, r.x);
      store_f(out, lo + half, r.y);
    }
    consumer_sync(c.n_threads);  // the next row overwrites the table
  }
}

}  // namespace amk::cuda
