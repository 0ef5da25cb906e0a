// COPY, ADD, SILU_MUL and ALLREDUCE_SHARD: flat elementwise maps over pages; mirrors
// src/vm/reference/ops/elementwise.cpp. Only element counts must agree (a reshape is free), so
// every op walks the flat element order with all consumer threads, 16 bytes per load where the
// operands are F32 and 16-byte aligned (activations always are), one element at a time otherwise.
//
// Also home of copy_elements(), the flat gather/scatter EMBED and KV_APPEND are built from.
//
// Aliasing: each element is read and written by the same thread, so an output may alias an
// input. No barrier is used, so the ops need no scratch.
//
// op_fail codes (abort flag 0x100 + code; code >> 4 is the opcode, code & 15 the reason):
//   1 element counts differ, 2 a dtype pair the op does not handle.
#pragma once

#include <cstdint>

#include "vm/cuda/primitives.cuh"

namespace amk::cuda {

__device__ __forceinline__ bool is_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// The float dtypes load_f/store_f read and write.
__device__ __forceinline__ bool is_f32_or_bf16(int32_t dtype) {
  return dtype == AMK_DTYPE_F32 || dtype == AMK_DTYPE_BF16;
}

// Bytes of one element for the dtypes that can be moved as raw bytes; 0 for the rest.
__device__ __forceinline__ int raw_element_bytes(int32_t dtype) {
  switch (dtype) {
    case AMK_DTYPE_F32:
    case AMK_DTYPE_I32:
      return 4;
    case AMK_DTYPE_F16:
    case AMK_DTYPE_BF16:
      return 2;
    default:
      return 0;
  }
}

// Copies `bytes` (even) bytes across the consumer threads, 16 at a time when both ends allow it.
__device__ inline void copy_raw_bytes(void* dst, const void* src, int64_t bytes, int tid,
                                      int n_threads) {
  if (is_aligned16(dst) && is_aligned16(src)) {
    const int64_t n16 = bytes >> 4;
    const uint4* s = static_cast<const uint4*>(src);
    uint4* d = static_cast<uint4*>(dst);
    for (int64_t i = tid; i < n16; i += n_threads) d[i] = s[i];
    // The tail of an element-sized copy is whole 2-byte units.
    const int64_t done = n16 << 4;
    const uint16_t* st = reinterpret_cast<const uint16_t*>(static_cast<const char*>(src) + done);
    uint16_t* dt = reinterpret_cast<uint16_t*>(static_cast<char*>(dst) + done);
    for (int64_t i = tid; i < (bytes - done) >> 1; i += n_threads) dt[i] = st[i];
  } else if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes) & 3) ==
             0) {
    const uint32_t* s = static_cast<const uint32_t*>(src);
    uint32_t* d = static_cast<uint32_t*>(dst);
    for (int64_t i = tid; i < bytes >> 2; i += n_threads) d[i] = s[i];
  } else {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (int64_t i = tid; i < bytes >> 1; i += n_threads) d[i] = s[i];
  }
}

// dst[dst_off + i] = src[src_off + i] for i < n, across the consumer threads. Equal dtypes move
// raw bytes (any 2- or 4-byte dtype, I32 included); F32 <-> BF16 convert (BF16 -> F32, the
// embedding-table case, 8 elements per 16-byte load). Returns false, having written nothing,
// for a dtype pair it does not handle.
__device__ inline bool copy_elements(const amk_buffer_t& dst, int64_t dst_off,
                                     const amk_buffer_t& src, int64_t src_off, int64_t n, int tid,
                                     int n_threads) {
  const int bytes = raw_element_bytes(src.dtype);
  if (src.dtype == dst.dtype && bytes != 0) {
    copy_raw_bytes(static_cast<char*>(dst.ptr) + dst_off * bytes,
                   static_cast<const char*>(src.ptr) + src_off * bytes, n * bytes, tid, n_threads);
    return true;
  }
  if (!is_f32_or_bf16(src.dtype) || !is_f32_or_bf16(dst.dtype)) return false;
  int64_t done = 0;
  if (src.dtype == AMK_DTYPE_BF16 && dst.dtype == AMK_DTYPE_F32) {
    const uint16_t* s = static_cast<const uint16_t*>(src.ptr) + src_off;
    float* d = static_cast<float*>(dst.ptr) + dst_off;
    if (is_aligned16(s) && is_aligned16(d)) {
      const int64_t n8 = n >> 3;
      for (int64_t i = tid; i < n8; i += n_threads) {
        const uint4 u = reinterpret_cast<const uint4*>(s)[i];
        // A bf16 is the top half of an f32: the low half of each word is element 2k, the high
        // half element 2k + 1 (little endian).
        const float4 lo = make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                                      __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
        const float4 hi = make_float4(__uint_as_float(u.z << 16), __uint_as_float(u.z & 0xffff0000u),
                                      __uint_as_float(u.w << 16), __uint_as_float(u.w & 0xffff0000u));
        reinterpret_cast<float4*>(d)[2 * i] = lo;
        reinterpret_cast<float4*>(d)[2 * i + 1] = hi;
      }
      done = n8 << 3;
    }
  }
  for (int64_t i = done + tid; i < n; i += n_threads)
    store_f(dst, dst_off + i, load_f(src, src_off + i));
  return true;
}

__device__ inline void op_copy(const OpContext& c) {
  const amk_buffer_t& x = in_buf(c, 0);
  const amk_buffer_t& out = out_buf(c, 0);
  if (out.numel != x.numel) return op_fail(c, AMK_OP_COPY * 16 + 1);
  if (!copy_elements(out, 0, x, 0, x.numel, c.tid, c.n_threads))
    op_fail(c, AMK_OP_COPY * 16 + 2);
}

// True when every buffer is F32 and 16-byte aligned, so the map may run on float4s.
__device__ __forceinline__ bool all_f32_aligned(const amk_buffer_t& a, const amk_buffer_t& b,
                                                const amk_buffer_t& out) {
  return a.dtype == AMK_DTYPE_F32 && b.dtype == AMK_DTYPE_F32 && out.dtype == AMK_DTYPE_F32 &&
         is_aligned16(a.ptr) && is_aligned16(b.ptr) && is_aligned16(out.ptr);
}

// out = f(a, b) elementwise over two float pages of `out.numel` elements.
template <typename F>
__device__ inline void float_binary_map(const OpContext& c, const amk_buffer_t& a,
                                        const amk_buffer_t& b, const amk_buffer_t& out, F f) {
  const int64_t n = out.numel;
  int64_t done = 0;
  if (all_f32_aligned(a, b, out)) {
    const float4* a4 = static_cast<const float4*>(a.ptr);
    const float4* b4 = static_cast<const float4*>(b.ptr);
    float4* o4 = static_cast<float4*>(out.ptr);
    for (int64_t i = c.tid; i < n >> 2; i += c.n_threads) {
      const float4 x = a4[i], y = b4[i];
      o4[i] = make_float4(f(x.x, y.x), f(x.y, y.y), f(x.z, y.z), f(x.w, y.w));
    }
    done = (n >> 2) << 2;
  }
  for (int64_t i = done + c.tid; i < n; i += c.n_threads)
    store_f(out, i, f(load_f(a, i), load_f(b, i)));
}

__device__ inline void op_add(const OpContext& c) {
  const amk_buffer_t& a = in_buf(c, 0);
  const amk_buffer_t& b = in_buf(c, 1);
  const amk_buffer_t& out = out_buf(c, 0);
  if (a.numel != out.numel || b.numel != out.numel) return op_fail(c, AMK_OP_ADD * 16 + 1);
  if (is_f32_or_bf16(a.dtype) && is_f32_or_bf16(b.dtype) && is_f32_or_bf16(out.dtype))
    return float_binary_map(c, a, b, out, [](float x, float y) { return x + y; });
  // ADD takes any dtype in the reference; the integer case a program can hold is I32 + I32.
  if (a.dtype == AMK_DTYPE_I32 && b.dtype == AMK_DTYPE_I32 && out.dtype == AMK_DTYPE_I32) {
    // Wrapping add: the reference fails on overflow, which no lowered program reaches.
    for (int64_t i = c.tid; i < out.numel; i += c.n_threads)
      static_cast<int32_t*>(out.ptr)[i] =
          int32_t(uint32_t(load_i32(a, i)) + uint32_t(load_i32(b, i)));
    return;
  }
  op_fail(c, AMK_OP_ADD * 16 + 2);
}

__device__ inline void op_silu_mul(const OpContext& c) {
  const amk_buffer_t& gate = in_buf(c, 0);
  const amk_buffer_t& up = in_buf(c, 1);
  const amk_buffer_t& out = out_buf(c, 0);
  if (gate.numel != out.numel || up.numel != out.numel)
    return op_fail(c, AMK_OP_SILU_MUL * 16 + 1);
  if (!is_f32_or_bf16(gate.dtype) || !is_f32_or_bf16(up.dtype) || !is_f32_or_bf16(out.dtype))
    return op_fail(c, AMK_OP_SILU_MUL * 16 + 2);
  // silu() is the same function the fused SILU_MUL_GEMV_TILE prologue uses, so the fused and
  // unfused programs agree.
  float_binary_map(c, gate, up, out, [](float g, float u) { return silu(g) * u; });
}

// ALLREDUCE_SHARD: out[j] = shard 0[j] + shard 1[j] + ... in input order, fp32 adds (rounding
// noise against the reference's one rounding of the exact sum, docs/OPCODES.md), for j in
// [n_off, n_off + N_tile), or the whole vector (N_tile 0: both params absent); the rest of the
// output untouched. The loader checked the operands (marshal.cpp allreduce_shard_error: 1 to 8
// F32 shards and an F32 output of one size, the range within it); the device trusts them.
// Where every operand is 16-byte aligned (activations are), the float4-aligned middle of the
// range runs on 16-byte loads, a thread's float4 of kShardBatch shards requested before any is
// added (one L2 round trip a batch: the shards were just written by other SMs), in one loop for
// every shard count; its ragged ends (under 4 elements each), or the whole range where an
// operand is not aligned, one element at a time. (Eight shards a batch spilled both shipped
// builds.) Each element is read and written by one thread: the output may alias a shard.
constexpr int kShardBatch = 4;

__device__ inline void op_allreduce_shard(const OpContext& c) {
  const amk_params_t& p = c.inst->params;
  const int n_shards = c.inst->n_inputs;
  const amk_buffer_t& out = out_buf(c, 0);
  float* o = static_cast<float*>(out.ptr);
  const int64_t begin = p.N_tile > 0 ? p.n_off : 0;
  const int64_t end = p.N_tile > 0 ? begin + p.N_tile : out.numel;
  bool aligned = is_aligned16(o);
#pragma unroll 1
  for (int k = 0; k < n_shards; ++k) aligned = aligned && is_aligned16(in_buf(c, k).ptr);
  // [v_begin, v_end): the float4 part (empty when unaligned); [begin, v_begin) and
  // [v_end, end): the scalar ends.
  const int64_t v_begin = aligned ? min((begin + 3) & ~int64_t(3), end) : begin;
  const int64_t v_end = aligned ? v_begin + ((end - v_begin) & ~int64_t(3)) : begin;
#pragma unroll 1
  for (int64_t v = (v_begin >> 2) + c.tid; v < (v_end >> 2); v += c.n_threads) {
    float4 acc;
#pragma unroll 1
    for (int k0 = 0; k0 < n_shards; k0 += kShardBatch) {
      float4 s[kShardBatch];
#pragma unroll
      for (int u = 0; u < kShardBatch; ++u)
        if (k0 + u < n_shards) s[u] = static_cast<const float4*>(in_buf(c, k0 + u).ptr)[v];
      acc = k0 == 0 ? s[0]
                    : make_float4(acc.x + s[0].x, acc.y + s[0].y, acc.z + s[0].z, acc.w + s[0].w);
#pragma unroll
      for (int u = 1; u < kShardBatch; ++u)
        if (k0 + u < n_shards)
          acc = make_float4(acc.x + s[u].x, acc.y + s[u].y, acc.z + s[u].z, acc.w + s[u].w);
    }
    reinterpret_cast<float4*>(o)[v] = acc;
  }
  const int64_t head = v_begin - begin, scalars = head + (end - v_end);
#pragma unroll 1
  for (int64_t k = c.tid; k < scalars; k += c.n_threads) {
    const int64_t j = k < head ? begin + k : v_end + (k - head);
    float acc = static_cast<const float*>(in_buf(c, 0).ptr)[j];
#pragma unroll 1
    for (int i = 1; i < n_shards; ++i) acc += static_cast<const float*>(in_buf(c, i).ptr)[j];
    o[j] = acc;
  }
}

}  // namespace amk::cuda
