#include "ir/cluster_handoffs.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "ir/write_regions.h"

namespace amk {

namespace {

using detail::WriteRegion;

// A region past this many flat ranges counts as the whole buffer (a hostile stride must not
// cost memory; the lowering's largest, a stack's rows of a cluster's heads, is a few per slab).
constexpr int64_t kMaxRanges = int64_t(1) << 16;

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// `r` of buffer `b` ([..., cols], row-major) as flat element ranges, ascending and disjoint
// (whole rows as one range; merge() joins touching ones).
Ranges flat_ranges(const Buffer& b, const WriteRegion& r) {
  const int64_t numel = b.numel();
  if (r.whole || b.shape.empty()) return {{0, numel}};
  const int64_t cols = b.shape.back();
  if (cols < 1) return {{0, numel}};
  const int64_t rows = numel / cols;
  const int64_t c_lo = std::clamp<int64_t>(r.col_lo, 0, cols);
  const int64_t c_hi = std::clamp<int64_t>(r.col_hi, c_lo, cols);
  const int64_t runs = std::max<int64_t>(r.row_runs, 1);
  Ranges out;
  for (int64_t k = 0; k < runs; ++k) {
    const int64_t shift = k * r.row_stride;  // the writer's runs lie in the buffer's rows
    const int64_t lo = std::clamp<int64_t>(r.row_lo == detail::kRegionMin ? 0 : r.row_lo + shift,
                                           0, rows);
    const int64_t hi = std::clamp<int64_t>(r.row_hi == detail::kRegionMax ? rows : r.row_hi + shift,
                                           lo, rows);
    if (c_lo == 0 && c_hi == cols) {
      if (lo < hi) out.emplace_back(lo * cols, hi * cols);
    } else {
      for (int64_t row = lo; row < hi && c_lo < c_hi; ++row) {
        out.emplace_back(row * cols + c_lo, row * cols + c_hi);
        if (int64_t(out.size()) > kMaxRanges) return {{0, numel}};
      }
    }
    if (int64_t(out.size()) > kMaxRanges) return {{0, numel}};
  }
  return out;
}

void merge(Ranges& r) {
  std::sort(r.begin(), r.end());
  Ranges m;
  for (const auto& x : r) {
    if (!m.empty() && x.first <= m.back().second) m.back().second = std::max(m.back().second, x.second);
    else m.push_back(x);
  }
  r = std::move(m);
}

// Do two merged, ascending range lists meet?
bool meet(const Ranges& a, const Ranges& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].second <= b[j].first) ++i;
    else if (b[j].second <= a[i].first) ++j;
    else return true;
  }
  return false;
}

}  // namespace

ClusterHandoffs find_cluster_handoffs(const Program& p, int64_t cluster_size) {
  if (cluster_size < 1) throw std::invalid_argument("cluster_size must be >= 1");
  const size_t nc = p.counters.size(), nb = p.buffers.size();
  std::vector<std::vector<int64_t>> signallers(nc), waiters(nc), readers(nb), writers(nb);
  // By position in the task list (a validated program's ids); references out of range, which
  // validate() refuses, are skipped.
  for (size_t i = 0; i < p.tasks.size(); ++i) {
    const Task& t = p.tasks[i];
    if (t.out_counter >= 0 && size_t(t.out_counter) < nc)
      signallers[size_t(t.out_counter)].push_back(int64_t(i));
    for (const Wait& w : t.waits)
      if (w.counter >= 0 && size_t(w.counter) < nc) waiters[size_t(w.counter)].push_back(int64_t(i));
    for (const int64_t b : t.inputs)
      if (b >= 0 && size_t(b) < nb) readers[size_t(b)].push_back(int64_t(i));
    for (const int64_t b : t.outputs)
      if (b >= 0 && size_t(b) < nb) writers[size_t(b)].push_back(int64_t(i));
  }
  const auto cluster_of = [&](int64_t task) -> int64_t {
    const auto& sm = p.tasks[size_t(task)].sm;
    return sm && *sm >= 0 ? *sm / cluster_size : -1;
  };
  ClusterHandoffs out;
  for (size_t k = 0; k < nc; ++k) {
    if (signallers[k].empty()) continue;
    ClusterHandoff h;
    h.counter = int64_t(k);
    h.cluster = cluster_of(signallers[k].front());
    bool local = h.cluster >= 0 && !waiters[k].empty();
    for (const int64_t t : signallers[k]) local = local && cluster_of(t) == h.cluster;
    for (const int64_t t : waiters[k]) local = local && cluster_of(t) == h.cluster;
    // The activations the signallers write, per buffer.
    std::vector<std::pair<int64_t, Ranges>> written;
    for (size_t i = 0; local && i < signallers[k].size(); ++i) {
      const Task& t = p.tasks[size_t(signallers[k][i])];
      for (const int64_t b : t.outputs) {
        if (b < 0 || size_t(b) >= nb) {
          local = false;
          break;
        }
        const Buffer& buf = p.buffers[size_t(b)];
        if (buf.kind == BufferKind::KV_CACHE) {
          h.writes_kv_cache = true;
          continue;
        }
        if (buf.kind != BufferKind::ACTIVATION) {
          local = false;  // an IO output: the host reads it
          break;
        }
        auto it = std::find_if(written.begin(), written.end(),
                               [&](const auto& w) { return w.first == b; });
        if (it == written.end()) it = written.insert(written.end(), {b, {}});
        const Ranges r = flat_ranges(buf, detail::write_region(p, t, b));
        it->second.insert(it->second.end(), r.begin(), r.end());
      }
    }
    // Every reader of what they write must be a waiter (then on the cluster, a receiver), and
    // no other task may write it (an accumulation's adds, a later writer of the same elements):
    // a mailbox holds one counter's writes.
    for (auto& [b, ranges] : written) {
      if (!local) break;
      merge(ranges);
      for (const int64_t u : writers[size_t(b)]) {
        const Task& writer = p.tasks[size_t(u)];
        if (writer.out_counter == int64_t(k)) continue;
        if (meet(ranges, flat_ranges(p.buffers[size_t(b)], detail::write_region(p, writer, b)))) {
          local = false;
          break;
        }
      }
      if (!local) break;
      for (const int64_t u : readers[size_t(b)]) {
        const Task& reader = p.tasks[size_t(u)];
        const Ranges want = flat_ranges(p.buffers[size_t(b)], detail::read_region(p, reader, b));
        if (!meet(ranges, want)) continue;
        const bool waits = std::any_of(reader.waits.begin(), reader.waits.end(),
                                       [&](const Wait& w) { return w.counter == int64_t(k); });
        if (!waits) {
          local = false;
          break;
        }
      }
    }
    if (!local) {
      ++out.counters_across_clusters;
      continue;
    }
    for (const int64_t t : waiters[k]) h.receivers.push_back(*p.tasks[size_t(t)].sm);
    std::sort(h.receivers.begin(), h.receivers.end());
    h.receivers.erase(std::unique(h.receivers.begin(), h.receivers.end()), h.receivers.end());
    for (const auto& [b, ranges] : written)
      for (const auto& [lo, hi] : ranges) {
        h.pieces.push_back({b, lo, hi});
        h.bytes += dtype_nbytes(p.buffers[size_t(b)].dtype, hi - lo);
      }
    std::sort(h.pieces.begin(), h.pieces.end(), [](const auto& a, const auto& c) {
      return std::pair(a.buffer, a.begin) < std::pair(c.buffer, c.begin);
    });
    out.handoffs.push_back(std::move(h));
  }
  return out;
}

}  // namespace amk
