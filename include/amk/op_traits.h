// Facts about opcodes that several passes share (the marshaller, the timing simulator): one
// place for each, beside the IR. The device side mirrors them in src/vm/cuda/weight_ring.cuh.
#pragma once

#include <cstddef>

#include "amk/ir.h"

namespace amk {

// GEMV_TILE and its fused variants (RMSNORM_, SILU_MUL_, _ADD_, SILU_MUL_..._ADD_TILE): one
// [N, K] weight streamed once, rows [n_off, n_off + N_tile).
bool is_gemv_family(Op op);

// The input slot of a GEMV-family op's [N, K] weight (docs/OPCODES.md): the fused prologues put
// their own operand (the norm weight, up) before it.
size_t gemv_weight_input(Op op);

}  // namespace amk
