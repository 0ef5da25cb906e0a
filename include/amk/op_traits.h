// Facts about opcodes that several passes share (the marshaller, the timing simulator): one
// place for each, beside the IR. The device side mirrors them in src/vm/cuda/weight_ring.cuh.
#pragma once

#include <cstddef>
#include <cstdint>

#include "amk/ir.h"

namespace amk {

// GEMV_GLU_TILE, RMSNORM_GEMV_GLU_TILE and RMSNORM_GEMV_GLU_DOWN_TILE: a gated linear unit's
// gate and up projections as one tile, silu(gate rows) * (up rows) in its epilogue
// (docs/OPCODES.md).
bool is_glu_gemv(Op op);

// RMSNORM_GEMV_GLU_DOWN_TILE: a GLU tile whose features go on through its slice of the down
// projection into an accumulating output (docs/OPCODES.md). Its down weight [H, F] is read by
// columns [n_off, n_off + N_tile); the CUDA VM stores it transposed, so those are N_tile rows of H.
bool is_glu_down(Op op);

// GEMV_TILE and its fused variants (RMSNORM_, SILU_MUL_, _ADD_, SILU_MUL_..._ADD_TILE, the GLU
// tiles): [N, K] weights streamed once, rows [n_off, n_off + N_tile) of each.
bool is_gemv_family(Op op);

// The input slot of a GEMV-family op's (first) [N, K] weight (docs/OPCODES.md): the fused
// prologues put their own operand (the norm weight, up) before it. A GLU tile's up weight
// follows its gate weight.
size_t gemv_weight_input(Op op);

// The input slot of an attention op's K cache (its V cache follows): ATTENTION_TILE's 1 after
// q, ROPE_KV_ATTENTION_TILE's 3 after q, k and v (docs/OPCODES.md).
size_t attention_k_cache_input(Op op);

// How many [N, K]-sized weight slices the tile streams, from gemv_weight_input() on: 2 for the GLU
// tiles, 3 with the down projection's slice.
int64_t gemv_weight_count(Op op);

}  // namespace amk
