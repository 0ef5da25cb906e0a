#include "schedule/page_allocation.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <unordered_map>
#include <vector>

#include "amk/lowering.h"

namespace amk::schedule {

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// is_cut[c]: every task before c reaches c and c reaches every task after it. With list order
// topological that holds iff no dependency edge jumps over c, every task before c has a
// successor and every task after c has a predecessor (induction along the list).
std::vector<bool> find_cuts(const Program& p) {
  const size_t n = p.tasks.size();
  std::unordered_map<int64_t, std::vector<int64_t>> producers;
  for (const Task& t : p.tasks) producers[t.out_counter].push_back(t.id);
  std::vector<int64_t> jump(n + 1, 0);
  std::vector<bool> has_pred(n, false), has_succ(n, false);
  for (const Task& t : p.tasks)
    for (const Wait& w : t.waits)
      for (int64_t a : producers[w.counter]) {
        has_succ[size_t(a)] = true;
        has_pred[size_t(t.id)] = true;
        if (t.id - a >= 2) {
          ++jump[size_t(a + 1)];
          --jump[size_t(t.id)];
        }
      }
  std::vector<bool> cut(n, false);
  std::vector<bool> all_after_have_pred(n + 1, true);
  for (size_t i = n; i-- > 0;) all_after_have_pred[i] = all_after_have_pred[i + 1] && has_pred[i];
  int64_t covering = 0;
  bool all_before_have_succ = true;
  for (size_t c = 0; c < n; ++c) {
    covering += jump[c];
    cut[c] = covering == 0 && all_before_have_succ && all_after_have_pred[c + 1];
    all_before_have_succ = all_before_have_succ && has_succ[c];
  }
  return cut;
}

struct LiveRange {
  int64_t buffer = 0;
  int64_t first_write = kNever;
  int64_t last_use = -1;
};

std::vector<LiveRange> activation_ranges(const Program& p) {
  std::unordered_map<int64_t, LiveRange> ranges;
  for (const Buffer& b : p.buffers)
    if (b.kind == BufferKind::ACTIVATION) ranges[b.id].buffer = b.id;
  for (const Task& t : p.tasks) {
    for (int64_t id : t.outputs)
      if (auto it = ranges.find(id); it != ranges.end()) {
        it->second.first_write = std::min(it->second.first_write, t.id);
        it->second.last_use = std::max(it->second.last_use, t.id);
      }
    for (int64_t id : t.inputs)
      if (auto it = ranges.find(id); it != ranges.end())
        it->second.last_use = std::max(it->second.last_use, t.id);
  }
  std::vector<LiveRange> out;
  for (const Buffer& b : p.buffers)
    if (b.kind == BufferKind::ACTIVATION && ranges[b.id].first_write != kNever)
      out.push_back(ranges[b.id]);
  return out;
}

}  // namespace

std::optional<PageAllocation> allocate_pages(const Program& p, std::string_view policy) {
  if (policy == "none") return std::nullopt;
  std::vector<LiveRange> ranges = activation_ranges(p);
  PageAllocation alloc;
  if (policy == "linear") {
    for (const LiveRange& r : ranges) {
      const Buffer& b = p.buffers[size_t(r.buffer)];
      const int64_t page = int64_t(alloc.pages.size());
      alloc.pages.push_back(Page{page, b.space, b.nbytes(), r.first_write, r.last_use});
      alloc.buffer_to_page.emplace_back(b.id, page);
    }
    return alloc;
  }
  if (policy != "graph_color")
    throw LoweringError("page_allocation '" + std::string(policy) + "' is unknown");

  const std::vector<bool> cut = find_cuts(p);
  std::vector<int64_t> next_cut(p.tasks.size() + 1, kNever);
  for (size_t i = p.tasks.size(); i-- > 0;) next_cut[i] = cut[i] ? int64_t(i) : next_cut[i + 1];

  std::stable_sort(ranges.begin(), ranges.end(), [](const LiveRange& a, const LiveRange& b) {
    return a.first_write < b.first_write;
  });
  std::vector<int64_t> page_last_use;  // the current occupant's last use, per page
  for (const LiveRange& r : ranges) {
    const Buffer& b = p.buffers[size_t(r.buffer)];
    const int64_t need = b.nbytes();
    int64_t best = -1;
    for (size_t i = 0; i < alloc.pages.size(); ++i) {
      const Page& pg = alloc.pages[i];
      const int64_t last = page_last_use[i];
      // Dead before we write: a cut lies in [last use, first write] and they are distinct tasks.
      if (pg.space != b.space || last >= r.first_write || next_cut[size_t(last)] > r.first_write)
        continue;
      // Prefer a page already big enough, then the closest size (least scratch growth).
      const auto waste = [&](const Page& q) {
        return q.nbytes >= need ? q.nbytes - need : (need - q.nbytes) * 4;
      };
      if (best < 0 || waste(pg) < waste(alloc.pages[size_t(best)])) best = int64_t(i);
    }
    if (best < 0) {
      best = int64_t(alloc.pages.size());
      alloc.pages.push_back(Page{best, b.space, need, r.first_write, r.last_use});
      page_last_use.push_back(r.last_use);
    } else {
      Page& pg = alloc.pages[size_t(best)];
      pg.nbytes = std::max(pg.nbytes, need);
      pg.live_end = std::max(pg.live_end, r.last_use);
      page_last_use[size_t(best)] = r.last_use;
    }
    alloc.buffer_to_page.emplace_back(b.id, best);
  }
  std::sort(alloc.buffer_to_page.begin(), alloc.buffer_to_page.end());
  return alloc;
}

}  // namespace amk::schedule
