#include "vm/cuda/gemv_tile_check.h"

#include <fmt/format.h>

#include <cstdint>

#include "amk/op_traits.h"
#include "vm/cuda/buffer_text.h"
#include "vm/cuda/ops/buffer_dims.h"
#include "vm/cuda/ops/gemv_strips.h"
#include "vm/cuda/ops/scratch.h"

namespace amk::cuda {

namespace {

bool aligned(const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

// The operands as ops/gemv.cuh's resolve() gathers them, or what is wrong with them.
std::string operand_error(const amk_task_record_t& r, const MegakernelLayout& layout) {
  const amk_instruction_t& inst = r.inst;
  const amk_params_t& p = inst.params;
  const Op op = Op(inst.op);
  const int wi = int(gemv_weight_input(op));
  const bool combine = op == Op::COMBINE_GEMV_ADD_TILE;
  const bool adds = op == Op::GEMV_ADD_TILE || op == Op::SILU_MUL_GEMV_ADD_TILE || combine;
  const bool glu = is_glu_gemv(op);
  const bool norm = op == Op::RMSNORM_GEMV_TILE || op == Op::RMSNORM_GEMV_GLU_TILE;
  const bool silu = op == Op::SILU_MUL_GEMV_TILE || op == Op::SILU_MUL_GEMV_ADD_TILE;
  if (p.qdtype < 0 || p.qdtype > AMK_DTYPE_F8E5M2)
    return fmt::format("qdtype {} has no device code", p.qdtype);
  if (p.K < 1 || p.N_tile < 1 || p.n_off < 0)
    return fmt::format("K {}, N_tile {} and n_off {} must be >= 1, >= 1 and >= 0", p.K, p.N_tile,
                       p.n_off);
  if (inst.n_inputs <= wi || inst.n_outputs < 1)
    return fmt::format("{} inputs and {} outputs: the weight is input {}", inst.n_inputs,
                       inst.n_outputs, wi);
  if (adds && inst.n_inputs < wi + 2) return "no residual input after the weight";
  if (glu && inst.n_inputs != wi + 2 && inst.n_inputs != wi + 4)
    return fmt::format("a GLU tile takes {} or {} inputs, not {}", wi + 2, wi + 4, inst.n_inputs);
  const int bias_index = wi + (adds || glu ? 2 : 1);
  const amk_buffer_t& x = r.desc[0];
  const amk_buffer_t& W = r.desc[wi];
  const amk_buffer_t* bias = inst.n_inputs > bias_index ? &r.desc[bias_index] : nullptr;
  const amk_buffer_t& out = r.desc[inst.n_inputs];
  int64_t rows = 1;
  if (combine) {
    // x merges heads [m_off, m_off + K / head_dim) of every slab (m_off 0 and K = n_heads x
    // head_dim: every head; m_off, IR 0.12.0: a tensor-parallel cluster's heads).
    const int64_t slab = int64_t(p.n_heads) * (p.head_dim + 2);
    if (p.head_dim < 4 || p.head_dim % 4 != 0 || p.n_heads < 1)
      return fmt::format("head_dim {} must be a multiple of 4 and n_heads {} >= 1", p.head_dim,
                         p.n_heads);
    if (p.K % p.head_dim != 0 || p.m_off < 0 ||
        int64_t(p.m_off) + p.K / p.head_dim > int64_t(p.n_heads))
      return fmt::format("K {} is not a whole number of heads of head_dim {} from head m_off {} "
                         "within n_heads {}",
                         p.K, p.head_dim, p.m_off, p.n_heads);
    if (x.dtype != AMK_DTYPE_F32 || x.numel < slab || x.numel % slab != 0 || !aligned(x.ptr, 8))
      return fmt::format("the partials {} must be an 8-byte aligned F32 stack of [{}, {}] slabs",
                         shape_text(x), p.n_heads, p.head_dim + 2);
  } else {
    if (last_dim(x) != p.K)
      return fmt::format("x {} does not end in K {}", shape_text(x), p.K);
    rows = x.numel / p.K;
  }
  if (W.rank != 2 || W.shape[1] != p.K || int64_t(p.n_off) + p.N_tile > W.shape[0])
    return fmt::format("the weight {} is not [N, {}] with rows [{}, {}) in it", shape_text(W), p.K,
                       p.n_off, int64_t(p.n_off) + p.N_tile);
  if (W.dtype != AMK_DTYPE_BF16 && W.dtype != AMK_DTYPE_F32)
    return fmt::format("the weight's dtype {} has no device code (F32, BF16)", W.dtype);
  if (bias && bias->numel != W.shape[0])
    return fmt::format("the bias has {} elements, not N {}", bias->numel, W.shape[0]);
  if (glu) {
    const amk_buffer_t& U = r.desc[wi + 1];
    if (U.rank != 2 || U.shape[0] != W.shape[0] || U.shape[1] != W.shape[1] || U.dtype != W.dtype)
      return fmt::format("the up weight {} differs from the gate weight {}", shape_text(U),
                         shape_text(W));
    if (bias && r.desc[wi + 3].numel != W.shape[0])
      return fmt::format("the up bias has {} elements, not N {}", r.desc[wi + 3].numel,
                         W.shape[0]);
  }
  const int64_t out_cols = last_dim(out);
  if (out_cols < int64_t(p.n_off) + p.N_tile || out.numel != rows * out_cols)
    return fmt::format("the output {} does not hold {} row(s) of columns [{}, {})", shape_text(out),
                       rows, p.n_off, int64_t(p.n_off) + p.N_tile);
  if (norm && (p.hidden != p.K || r.desc[1].numel != p.K || !(p.eps >= 0.0f)))
    return fmt::format("the norm's hidden {}, weight of {} elements and eps {} do not fit K {}",
                       p.hidden, r.desc[1].numel, p.eps, p.K);
  if (silu && r.desc[1].numel != x.numel)
    return fmt::format("up has {} elements, gate {}", r.desc[1].numel, x.numel);
  if (adds && r.desc[wi + 1].numel != out.numel)
    return fmt::format("the residual has {} elements, the output {}", r.desc[wi + 1].numel,
                       out.numel);
  const int64_t body_rows = glu ? 2 * int64_t(p.N_tile) : p.N_tile;
  if (const int64_t need = 4 * gemv_scratch_floats(p.K, body_rows, 1); need > layout.scratch_bytes)
    return fmt::format("x and the partials need {} bytes of op scratch; the layout has {}", need,
                       layout.scratch_bytes);
  return {};
}

}  // namespace

GemvTileCheck check_gemv_tile(const amk_task_record_t& r, const MegakernelLayout& layout) {
  GemvTileCheck c;
  c.error = operand_error(r, layout);
  if (!c.error.empty()) return c;
  // The ring: one activation row (COMBINE_GEMV_ADD_TILE merges its stack into one), whole
  // 16-byte vectors at 16-byte aligned rows that fit a stage, and fewer than 2^15 vectors a row
  // (the strip plan's 16-bit indices). Otherwise the consumers read global memory.
  const amk_instruction_t& inst = r.inst;
  const Op op = Op(inst.op);
  const int wi = int(gemv_weight_input(op));
  const amk_buffer_t& W = r.desc[wi];
  const int64_t row_bytes = int64_t(inst.params.K) * (W.dtype == AMK_DTYPE_BF16 ? 2 : 4);
  const bool one_row = r.desc[0].numel == inst.params.K || op == Op::COMBINE_GEMV_ADD_TILE;
  c.ring = layout.ring_stages >= 1 && layout.chunk_bytes >= 16 && one_row &&
           row_bytes % 16 == 0 && row_bytes <= layout.chunk_bytes && row_bytes / 16 < (1 << 15) &&
           aligned(W.ptr, 16) && (!is_glu_gemv(op) || aligned(r.desc[wi + 1].ptr, 16));
  if (c.ring) {
    const int64_t rows = int64_t(inst.params.N_tile) * (is_glu_gemv(op) ? 2 : 1);
    const int64_t need = 4 * gemv_scratch_floats(inst.params.K, rows, gemv_strips_per_row(row_bytes));
    if (need > layout.scratch_bytes)
      c.error = fmt::format("x and the strip partials need {} bytes of op scratch; the layout has {}",
                            need, layout.scratch_bytes);
  }
  return c;
}

}  // namespace amk::cuda
