// The tensor-parallel step's config, and small hand-built programs of the two device paths it adds
// (docs/CLUSTER_TP.md): ranged shard sums (ALLREDUCE_SHARD with n_off / N_tile) and o_proj tiles
// that merge some heads of a stack of flash partials (COMBINE_GEMV_ADD_TILE with m_off). The CPU
// tests check that validate() and the CUDA loader accept them (test_marshal.cpp); the GPU tests
// run them on the CUDA VM against the reference VM (tests/gpu/test_cuda_vm.cpp). Header-only:
// both test binaries include it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "amk/ir.h"

namespace amk::testing {

// A tensor-parallel split (tiling.tp): `clusters` clusters of `size` SMs, the attention on the
// first `attention`.
struct TpSplit {
  int64_t clusters = 0, size = 0, attention = 0;
};

// The fused step tiling.tp lowers (o_proj merging a split-KV attention of `kv_block`-key blocks,
// one KV head a task; `n_tile`-row GEMV tiles; round robin), without clusters or in `split`.
inline ScheduleConfig tp_step_config(std::optional<TpSplit> split, int64_t kv_block = 4,
                                     int64_t n_tile = 8) {
  ScheduleConfig c;
  c.tiling = {{"gemv", {{"N_tile", n_tile}}},
              {"attention", {{"kv_block", kv_block}, {"kv_heads", 1}}}};
  if (split)
    c.tiling.push_back({"tp",
                        {{"clusters", split->clusters},
                         {"size", split->size},
                         {"attention", split->attention}}});
  c.fusion_grouping = {{"rmsnorm", "gemv"},
                       {"gemv", "silu_mul"},
                       {"gemv", "add"},
                       {"rope", "attention"},
                       {"attention_combine", "gemv"}};
  c.sm_assignment = std::string("round_robin");
  return c;
}

struct ShardSumProgram {
  Program program;
  std::vector<int64_t> shards;  // IO_INPUT F32 [1, n]
  int64_t out = -1;             // IO_OUTPUT F32 [1, n]
};

// `shards` F32 [1, n] vectors summed into one F32 [1, n] output. Each (n_off, N_tile) of
// `ranges` is one task under one shared counter, task i on SM i; no ranges: one task over the
// whole vector, without the params.
inline ShardSumProgram shard_sum_program(int64_t n, int shards,
                                         const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  ShardSumProgram s;
  Program& p = s.program;
  for (int i = 0; i < shards; ++i)
    s.shards.push_back(
        p.new_buffer("shard" + std::to_string(i), BufferKind::IO_INPUT, DType::F32, {1, n}));
  s.out = p.new_buffer("sum", BufferKind::IO_OUTPUT, DType::F32, {1, n});
  const int64_t counter = p.new_counter("sum");
  if (ranges.empty()) {
    p.add_task(Op::ALLREDUCE_SHARD, s.shards, {s.out}, counter, {}, {}, "sum").sm = 0;
    return s;
  }
  for (size_t r = 0; r < ranges.size(); ++r) {
    Params prm;
    prm.set_int("n_off", ranges[r].first);
    prm.set_int("N_tile", ranges[r].second);
    p.add_task(Op::ALLREDUCE_SHARD, s.shards, {s.out}, counter, {}, prm,
               "sum[" + std::to_string(r) + "]")
        .sm = int64_t(r);
  }
  return s;
}

// One o_proj: the merge of heads [m_off, m_off + count).
struct HeadMerge {
  int64_t m_off = 0, count = 0;
};

struct HeadMergeProgram {
  Program program;
  int64_t parts = -1;  // IO_INPUT F32 [slabs * n_heads, head_dim + 2]
  std::vector<int64_t> weights, residuals, outputs;  // one a merge
};

// Each merge of `merges` is one o_proj: COMBINE_GEMV_ADD_TILE tiles of `n_tile` rows (under one
// counter a merge) merging its heads of the stack of `slabs` partials of `n_heads` heads at
// "parts", against a BF16 weight [n, count x head_dim] and an F32 residual [1, n], into an F32
// output [1, n] of its own. Every tile runs on SM 0, the merges one after another: consecutive
// tiles of different merges share the stack but not their x.
inline HeadMergeProgram head_merge_program(int64_t head_dim, int64_t n_heads, int64_t slabs,
                                           int64_t n, int64_t n_tile,
                                           const std::vector<HeadMerge>& merges) {
  HeadMergeProgram h;
  Program& p = h.program;
  h.parts = p.new_buffer("parts", BufferKind::IO_INPUT, DType::F32,
                         {slabs * n_heads, head_dim + 2});
  for (size_t k = 0; k < merges.size(); ++k) {
    const std::string name = "o" + std::to_string(k);
    const int64_t K = merges[k].count * head_dim;
    h.weights.push_back(p.new_buffer(name + ".w", BufferKind::WEIGHT, DType::BF16, {n, K}));
    h.residuals.push_back(p.new_buffer(name + ".res", BufferKind::IO_INPUT, DType::F32, {1, n}));
    h.outputs.push_back(p.new_buffer(name + ".out", BufferKind::IO_OUTPUT, DType::F32, {1, n}));
    const int64_t counter = p.new_counter(name);
    for (int64_t off = 0; off < n; off += n_tile) {
      Params prm;
      prm.set_int("K", K);
      prm.set_int("N_tile", std::min(n_tile, n - off));
      prm.set_int("n_off", off);
      prm.set_int("head_dim", head_dim);
      prm.set_int("n_heads", n_heads);
      prm.set_int("m_off", merges[k].m_off);
      p.add_task(Op::COMBINE_GEMV_ADD_TILE, {h.parts, h.weights[k], h.residuals[k]},
                 {h.outputs[k]}, counter, {}, prm, name + "[" + std::to_string(off) + "]")
          .sm = 0;
    }
  }
  return h;
}

}  // namespace amk::testing
