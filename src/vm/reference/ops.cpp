// run_reference_op: the opcode -> semantics dispatch. The semantics live in ops/, one concept per
// file; docs/OPCODES.md describes every operand and param.
#include "amk/reference_ops.h"

#include <string>
#include <string_view>

#include "vm/reference/ops/ops.h"

namespace amk {

namespace {

void dispatch(Op op, const Params& params, std::span<const Tensor* const> inputs,
              std::span<Tensor* const> outputs, const StepState* step) {
  const ref::OpContext c(op, params, inputs, outputs, step);
  switch (op) {
    case Op::NOP: c.check_registry(); return;
    case Op::COPY: ref::op_copy(c); return;
    case Op::EMBED: ref::op_embed(c); return;
    case Op::RMSNORM: ref::op_rmsnorm(c); return;
    case Op::LAYERNORM: ref::op_layernorm(c); return;
    case Op::GEMV_TILE:
    case Op::GEMM_TILE: ref::op_gemv_gemm(c); return;
    case Op::ATTENTION_TILE: ref::op_attention_tile(c); return;
    case Op::ROPE: ref::op_rope(c); return;
    case Op::SILU_MUL: ref::op_silu_mul(c); return;
    case Op::GELU: ref::op_gelu(c); return;
    case Op::ADD: ref::op_add(c); return;
    case Op::MUL: ref::op_mul(c); return;
    case Op::DEQUANT: ref::op_dequant(c); return;
    case Op::SOFTMAX: ref::op_softmax(c); return;
    case Op::ALLREDUCE_SHARD: ref::op_allreduce_shard(c); return;
    case Op::KV_APPEND: ref::op_kv_append(c); return;
    case Op::SAMPLE_ARGMAX: ref::op_sample_argmax(c); return;
    case Op::ATTENTION_COMBINE: ref::op_attention_combine(c); return;
    case Op::ROPE_KV_ATTENTION_TILE: ref::op_rope_kv_attention_tile(c); return;
    case Op::ROPE_FREQ: ref::op_rope_freq(c); return;
    case Op::RMSNORM_GEMV_TILE: ref::op_rmsnorm_gemv_tile(c); return;
    case Op::SILU_MUL_GEMV_TILE: ref::op_silu_mul_gemv_tile(c); return;
    case Op::GEMV_ADD_TILE: ref::op_gemv_add_tile(c); return;
    case Op::SILU_MUL_GEMV_ADD_TILE: ref::op_silu_mul_gemv_add_tile(c); return;
    case Op::GEMV_GLU_TILE: ref::op_gemv_glu_tile(c); return;
    case Op::RMSNORM_GEMV_GLU_TILE: ref::op_rmsnorm_gemv_glu_tile(c); return;
    case Op::COMBINE_GEMV_ADD_TILE: ref::op_combine_gemv_add_tile(c); return;
    case Op::RMSNORM_GEMV_GLU_DOWN_TILE: ref::op_rmsnorm_gemv_glu_down_tile(c); return;
  }
  throw OpError("unknown opcode " + std::to_string(int(op)));
}

}  // namespace

void run_reference_op(Op op, const Params& params, std::span<const Tensor* const> inputs,
                      std::span<Tensor* const> outputs) {
  run_reference_op(op, params, inputs, outputs, StepState{});
}

void run_reference_op(Op op, const Params& params, std::span<const Tensor* const> inputs,
                      std::span<Tensor* const> outputs, const StepState& step) {
  try {
    dispatch(op, params, inputs, outputs, &step);
  } catch (const OpError& e) {
    // Storage-level errors (a value that does not fit an integer output, say) arrive as
    // "Tensor: ..."; every message leaves here naming the op.
    const std::string prefix = std::string(name_of(op)) + ": ";
    if (std::string_view(e.what()).starts_with(prefix)) throw;
    throw OpError(prefix + e.what());
  }
}

}  // namespace amk
