// KV_APPEND: write n new rows of k (or v) into the cache [n_kv_heads, max_seq, head_dim] at
// positions [r, r + n), r = params.pos (+ the step position c.pos when flags bit 0, the runtime
// position of docs/RUNTIME_POSITION.md): new row i's head g goes to (g, r + i); mirrors
// src/vm/reference/ops/kv_append.cpp. `new` (input 0) is any page of n * n_kv_heads * head_dim
// elements, row-major [n, n_kv_heads, head_dim].
//
// In a program the output is the cache itself (input 1), and only the new rows are written, one
// copy_elements() (16-byte moves) per (row, KV head): a head's history is contiguous, a new
// row's heads are not. Should the output be a distinct buffer of the
// cache's dtype and shape, it receives the whole updated cache, as the reference's does: the
// old rows are copied from input 1 too (they never overlap the new ones, so no barrier).
// `new` never aliases the cache in a lowered program (validate() gives the cache one writer).
//
// op_fail codes (code >> 4 = AMK_OP_KV_APPEND): 1 cache not rank 3 / output not the cache's
// dtype and shape, 2 unknown flag bits, 3 runtime position asked for but the program has none,
// 4 new's size is not a positive multiple of a row, 5 rows past max_seq or a negative pos,
// 6 a dtype pair copy_elements does not handle.
#pragma once

#include "vm/cuda/ops/elementwise.cuh"

namespace amk::cuda {

inline constexpr int32_t kKvAppendRuntimePos = 1;  // amk/op_flags.h kv_append_flags::kRuntimePos

__device__ inline void op_kv_append(const OpContext& c) {
  const amk_params_t& p = c.inst->params;
  const amk_buffer_t& fresh = in_buf(c, 0);
  const amk_buffer_t& cache = in_buf(c, 1);
  const amk_buffer_t& out = out_buf(c, 0);
  if (cache.rank != 3 || out.dtype != cache.dtype || out.rank != 3 ||
      out.shape[0] != cache.shape[0] || out.shape[1] != cache.shape[1] ||
      out.shape[2] != cache.shape[2])
    return op_fail(c, AMK_OP_KV_APPEND * 16 + 1);
  if ((p.flags & ~kKvAppendRuntimePos) != 0) return op_fail(c, AMK_OP_KV_APPEND * 16 + 2);
  int64_t pos = p.pos;
  if ((p.flags & kKvAppendRuntimePos) != 0) {
    if (c.pos < 0) return op_fail(c, AMK_OP_KV_APPEND * 16 + 3);
    pos += c.pos;
  }
  const int64_t n_kv = cache.shape[0], max_seq = cache.shape[1], hd = cache.shape[2];
  const int64_t row = n_kv * hd;
  if (row < 1 || fresh.numel < 1 || fresh.numel % row != 0)
    return op_fail(c, AMK_OP_KV_APPEND * 16 + 4);
  const int64_t n = fresh.numel / row;
  if (pos < 0 || pos + n > max_seq) return op_fail(c, AMK_OP_KV_APPEND * 16 + 5);

  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < n_kv; ++g)
      if (!copy_elements(out, (g * max_seq + pos + i) * hd, fresh, (i * n_kv + g) * hd, hd, c.tid,
                         c.n_threads))
        return op_fail(c, AMK_OP_KV_APPEND * 16 + 6);
  if (out.ptr != cache.ptr) {  // a distinct output: carry each head's old rows over as well
    for (int64_t g = 0; g < n_kv; ++g) {
      const int64_t head = g * max_seq * hd;
      copy_elements(out, head, cache, head, pos * hd, c.tid, c.n_threads);
      copy_elements(out, head + (pos + n) * hd, cache, head + (pos + n) * hd,
                    (max_seq - pos - n) * hd, c.tid, c.n_threads);
    }
  }
}

}  // namespace amk::cuda
