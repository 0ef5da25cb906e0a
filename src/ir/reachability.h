// Exact happens-before queries on an acyclic dependency graph, at counter granularity.
//
// The question every race check reduces to is "do ALL producers of counter c happen before task
// t?", which holds iff t transitively waits on c through sound all-join waits (hb_waits): a wait
// with threshold == #producers releases only after every producer has signalled, and a writer w
// happens before t iff this holds for w's out_counter.
//
// Queries are batched. ask() settles at once, in this order of cost:
//   - the direct case (t itself waits on c);
//   - the impossible ones (no sound waiter of c precedes t in topological order, or GRAIL-style
//     interval labels exclude it);
//   - those a spanning-tree cover proves (a sound waiter of c is a tree ancestor of t; the tree
//     follows the main chain of a decoder, so residual reads reaching back many stages land here);
//   - those a label-pruned forward search from c settles within a small fixed budget.
// solve() answers the rest with bit-parallel forward sweeps over the graph in topological order,
// 64 * `words` source counters per sweep, each sweep limited to the window between its first
// source and its last query target. Memory is num_counters * words * 8 bytes with words chosen
// to fit a fixed budget, never the size of the relation.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ir/dependency_graph.h"

namespace amk::detail {

class HappensBefore {
 public:
  using Ticket = int64_t;

  // `order` must hold every task of `g` in a topological order.
  HappensBefore(const DependencyGraph& g, std::span<const int32_t> order);

  // Do all producers of counter c happen before task t?
  Ticket ask(int32_t counter, int32_t task);
  // Answers every ticket issued since construction or the last clear().
  void solve();
  bool answer(Ticket ticket) const;
  // Forgets the tickets (a new batch may follow); the count of queries is kept.
  void clear();

  int32_t position(int32_t task) const { return pos_[static_cast<size_t>(task)]; }
  // Whether all producers of c happen before t depends only on the SET of counters t soundly
  // waits on, so tasks with equal wait sets (the tiles of one GEMV) share one representative;
  // callers asking about many such tasks may ask about the representative once.
  int32_t representative(int32_t task) const { return rep_[static_cast<size_t>(task)]; }
  int64_t queries_asked() const { return asked_; }
  int64_t sweeps_run() const { return sweeps_; }

 private:
  static constexpr Ticket kYes = -1;
  static constexpr Ticket kNo = -2;
  enum class Search { kFound, kAbsent, kGaveUp };
  Search bounded_search(int32_t counter, int32_t task);
  void build_tree_cover();
  void build_interval_labels();
  bool tree_covers(int32_t c, int32_t t) const;

  static uint64_t key(int32_t c, int32_t t) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(c)) << 32) | static_cast<uint32_t>(t);
  }

  const DependencyGraph& g_;
  std::span<const int32_t> order_;
  std::vector<int32_t> pos_;                  // task -> position in order_
  std::vector<int32_t> rep_;                  // task -> first task with the same hb_waits row
  std::vector<int32_t> first_wait_pos_;       // counter -> earliest position of a sound waiter
  Csr hb_waiters_;                            // counter -> tasks soundly waiting on it
  std::vector<int32_t> rank_, low_;           // per node (tasks, then counters): interval label
  std::vector<int32_t> tree_pre_, tree_end_;  // task -> preorder range of its subtree
  Csr cover_;                                 // counter -> outermost waiter ranges (starts)
  std::vector<int32_t> cover_end_;            // parallel to cover_.values: range ends
  std::vector<uint32_t> visited_;             // per node: stamp of the last search that entered it
  uint32_t search_stamp_ = 0;
  std::vector<int32_t> search_stack_;
  std::vector<uint64_t> pending_;      // ticket -> key, in issue order
  std::vector<uint64_t> solved_keys_;  // sorted unique keys after solve()
  std::vector<uint8_t> solved_;        // answer per solved key
  int64_t asked_ = 0;
  int64_t sweeps_ = 0;
};

}  // namespace amk::detail
