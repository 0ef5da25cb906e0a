// EMBED: out = table[ids], the gathered rows laid out one after another; mirrors
// src/vm/reference/ops/embed.cpp. ids: I32 page of n ids; table [V, W] (a BF16/F32 weight, or an
// F32 activation when the lowering uses EMBED(ids = [0], table = activation, hidden = d) as a
// reshape into heads); out: a page of n * W elements. `hidden` must divide W and does not change
// what is copied.
//
// Each row is one flat copy_elements() (16-byte loads; BF16 rows widen to F32 8 at a time).
// Every thread reads the id itself, so an out-of-range id is seen by all of them and nothing of
// that row is written. No barrier, no scratch.
//
// op_fail codes (code >> 4 = AMK_OP_EMBED): 1 ids not I32, 2 table not rank 2 or bad hidden,
// 3 output size != n * W, 4 an id outside [0, V), 5 a dtype pair copy_elements does not handle.
#pragma once

#include "vm/cuda/ops/elementwise.cuh"

namespace amk::cuda {

__device__ inline void op_embed(const OpContext& c) {
  const amk_buffer_t& ids = in_buf(c, 0);
  const amk_buffer_t& table = in_buf(c, 1);
  const amk_buffer_t& out = out_buf(c, 0);
  if (ids.dtype != AMK_DTYPE_I32) return op_fail(c, AMK_OP_EMBED * 16 + 1);
  const int64_t hidden = c.inst->params.hidden;
  if (table.rank != 2 || hidden < 1 || table.shape[1] % hidden != 0)
    return op_fail(c, AMK_OP_EMBED * 16 + 2);
  const int64_t V = table.shape[0];
  const int64_t W = table.shape[1];
  const int64_t n = ids.numel;
  if (out.numel != n * W) return op_fail(c, AMK_OP_EMBED * 16 + 3);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = load_i32(ids, i);
    if (id < 0 || id >= V) return op_fail(c, AMK_OP_EMBED * 16 + 4);
    if (!copy_elements(out, i * W, table, id * W, W, c.tid, c.n_threads))
      return op_fail(c, AMK_OP_EMBED * 16 + 5);
  }
}

}  // namespace amk::cuda
