// The `fusion_grouping` knob of a ScheduleConfig, checked and resolved: which fused GEMV tiles
// the lowering emits. Internal to the lowering.
#pragma once

#include "amk/ir.h"

namespace amk::schedule {

// Each group is independently selectable; the lowering applies every one that is set.
struct Fusion {
  bool rmsnorm_gemv = false;   // ["rmsnorm", "gemv"]  -> RMSNORM_GEMV_TILE (norm per tile)
  bool silu_mul_gemv = false;  // ["silu_mul", "gemv"] -> SILU_MUL_GEMV_TILE (down_proj)
  bool gemv_add = false;       // ["gemv", "add"]      -> GEMV_ADD_TILE (o_proj, down_proj)
  // silu_mul_gemv and gemv_add together: down_proj is SILU_MUL_GEMV_ADD_TILE.
  // ["rope", "attention"] -> ROPE_KV_ATTENTION_TILE: each attention task norms (Qwen3) and
  // rotates its own q/k heads and writes the new KV row, so no COPY / head RMSNORM / ROPE /
  // KV_APPEND task remains.
  bool rope_attention = false;
  // ["gemv", "silu_mul"] -> GEMV_GLU_TILE / RMSNORM_GEMV_GLU_TILE: gate_proj and up_proj as one
  // tile per range of features, silu(gate) * up in its epilogue, so down_proj reads one buffer
  // (the SILU_MUL task goes, and ["silu_mul", "gemv"] has nothing left to fuse). Its tiles are
  // tiling.gate_proj features wide; tiling.up_proj is refused.
  bool gemv_silu_mul = false;
  // ["attention_combine", "gemv"] -> COMBINE_GEMV_ADD_TILE (needs ["gemv", "add"] and a
  // tiling.attention.kv_block split): the block tasks write one stack of partials and every
  // o_proj tile merges it itself, so no ATTENTION_COMBINE task, attention row or its counter
  // remains between the attention and o_proj.
  bool combine_gemv = false;
  // ["gemv", "silu_mul", "gemv"] -> RMSNORM_GEMV_GLU_DOWN_TILE (needs ["rmsnorm", "gemv"],
  // ["gemv", "silu_mul"] and ["gemv", "add"]): each GLU tile also multiplies its features by
  // their columns of down_proj and adds the result into the layer's output, which o_proj's tiles
  // initialised with a second copy of their output. The down level and its hop go.
  bool glu_down = false;
};

// Throws LoweringError naming every group it does not know (and the ones it does).
Fusion resolve_fusion(const ScheduleConfig& config);

}  // namespace amk::schedule
