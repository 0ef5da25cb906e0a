#include "amk/op_traits.h"

namespace amk {

bool is_glu_gemv(Op op) {
  return op == Op::GEMV_GLU_TILE || op == Op::RMSNORM_GEMV_GLU_TILE || is_glu_down(op);
}

bool is_glu_down(Op op) { return op == Op::RMSNORM_GEMV_GLU_DOWN_TILE; }

bool is_gemv_family(Op op) {
  return op == Op::GEMV_TILE || op == Op::RMSNORM_GEMV_TILE || op == Op::SILU_MUL_GEMV_TILE ||
         op == Op::GEMV_ADD_TILE || op == Op::SILU_MUL_GEMV_ADD_TILE || op == Op::COMBINE_GEMV_ADD_TILE ||
         is_glu_gemv(op);
}

size_t gemv_weight_input(Op op) {
  return (op == Op::RMSNORM_GEMV_TILE || op == Op::SILU_MUL_GEMV_TILE ||
          op == Op::SILU_MUL_GEMV_ADD_TILE || op == Op::RMSNORM_GEMV_GLU_TILE ||
          op == Op::RMSNORM_GEMV_GLU_DOWN_TILE)
             ? 2
             : 1;
}

size_t attention_k_cache_input(Op op) { return op == Op::ROPE_KV_ATTENTION_TILE ? 3 : 1; }

int64_t gemv_weight_count(Op op) { return is_glu_down(op) ? 3 : is_glu_gemv(op) ? 2 : 1; }

}  // namespace amk
