// Which of a program's hand-offs stay inside one cluster of SMs (docs/CLUSTER_TP.md, stage 3): a
// counter whose signallers and waiters all run on one cluster, and whose signallers' writes to
// activations are read by its waiters alone. The CUDA VM can realise such a hand-off in shared
// memory (the written pieces forwarded into each receiver's mailbox, completing on its mbarrier)
// instead of through L2 and a device-scope release. The program's meaning is unchanged: a
// mailbox holds what the global buffer would, and validate() proves the program as written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "amk/ir.h"

namespace amk {

struct ClusterHandoff {
  int64_t counter = 0;
  int64_t cluster = 0;              // SM s is in cluster s / cluster_size
  std::vector<int64_t> receivers;   // the waiters' SMs, ascending, once each
  // What the signallers write to activations, as flat element ranges [begin, end) of each
  // buffer (merged, ascending): what every receiver's mailbox holds each step.
  struct Piece {
    int64_t buffer = 0, begin = 0, end = 0;
    bool operator==(const Piece&) const = default;
  };
  std::vector<Piece> pieces;
  int64_t bytes = 0;  // the pieces' bytes: what one receiver's mbarrier expects a step
  // The signallers also write a KV cache (the fused attention's new row), which later steps'
  // tasks read from global memory: those writes still need their device-scope release.
  bool writes_kv_cache = false;
  bool operator==(const ClusterHandoff&) const = default;
};

struct ClusterHandoffs {
  std::vector<ClusterHandoff> handoffs;  // by counter id
  int64_t counters_across_clusters = 0;  // the counters that stay global
};

// The program's in-cluster hand-offs for clusters of `cluster_size` consecutive SMs. A counter
// qualifies when every signaller and every waiter has an SM on one cluster, every signaller's
// outputs are activations or KV caches, every task that reads what its signallers write to an
// activation (read_region meets a write_region) waits for it directly (so it is a receiver), and
// no task under another counter writes any of it.
// Throws std::invalid_argument for cluster_size < 1.
ClusterHandoffs find_cluster_handoffs(const Program& program, int64_t cluster_size);

}  // namespace amk
