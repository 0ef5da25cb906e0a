// What the lowering checks of a tensor-parallel step (tiling.tp, docs/CLUSTER_TP.md) before it
// lowers one. Internal to the lowering.
#pragma once

#include <cstdint>

#include "amk/ir.h"
#include "amk/model_config.h"
#include "schedule/fusion.h"
#include "schedule/tiling.h"

namespace amk::schedule {

// The width of the slices of the hidden vector a cluster's sums write, one a CTA of `size`:
// ceil(hidden / size) rounded up to 4 floats (whole 16-byte words).
inline int64_t tp_slice_width(int64_t hidden, int64_t size) {
  return ((hidden + size - 1) / size + 3) / 4 * 4;
}

// Where cluster c's MLP features start (c = clusters: F): whole granules of 64 features where F
// has one a cluster, so a down_proj box's rows (its features) stay 128-byte multiples in BF16,
// which the CUDA VM's GEMV streams in 16-byte vectors (llama-3.2-1b's 8192 in 7 clusters by
// F / P put 1170 features in a box: 2,331 µs a token against 989 in 8 clusters, H200).
inline int64_t tp_feature_start(int64_t F, int64_t clusters, int64_t c) {
  const int64_t granule = F >= 64 * clusters ? 64 : 1;
  return c >= clusters ? F : c * (F / granule) / clusters * granule;
}

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
