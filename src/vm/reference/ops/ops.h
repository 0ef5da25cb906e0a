// One function per opcode (docs/OPCODES.md is the contract). Each checks its own operands and
// params, computes in double, and writes its outputs only after it has read every input, so an
// output may alias an input. Internal to amk_core; run_reference_op dispatches here.
#pragma once

#include <cstdint>
#include <vector>

#include "vm/reference/ops/op_context.h"

namespace amk::ref {

// elementwise.cpp
void op_copy(const OpContext& c);
void op_add(const OpContext& c);
void op_mul(const OpContext& c);
void op_silu_mul(const OpContext& c);
void op_gelu(const OpContext& c);
void op_allreduce_shard(const OpContext& c);
// norm.cpp
void op_rmsnorm(const OpContext& c);
void op_layernorm(const OpContext& c);
// embed.cpp
void op_embed(const OpContext& c);
// matmul.cpp (GEMV_TILE and GEMM_TILE)
void op_gemv_gemm(const OpContext& c);
// fused_gemv.cpp (RMSNORM_GEMV_TILE, SILU_MUL_GEMV_TILE, GEMV_ADD_TILE, SILU_MUL_GEMV_ADD_TILE,
// GEMV_GLU_TILE, RMSNORM_GEMV_GLU_TILE, COMBINE_GEMV_ADD_TILE, RMSNORM_GEMV_GLU_DOWN_TILE)
void op_rmsnorm_gemv_tile(const OpContext& c);
void op_silu_mul_gemv_tile(const OpContext& c);
void op_gemv_add_tile(const OpContext& c);
void op_silu_mul_gemv_add_tile(const OpContext& c);
void op_gemv_glu_tile(const OpContext& c);
void op_rmsnorm_gemv_glu_tile(const OpContext& c);
void op_combine_gemv_add_tile(const OpContext& c);
void op_rmsnorm_gemv_glu_down_tile(const OpContext& c);
// quant.cpp
void op_dequant(const OpContext& c);
// attention.cpp
void op_attention_tile(const OpContext& c);
void op_attention_combine(const OpContext& c);
// ATTENTION_COMBINE's merge (attention.cpp), shared with COMBINE_GEMV_ADD_TILE's prologue: the
// flash partials `parts` (each n_heads x [acc(head_dim) | m | l]) into `out` (n_heads x head_dim,
// normalised, zeroed by the caller), or with `partial_out` into one partial (unnormalised).
void merge_flash_partials(const std::vector<const double*>& parts, int64_t n_heads,
                          int64_t head_dim, double* out, double* partial_out);
void op_rope_kv_attention_tile(const OpContext& c);
// rope.cpp (ROPE and ROPE_FREQ)
void op_rope(const OpContext& c);
void op_rope_freq(const OpContext& c);
// softmax.cpp
void op_softmax(const OpContext& c);
// kv_append.cpp
void op_kv_append(const OpContext& c);
// argmax.cpp
void op_sample_argmax(const OpContext& c);

}  // namespace amk::ref
