// KV_APPEND: write n new rows of k (or v) into the cache [max_seq, n_kv_heads, head_dim] at rows
// [r, r + n), r = params.pos (+ the step position c.pos when flags bit 0, the runtime position
// of docs/RUNTIME_POSITION.md); mirrors src/vm/reference/ops/kv_append.cpp. `new` (input 0) is
// any page of n * n_kv_heads * head_dim elements.
//
// In a program the output is the cache itself (input 1), and only the new rows are written, as
// one flat copy_elements() (16-byte moves). Should the output be a distinct buffer of the
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
  const int64_t max_seq = cache.shape[0];
  const int64_t row = cache.shape[1] * cache.shape[2];
  if (row < 1 || fresh.numel < 1 || fresh.numel % row != 0)
    return op_fail(c, AMK_OP_KV_APPEND * 16 + 4);
  const int64_t n = fresh.numel / row;
  if (pos < 0 || pos + n > max_seq) return op_fail(c, AMK_OP_KV_APPEND * 16 + 5);

  if (!copy_elements(out, pos * row, fresh, 0, n * row, c.tid, c.n_threads))
    return op_fail(c, AMK_OP_KV_APPEND * 16 + 6);
  if (out.ptr != cache.ptr) {  // a distinct output: carry the old rows over as well
    copy_elements(out, 0, cache, 0, pos * row, c.tid, c.n_threads);
    copy_elements(out, (pos + n) * row, cache, (pos + n) * row, (max_seq - pos - n) * row, c.tid,
                  c.n_threads);
  }
}

}  // namespace amk::cuda
