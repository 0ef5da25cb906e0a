// A Program as the timing simulator sees it (src/search/timing_sim.cpp): per task, what it costs
// in the model's terms (weight bytes through the ring, activation and KV bytes read), each SM's
// queue, the counters' per-step increments, the decode sink and the weight ring's geometry.
// Computed once per program; the fit simulates the same prepared program many times.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "amk/ir.h"
#include "amk/timing_sim.h"

namespace amk::sim {

enum class TaskKind : uint8_t {
  Stream,     // a GEMV-family tile: weight rows through the SM's ring
  Attention,  // ATTENTION_TILE / ROPE_KV_ATTENTION_TILE: KV-cache reads at the step's position
  Other,      // everything else: a prologue of activation reads and the epilogue
};

struct SimTask {
  TaskKind kind = TaskKind::Other;
  int32_t slot = 0;          // dense index of its SM (PreparedProgram::sms)
  int32_t out_counter = -1;  // dense counter index
  // (dense counter, signals it needs in one step: threshold - init); empty for a root
  std::vector<std::pair<int32_t, int32_t>> waits;
  double weight_bytes = 0;   // Stream: the tile's rows of W
  double act_bytes = 0;      // activation bytes its prologue reads (Stream: x, rebuilt unless cached)
  double kv_bytes = 0;       // Attention: KV bytes at the step's position
  int64_t x_key = -1;        // Stream: what its x cache is keyed by (op, x, fused operand)
  int32_t gemv_index = -1;   // Stream: its index among its SM's GEMV-family tasks (one step)
  int32_t depth = 0;         // Stream: pipelining depth (the M_tile param)
  // The block's warps over 8: every op's work is spread over them (a Stream consumer's rate and
  // per-chunk cost, a prologue's activation reads, an attention task's fixed compute). Stream:
  // whether the strip mapping falls back to x from shared memory (gemv.cuh strip_period == 0
  // for a BF16 weight; then strip_slow_factor slower).
  double warp_scale = 1.0;
  bool slow_strips = false;
  double out_rows = 0;  // Stream: the output rows its epilogue writes (N_tile; GLU: features)
  // Stream: dependent L2 round trips its x-build makes beyond a copy's, each one a trip at its
  // SM's load (COMBINE_GEMV_ADD_TILE's merge: one a batch of kStackBatch partials a float4 a
  // thread, ops/gemv.cuh build_x_combine; a rebuilt x only: a cached one makes none).
  double extra_trips = 0;
  // Its signal is an in-cluster hand-off (SimOptions::cluster_size): no loaded release, a
  // cluster hop.
  bool in_cluster = false;
};

class PreparedProgram {
 public:
  std::vector<SimTask> tasks;                // list order
  std::vector<int64_t> sms;                  // slot -> SM id
  std::vector<std::vector<int32_t>> queues;  // slot -> its tasks in list order
  std::vector<std::vector<int32_t>> gemvs;   // slot -> its Stream tasks in list order
  std::vector<int32_t> counter_increment;    // dense counter -> signalling tasks per step
  int32_t sink = -1;                         // the SAMPLE_ARGMAX every task precedes, else -1
  int64_t num_sms = 1;                       // the target's (bytes in flight are per SM of it)
  double target_gbs = 0;                     // the target's measured, else spec, bandwidth
  double chunk_bytes = 32768;                // the ring's stage
  double ring_bytes = 4 * 32768.0;           // stages x stage
  int inflight_chunks = 1, prefetch_chunks = 1;
  int steps = 2;
  double cluster_hop_us = 0;  // > 0: the hop of tasks with in_cluster
  int64_t position = 0;
};

}  // namespace amk::sim
