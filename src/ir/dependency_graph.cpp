// Building the bipartite dependency graph, ordering it, and extracting a cycle witness.
#include "ir/dependency_graph.h"

#include <algorithm>

namespace amk::detail {

DependencyGraph DependencyGraph::build(const Program& p) {
  DependencyGraph g;
  g.num_tasks = static_cast<int32_t>(p.tasks.size());
  g.num_counters = static_cast<int32_t>(p.counters.size());
  const int64_t nc = g.num_counters;

  g.out_counter.resize(p.tasks.size());
  std::vector<std::pair<int32_t, int32_t>> pairs;
  pairs.reserve(p.tasks.size());
  for (int32_t t = 0; t < g.num_tasks; ++t) {
    const int64_t c = p.tasks[t].out_counter;
    g.out_counter[t] = (c >= 0 && c < nc) ? static_cast<int32_t>(c) : -1;
    if (g.out_counter[t] >= 0) pairs.emplace_back(g.out_counter[t], t);
  }
  g.producers = Csr::from_pairs(static_cast<size_t>(nc), pairs);

  // Per task: the distinct counters waited on, each with its largest threshold (all waits must
  // hold, so the largest one is the one that governs).
  std::vector<std::pair<int32_t, int32_t>> wait_pairs, hb_pairs, waiter_pairs;
  std::vector<std::pair<int32_t, int64_t>> mine;
  for (int32_t t = 0; t < g.num_tasks; ++t) {
    mine.clear();
    for (const Wait& w : p.tasks[t].waits)
      if (w.counter >= 0 && w.counter < nc)
        mine.emplace_back(static_cast<int32_t>(w.counter), w.threshold);
    std::sort(mine.begin(), mine.end());
    for (size_t i = 0; i < mine.size(); ++i) {
      // Sorted by (counter, threshold): the last entry of a run carries the largest threshold.
      if (i + 1 < mine.size() && mine[i + 1].first == mine[i].first) continue;
      const int32_t c = mine[i].first;
      wait_pairs.emplace_back(t, c);
      waiter_pairs.emplace_back(c, t);
      const int64_t np = g.producer_count(c);
      if (np >= 1 && mine[i].second == np) hb_pairs.emplace_back(t, c);
    }
  }
  g.task_waits = Csr::from_pairs(p.tasks.size(), wait_pairs);
  g.hb_waits = Csr::from_pairs(p.tasks.size(), hb_pairs);
  g.waiters = Csr::from_pairs(static_cast<size_t>(nc), waiter_pairs);
  return g;
}

int64_t DependencyGraph::edge_count() const {
  int64_t edges = 0;
  for (int32_t c : task_waits.values) edges += producer_count(c);
  return edges;
}

TopoOrder topological_order(const DependencyGraph& g, std::span<const int32_t> queue_next) {
  const size_t n = static_cast<size_t>(g.num_tasks);
  const size_t nodes = n + static_cast<size_t>(g.num_counters);
  std::vector<int64_t> indeg(nodes, 0);
  for (size_t t = 0; t < n; ++t) indeg[t] = static_cast<int64_t>(g.task_waits.row_size(t));
  for (int32_t c = 0; c < g.num_counters; ++c) indeg[n + c] = g.producer_count(c);
  if (!queue_next.empty())
    for (size_t t = 0; t < n; ++t)
      if (queue_next[t] >= 0) ++indeg[static_cast<size_t>(queue_next[t])];

  TopoOrder topo;
  topo.done.assign(nodes, 0);
  topo.tasks.reserve(n);
  std::vector<int32_t> ready;  // used as a FIFO: `head` walks it, pushes append
  ready.reserve(nodes);
  for (size_t v = 0; v < nodes; ++v)
    if (indeg[v] == 0) ready.push_back(static_cast<int32_t>(v));
  auto release = [&](size_t v) {
    if (--indeg[v] == 0) ready.push_back(static_cast<int32_t>(v));
  };
  for (size_t head = 0; head < ready.size(); ++head) {
    const auto v = static_cast<size_t>(ready[head]);
    topo.done[v] = 1;
    if (v < n) {
      topo.tasks.push_back(static_cast<int32_t>(v));
      if (g.out_counter[v] >= 0) release(n + static_cast<size_t>(g.out_counter[v]));
      if (!queue_next.empty() && queue_next[v] >= 0) release(static_cast<size_t>(queue_next[v]));
    } else {
      for (int32_t t : g.waiters.row(v - n)) release(static_cast<size_t>(t));
    }
  }
  topo.acyclic = topo.tasks.size() == n && ready.size() == nodes;
  return topo;
}

std::vector<CycleStep> find_cycle(const DependencyGraph& g, const TopoOrder& topo,
                                  std::span<const int32_t> queue_next) {
  const size_t n = static_cast<size_t>(g.num_tasks);
  const size_t nodes = n + static_cast<size_t>(g.num_counters);
  enum : uint8_t { kWhite = 0, kGray = 1, kBlack = 2 };
  std::vector<uint8_t> color(nodes, kWhite);
  std::vector<int32_t> stack_pos(nodes, -1);
  std::vector<int32_t> stack;     // the current DFS path
  std::vector<int64_t> next_arc;  // per path entry: index of the next successor to try

  // The k-th successor of v, or -1 past the end. Only nodes Kahn left behind can lie on a cycle
  // (every successor of such a node was left behind too), so the search stays among them.
  auto successor = [&](size_t v, int64_t k) -> int64_t {
    if (v < n) {
      const int64_t oc = g.out_counter[v];
      const int64_t q = queue_next.empty() ? -1 : queue_next[v];
      const int64_t succ[2] = {oc >= 0 ? static_cast<int64_t>(n) + oc : -1, q};
      int64_t seen = 0;
      for (int64_t s : succ)
        if (s >= 0 && seen++ == k) return s;
      return -1;
    }
    const auto row = g.waiters.row(v - n);
    return k < static_cast<int64_t>(row.size()) ? row[static_cast<size_t>(k)] : -1;
  };

  for (size_t root = 0; root < nodes; ++root) {
    if (topo.done[root] || color[root] != kWhite) continue;
    color[root] = kGray;
    stack_pos[root] = 0;
    stack.assign(1, static_cast<int32_t>(root));
    next_arc.assign(1, 0);
    while (!stack.empty()) {
      const auto v = static_cast<size_t>(stack.back());
      const int64_t s = successor(v, next_arc.back()++);
      if (s < 0) {
        color[v] = kBlack;
        stack.pop_back();
        next_arc.pop_back();
        continue;
      }
      const auto w = static_cast<size_t>(s);
      if (topo.done[w] || color[w] == kBlack) continue;
      if (color[w] == kWhite) {
        color[w] = kGray;
        stack_pos[w] = static_cast<int32_t>(stack.size());
        stack.push_back(static_cast<int32_t>(w));
        next_arc.push_back(0);
        continue;
      }
      // A gray successor closes a cycle: the path from it to the top of the stack.
      const std::vector<int32_t> cyc(stack.begin() + stack_pos[w], stack.end());
      size_t first_task = 0;
      while (first_task < cyc.size() && static_cast<size_t>(cyc[first_task]) >= n) ++first_task;
      std::vector<CycleStep> steps;
      for (size_t i = 0; i < cyc.size(); ++i) {
        const size_t at = (first_task + i) % cyc.size();
        if (static_cast<size_t>(cyc[at]) >= n) continue;
        const size_t next = (at + 1) % cyc.size();
        steps.push_back({cyc[at], static_cast<size_t>(cyc[next]) < n});
      }
      return steps;
    }
  }
  return {};
}

}  // namespace amk::detail
