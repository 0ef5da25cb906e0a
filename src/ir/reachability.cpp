// Bit-parallel, windowed forward propagation answering batched happens-before queries.
#include "ir/reachability.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace amk::detail {

namespace {

constexpr int32_t kNever = std::numeric_limits<int32_t>::max();
// Reach masks live per counter; 32 MiB of them bounds memory at any program size.
constexpr size_t kMaskBudgetWords = size_t{4} << 20;
constexpr size_t kMaxWords = 16;

}  // namespace

HappensBefore::HappensBefore(const DependencyGraph& g, std::span<const int32_t> order)
    : g_(g), order_(order) {
  pos_.assign(static_cast<size_t>(g.num_tasks), kNever);
  for (size_t i = 0; i < order.size(); ++i)
    pos_[static_cast<size_t>(order[i])] = static_cast<int32_t>(i);
  // Representatives: hash each wait set; on a hash collision between different sets the later
  // task simply represents itself (exactness never depends on the dedup).
  rep_.resize(static_cast<size_t>(g.num_tasks));
  std::unordered_map<uint64_t, int32_t> first_with;
  first_with.reserve(static_cast<size_t>(g.num_tasks) / 4 + 1);
  for (int32_t t = 0; t < g.num_tasks; ++t) {
    const auto row = g.hb_waits.row(static_cast<size_t>(t));
    uint64_t h = 1469598103934665603ull ^ row.size();
    for (int32_t c : row) h = (h ^ static_cast<uint32_t>(c)) * 1099511628211ull;
    const auto [it, fresh] = first_with.emplace(h, t);
    const auto other = g.hb_waits.row(static_cast<size_t>(it->second));
    rep_[static_cast<size_t>(t)] =
        !fresh && std::equal(row.begin(), row.end(), other.begin(), other.end()) ? it->second : t;
  }
  first_wait_pos_.assign(static_cast<size_t>(g.num_counters), kNever);
  for (int32_t t = 0; t < g.num_tasks; ++t)
    for (int32_t c : g.hb_waits.row(static_cast<size_t>(t)))
      first_wait_pos_[static_cast<size_t>(c)] =
          std::min(first_wait_pos_[static_cast<size_t>(c)], pos_[static_cast<size_t>(t)]);
  std::vector<std::pair<int32_t, int32_t>> pairs;
  pairs.reserve(g.hb_waits.values.size());
  for (int32_t t = 0; t < g.num_tasks; ++t)
    for (int32_t c : g.hb_waits.row(static_cast<size_t>(t))) pairs.emplace_back(c, t);
  hb_waiters_ = Csr::from_pairs(static_cast<size_t>(g.num_counters), pairs);
  build_tree_cover();
  build_interval_labels();
  visited_.assign(static_cast<size_t>(g.num_tasks) + static_cast<size_t>(g.num_counters), 0);
}

// GRAIL-style interval labels over the sound bipartite graph (task -> its counter -> the tasks
// soundly waiting on it): rank = DFS post-order, low = the smallest rank among the descendants.
// If x reaches y then y's [low, rank] lies inside x's, so a query failing containment is
// answered "no" without a sweep; in sparse, racy graphs that is most of the negative queries.
void HappensBefore::build_interval_labels() {
  const auto n = static_cast<size_t>(g_.num_tasks);
  const size_t nodes = n + static_cast<size_t>(g_.num_counters);
  rank_.assign(nodes, -1);
  low_.assign(nodes, 0);
  auto successor = [&](size_t v, int64_t k) -> int64_t {
    if (v < n)
      return k == 0 && g_.out_counter[v] >= 0 ? static_cast<int64_t>(n) + g_.out_counter[v] : -1;
    const auto row = hb_waiters_.row(v - n);
    return k < static_cast<int64_t>(row.size()) ? row[static_cast<size_t>(k)] : -1;
  };
  int32_t next_rank = 0;
  std::vector<int32_t> stack;
  std::vector<int64_t> arc;
  std::vector<uint8_t> seen(nodes, 0);
  auto finish = [&](size_t v) {
    rank_[v] = next_rank++;
    int32_t low = rank_[v];
    for (int64_t k = 0;; ++k) {
      const int64_t s = successor(v, k);
      if (s < 0) break;
      low = std::min(low, low_[static_cast<size_t>(s)]);
    }
    low_[v] = low;
  };
  auto run_from = [&](size_t root) {
    if (seen[root]) return;
    seen[root] = 1;
    stack.assign(1, static_cast<int32_t>(root));
    arc.assign(1, 0);
    while (!stack.empty()) {
      const auto v = static_cast<size_t>(stack.back());
      const int64_t s = successor(v, arc.back()++);
      if (s < 0) {
        finish(v);
        stack.pop_back();
        arc.pop_back();
      } else if (!seen[static_cast<size_t>(s)]) {
        seen[static_cast<size_t>(s)] = 1;
        stack.push_back(static_cast<int32_t>(s));
        arc.push_back(0);
      }
    }
  };
  for (int32_t t : order_) run_from(static_cast<size_t>(t));
  for (size_t v = n; v < nodes; ++v) run_from(v);
}

// Every task picks as its tree parent the latest (in topological order) last-producer among
// the counters it soundly waits on; in a decoder that is the stage just before it, so the tree
// follows the main chain. Preorder ranges come from subtree sizes (children after parents in
// topological order), with no DFS at all.
void HappensBefore::build_tree_cover() {
  const auto n = static_cast<size_t>(g_.num_tasks);
  const auto nc = static_cast<size_t>(g_.num_counters);
  std::vector<int32_t> last_producer(nc, -1);
  for (size_t c = 0; c < nc; ++c)
    for (int32_t p : g_.producers.row(c))
      if (last_producer[c] < 0 ||
          pos_[static_cast<size_t>(p)] > pos_[static_cast<size_t>(last_producer[c])])
        last_producer[c] = p;
  std::vector<int32_t> parent(n, -1);
  for (size_t t = 0; t < n; ++t)
    for (int32_t c : g_.hb_waits.row(t)) {
      const int32_t p = last_producer[static_cast<size_t>(c)];
      if (parent[t] < 0 || pos_[static_cast<size_t>(p)] > pos_[static_cast<size_t>(parent[t])])
        parent[t] = p;
    }
  std::vector<int32_t> size(n, 1);
  for (size_t i = order_.size(); i-- > 0;) {
    const auto t = static_cast<size_t>(order_[i]);
    if (parent[t] >= 0) size[static_cast<size_t>(parent[t])] += size[t];
  }
  tree_pre_.assign(n, 0);
  std::vector<int32_t> next_child(n, 0);
  int32_t next_root = 0;
  for (int32_t t32 : order_) {
    const auto t = static_cast<size_t>(t32);
    if (parent[t] < 0) {
      tree_pre_[t] = next_root;
      next_root += size[t];
    } else {
      int32_t& slot = next_child[static_cast<size_t>(parent[t])];
      tree_pre_[t] = slot;
      slot += size[t];
    }
    next_child[t] = tree_pre_[t] + 1;
  }
  tree_end_.resize(n);
  for (size_t t = 0; t < n; ++t) tree_end_[t] = tree_pre_[t] + size[t];

  // Per counter, the outermost subtree ranges of its sound waiters, sorted (laminar ranges:
  // one starting inside a kept range is nested in it and adds nothing).
  cover_.offsets.assign(nc + 1, 0);
  cover_.values.clear();
  cover_end_.clear();
  std::vector<int32_t> ws;
  for (size_t c = 0; c < nc; ++c) {
    const auto row = hb_waiters_.row(c);
    ws.assign(row.begin(), row.end());
    std::sort(ws.begin(), ws.end(), [&](int32_t a, int32_t b) {
      return tree_pre_[static_cast<size_t>(a)] < tree_pre_[static_cast<size_t>(b)];
    });
    int32_t reach_end = -1;
    for (int32_t w : ws) {
      const int32_t pre = tree_pre_[static_cast<size_t>(w)];
      if (pre < reach_end) continue;
      cover_.values.push_back(pre);
      cover_end_.push_back(tree_end_[static_cast<size_t>(w)]);
      reach_end = tree_end_[static_cast<size_t>(w)];
    }
    cover_.offsets[c + 1] = static_cast<int64_t>(cover_.values.size());
  }
}

bool HappensBefore::tree_covers(int32_t c, int32_t t) const {
  const auto row = cover_.row(static_cast<size_t>(c));
  const int32_t x = tree_pre_[static_cast<size_t>(t)];
  const auto it = std::upper_bound(row.begin(), row.end(), x);
  if (it == row.begin()) return false;
  const auto i =
      static_cast<size_t>(cover_.offsets[static_cast<size_t>(c)] + (it - row.begin()) - 1);
  return x < cover_end_[i];
}

HappensBefore::Ticket HappensBefore::ask(int32_t c, int32_t t) {
  ++asked_;
  if (c < 0 || c >= g_.num_counters || t < 0 || t >= g_.num_tasks) return kNo;
  if (g_.producer_count(c) == 0) return kNo;
  const int32_t r = rep_[static_cast<size_t>(t)];
  const auto waits = g_.hb_waits.row(static_cast<size_t>(r));
  if (std::binary_search(waits.begin(), waits.end(), c)) return kYes;
  // Nothing waits soundly on c before t: no path can carry c's producers to t.
  if (first_wait_pos_[static_cast<size_t>(c)] >= pos_[static_cast<size_t>(r)]) return kNo;
  // t's interval label is not inside c's: t is not reachable from c.
  const size_t cn = static_cast<size_t>(g_.num_tasks) + static_cast<size_t>(c);
  if (rank_[static_cast<size_t>(r)] > rank_[cn] || low_[static_cast<size_t>(r)] < low_[cn])
    return kNo;
  // A sound waiter of c is a tree ancestor of t: ordered through tree edges alone.
  if (tree_covers(c, t) || (r != t && tree_covers(c, r))) return kYes;
  switch (bounded_search(c, r)) {
    case Search::kFound:
      return kYes;
    case Search::kAbsent:
      return kNo;
    case Search::kGaveUp:
      break;
  }
  pending_.push_back(key(c, r));
  return static_cast<Ticket>(pending_.size() - 1);
}

// A forward DFS from counter c that only enters nodes whose interval label contains t's and
// that precede t in topological order (GRAIL's pruned search). In sparse graphs it settles a
// query after a handful of visits; where it would wander (dense graphs) it stops after a fixed
// budget and leaves the query to the sweeps, so its cost per query is bounded.
HappensBefore::Search HappensBefore::bounded_search(int32_t c, int32_t t) {
  constexpr int kBudget = 48;
  const auto n = static_cast<size_t>(g_.num_tasks);
  const auto target = static_cast<size_t>(t);
  const int32_t t_rank = rank_[target], t_low = low_[target], t_pos = pos_[target];
  if (++search_stamp_ == 0) {  // wrapped: forget all marks
    std::fill(visited_.begin(), visited_.end(), 0);
    search_stamp_ = 1;
  }
  auto admissible = [&](size_t v) {
    if (visited_[v] == search_stamp_) return false;
    visited_[v] = search_stamp_;
    return rank_[v] >= t_rank && low_[v] <= t_low;
  };
  search_stack_.clear();
  search_stack_.push_back(static_cast<int32_t>(n + static_cast<size_t>(c)));
  visited_[n + static_cast<size_t>(c)] = search_stamp_;
  int work = 0;  // counters popped plus waiters scanned: a 100k-waiter counter is not "one step"
  while (!search_stack_.empty()) {
    const auto cu = static_cast<size_t>(search_stack_.back()) - n;  // the stack holds counters
    search_stack_.pop_back();
    for (int32_t w : hb_waiters_.row(cu)) {
      if (++work > kBudget) return Search::kGaveUp;
      const auto wu = static_cast<size_t>(w);
      if (wu == target) return Search::kFound;
      if (pos_[wu] >= t_pos || !admissible(wu)) continue;
      const int32_t oc = g_.out_counter[wu];
      if (oc >= 0 && admissible(n + static_cast<size_t>(oc)))
        search_stack_.push_back(static_cast<int32_t>(n) + oc);
    }
  }
  return Search::kAbsent;
}

bool HappensBefore::answer(Ticket ticket) const {
  if (ticket == kYes) return true;
  if (ticket < 0) return false;
  const uint64_t k = pending_[static_cast<size_t>(ticket)];
  const auto it = std::lower_bound(solved_keys_.begin(), solved_keys_.end(), k);
  return it != solved_keys_.end() && *it == k &&
         solved_[static_cast<size_t>(it - solved_keys_.begin())];
}

void HappensBefore::clear() {
  pending_.clear();
  solved_keys_.clear();
  solved_.clear();
}

void HappensBefore::solve() {
  solved_keys_ = pending_;
  std::sort(solved_keys_.begin(), solved_keys_.end());
  solved_keys_.erase(std::unique(solved_keys_.begin(), solved_keys_.end()), solved_keys_.end());
  solved_.assign(solved_keys_.size(), 0);
  if (solved_keys_.empty()) return;

  // Sources: the distinct counters asked about, in order of where their bit first enters.
  std::vector<int32_t> sources;
  for (uint64_t k : solved_keys_) {
    const auto c = static_cast<int32_t>(k >> 32);
    if (sources.empty() || sources.back() != c) sources.push_back(c);
  }
  std::sort(sources.begin(), sources.end(), [&](int32_t a, int32_t b) {
    const int32_t pa = first_wait_pos_[static_cast<size_t>(a)],
                  pb = first_wait_pos_[static_cast<size_t>(b)];
    return pa != pb ? pa < pb : a < b;
  });

  const size_t nc = static_cast<size_t>(g_.num_counters);
  const size_t words = std::clamp<size_t>(
      std::min(kMaskBudgetWords / std::max<size_t>(nc, 1), (sources.size() + 63) / 64), 1,
      kMaxWords);
  const size_t per_sweep = 64 * words;

  // counter -> its source index (chunk = index / per_sweep, bit = index % per_sweep).
  std::vector<int32_t> source_index(nc, -1);
  for (size_t i = 0; i < sources.size(); ++i)
    source_index[static_cast<size_t>(sources[i])] = static_cast<int32_t>(i);

  // Queries grouped by sweep, then by the position of their target task.
  struct Query {
    int32_t sweep;
    int32_t pos;
    int32_t bit;
    int32_t slot;  // index into solved_
  };
  std::vector<Query> queries;
  queries.reserve(solved_keys_.size());
  for (size_t i = 0; i < solved_keys_.size(); ++i) {
    const auto c = static_cast<int32_t>(solved_keys_[i] >> 32);
    const auto t = static_cast<int32_t>(solved_keys_[i] & 0xffffffffu);
    const auto s = static_cast<size_t>(source_index[static_cast<size_t>(c)]);
    queries.push_back({static_cast<int32_t>(s / per_sweep), pos_[static_cast<size_t>(t)],
                       static_cast<int32_t>(s % per_sweep), static_cast<int32_t>(i)});
  }
  std::sort(queries.begin(), queries.end(), [](const Query& a, const Query& b) {
    return a.sweep != b.sweep ? a.sweep < b.sweep : a.pos < b.pos;
  });

  // reach[c] (words uint64): the union, over c's producers, of the sources they transitively
  // wait on. A task soundly waiting on c waits for ALL of c's producers, so it inherits every
  // bit of reach[c] (plus c's own bit when c is a source). stamp[c] == the current sweep marks
  // reach[c] as written in this sweep; otherwise it reads as zero, so nothing is ever cleared
  // between sweeps.
  std::vector<uint64_t> reach(nc * words, 0);
  std::vector<int32_t> stamp(nc, -1);
  std::vector<int32_t> chunk_bit(nc, -1);  // counter -> bit within the current sweep, or -1
  std::vector<uint64_t> mask(words);

  size_t q = 0;
  const size_t n_sweeps = (sources.size() + per_sweep - 1) / per_sweep;
  for (size_t sweep = 0; sweep < n_sweeps; ++sweep) {
    const size_t lo = sweep * per_sweep, hi = std::min(sources.size(), lo + per_sweep);
    for (size_t i = lo; i < hi; ++i)
      chunk_bit[static_cast<size_t>(sources[i])] = static_cast<int32_t>(i - lo);
    const size_t q_end = static_cast<size_t>(
        std::find_if(queries.begin() + static_cast<std::ptrdiff_t>(q), queries.end(),
                     [&](const Query& x) { return x.sweep != static_cast<int32_t>(sweep); }) -
        queries.begin());
    if (q < q_end) {
      ++sweeps_;
      const auto start = static_cast<size_t>(first_wait_pos_[static_cast<size_t>(sources[lo])]);
      const auto end = static_cast<size_t>(queries[q_end - 1].pos);
      const auto tag = static_cast<int32_t>(sweep);
      for (size_t p = start; p <= end; ++p) {
        const auto t = static_cast<size_t>(order_[p]);
        std::fill(mask.begin(), mask.end(), 0);
        bool any = false;
        for (int32_t c : g_.hb_waits.row(t)) {
          const auto cu = static_cast<size_t>(c);
          if (stamp[cu] == tag) {
            const uint64_t* r = &reach[cu * words];
            for (size_t w = 0; w < words; ++w) mask[w] |= r[w];
            any = true;
          }
          if (chunk_bit[cu] >= 0) {
            mask[static_cast<size_t>(chunk_bit[cu]) / 64] |= uint64_t{1} << (chunk_bit[cu] % 64);
            any = true;
          }
        }
        for (; q < q_end && static_cast<size_t>(queries[q].pos) == p; ++q)
          solved_[static_cast<size_t>(queries[q].slot)] =
              (mask[static_cast<size_t>(queries[q].bit) / 64] >> (queries[q].bit % 64)) & 1;
        const int32_t oc = g_.out_counter[t];
        if (!any || oc < 0) continue;
        const auto ou = static_cast<size_t>(oc);
        uint64_t* r = &reach[ou * words];
        if (stamp[ou] != tag) {
          stamp[ou] = tag;
          std::copy(mask.begin(), mask.end(), r);
        } else {
          for (size_t w = 0; w < words; ++w) r[w] |= mask[w];
        }
      }
    }
    q = q_end;
    for (size_t i = lo; i < hi; ++i) chunk_bit[static_cast<size_t>(sources[i])] = -1;
  }
}

}  // namespace amk::detail
