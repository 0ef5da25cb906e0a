// The `tiling` knob of a ScheduleConfig, checked and resolved: a GEMV tile width per projection
// and the split-KV block of attention. Internal to the lowering.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "amk/ir.h"

namespace amk::schedule {

// The projections a decode step tiles; each may override the "gemv" N_tile by name.
inline constexpr std::string_view kProjections[] = {"q_proj",    "k_proj",  "v_proj",    "o_proj",
                                                    "gate_proj", "up_proj", "down_proj", "lm_head"};

struct Tiling {
  int64_t gemv_n_tile = 0;
  std::vector<std::pair<std::string, int64_t>> projection_n_tile;  // overrides
  std::optional<int64_t> kv_block;                                 // split-KV when set
  std::optional<int64_t> kv_heads;  // KV heads per attention task (head split) when set
  // With kv_block: each block task's keys are runs of kv_run keys, one every n_blocks x kv_run
  // positions (a strided window, amk/kv_window.h), so a short position's keys spread over the
  // blocks instead of filling the first ones. Absent: each block is one contiguous run.
  std::optional<int64_t> kv_run;
  // q/k/v tiles emitted per attention head group (the kv_heads groups), each group's q, k and v
  // rows under one counter of its own, so a group's attention tasks wait only for their own
  // heads' rows (docs/LOWERING.md). Needs the ["rope", "attention"] group.
  bool qkv_by_group = false;
  std::optional<int64_t> argmax_n_tile;  // logits per partial SAMPLE_ARGMAX when set
  // A tensor-parallel step (docs/CLUSTER_TP.md): `clusters` clusters of `size` SMs, the
  // attention on the first `attention` of them (each holding n_kv_heads / attention KV heads),
  // the MLP's features split over all of them.
  struct TensorParallel {
    int64_t clusters = 0, size = 0, attention = 0;
  };
  std::optional<TensorParallel> tp;

  int64_t n_tile(std::string_view projection) const;
  bool has_override(std::string_view projection) const;
};

// Throws LoweringError naming any unknown archetype or key, or a value < 1:
//   {"gemv": {"N_tile": n}, "<projection>": {"N_tile": n},
//    "attention": {"kv_block": n, "kv_heads": g, "kv_run": r, "qkv_by_group": 0|1},
//                  (kv_block and/or kv_heads, or qkv_by_group alone; kv_run needs kv_block)
//    "sample_argmax": {"N_tile": n},  (partial argmaxes of n logits, then a reduce)
//    "tp": {"clusters": P, "size": C, "attention": Pa}}  (all three)
Tiling resolve_tiling(const ScheduleConfig& config, int64_t default_n_tile);

}  // namespace amk::schedule
