// The producer -> consumer dependency graph of a Program, kept BIPARTITE (task -> counter ->
// task) so that an all-join of N producers into M consumers costs N + M entries, not N * M.
//
// Node numbering used by the order and cycle helpers: task t is node t, counter c is node
// num_tasks + c. Internally everything is int32 (a Program that large would not fit in memory).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "amk/ir.h"
#include "ir/csr.h"

namespace amk::detail {

struct DependencyGraph {
  int32_t num_tasks = 0;
  int32_t num_counters = 0;
  std::vector<int32_t> out_counter;  // per task; -1 when out_counter names no counter
  Csr producers;                     // counter -> tasks incrementing it, in task order
  Csr waiters;                       // counter -> distinct tasks waiting on it, in task order
  Csr task_waits;                    // task -> distinct counters it waits on, sorted
  // task -> counters it waits on with threshold == #producers (>= 1). Only these waits order
  // EVERY producer before the waiter; a partial or unsatisfiable wait proves nothing, so the
  // happens-before relation is built from this subset alone (sound when the all-join rule fails).
  Csr hb_waits;

  int64_t producer_count(int32_t c) const { return static_cast<int64_t>(producers.row_size(c)); }
  // Distinct producer -> consumer task pairs. A task has one out_counter, so the producer sets of
  // the distinct counters one task waits on are disjoint and the pairs can be summed, not listed.
  int64_t edge_count() const;

  // Requires counter ids dense (counters[i].id == i); waits/out_counters outside [0, n) are
  // left out (they are reported as missing references elsewhere).
  static DependencyGraph build(const Program& program);
};

struct TopoOrder {
  bool acyclic = false;
  std::vector<int32_t> tasks;  // tasks in a topological order (all of them iff acyclic)
  std::vector<uint8_t> done;   // per node: emitted by Kahn's algorithm
};

// Kahn's algorithm over the bipartite graph, optionally with extra task -> task edges
// (queue_next[t] = the task after t in t's SM queue, or -1). Deterministic.
TopoOrder topological_order(const DependencyGraph& g, std::span<const int32_t> queue_next = {});

// One task of a cycle witness and how it reaches the next one: through a counter it increments
// (a dependency), or as the next entry of its SM queue.
struct CycleStep {
  int32_t task = 0;
  bool queue_edge = false;
};

// A cycle among the nodes Kahn's algorithm could not emit, found by an iterative DFS (no
// recursion: a 200k-task cycle must not overflow the stack). Empty only if there is none.
std::vector<CycleStep> find_cycle(const DependencyGraph& g, const TopoOrder& topo,
                                  std::span<const int32_t> queue_next = {});

}  // namespace amk::detail
