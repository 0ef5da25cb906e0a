// What the lowering checks of a tensor-parallel step (tiling.tp, docs/CLUSTER_TP.md) before it
// lowers one. Internal to the lowering.
#pragma once

#include <cstdint>

#include "amk/ir.h"
#include "amk/model_config.h"
#include "schedule/fusion.h"
#include "schedule/tiling.h"

namespace amk::schedule {

// Throws LoweringError naming what the shape cannot split: more SMs than the target has, the
// attention on more clusters than there are or on a number that does not divide the KV heads
// into whole attention groups, a hidden vector or MLP smaller than the split, a bias on a boxed
// projection, the fusions the step is built from missing, qkv_by_group (implied), or an
// sm_assignment other than round_robin.
void check_tensor_parallel(const ModelConfig& m, const Tiling::TensorParallel& tp,
                           const Tiling& tiling, const Fusion& fusion,
                           const ScheduleConfig& config, const GpuTarget& target,
                           int64_t kv_heads);

}  // namespace amk::schedule
