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
};

// Throws LoweringError naming every group it does not know (and the ones it does).
Fusion resolve_fusion(const ScheduleConfig& config);

}  // namespace amk::schedule
