// Race-freedom (IR_SPEC §3.2), checked exactly at every program size.
//
// RAW: every read of a transient buffer must happen after EVERY other task writing it (some
// writer is not enough: a multi-writer buffer read after only part of its tiles is a race).
// KV_CACHE: state from the previous step may be read freely unless this pass also appends to
// it; then every non-writer reader must be ordered after the append. WAW: writers of one buffer
// must either be disjoint tiles under one shared counter, or totally ordered.
//
// Writers are grouped by out_counter: "all writers with counter c happen before t" is a single
// happens-before query (c, t), so a reader of 1,000 tiles under one counter costs one query.
#include <algorithm>
#include <optional>

#include "ir/validate_context.h"
#include "ir/write_regions.h"

namespace amk::detail {

namespace {

// Per buffer, its writers sorted by (out_counter, task) and split into runs of one counter
// (counter -1 = writers whose out_counter names no counter: they happen before nothing).
struct WriterGroups {
  std::vector<int32_t> by_counter;  // same offsets as BufferUse::writers
  Csr runs;                         // buffer -> start index (into by_counter) of each run

  WriterGroups(const BufferUse& use, const DependencyGraph& g) : by_counter(use.writers.values) {
    std::vector<std::pair<int32_t, int32_t>> run_pairs;
    for (size_t b = 0; b < use.writers.rows(); ++b) {
      const auto lo = use.writers.offsets[b], hi = use.writers.offsets[b + 1];
      auto first = by_counter.begin() + lo, last = by_counter.begin() + hi;
      std::sort(first, last, [&](int32_t x, int32_t y) {
        const int32_t cx = g.out_counter[static_cast<size_t>(x)], cy = g.out_counter[static_cast<size_t>(y)];
        return cx != cy ? cx < cy : x < y;
      });
      for (auto i = lo; i < hi; ++i)
        if (i == lo || counter_at(g, i) != counter_at(g, i - 1))
          run_pairs.emplace_back(static_cast<int32_t>(b), static_cast<int32_t>(i));
    }
    runs = Csr::from_pairs(use.writers.rows(), run_pairs);
  }
  int32_t counter_at(const DependencyGraph& g, int64_t i) const {
    return g.out_counter[static_cast<size_t>(by_counter[static_cast<size_t>(i)])];
  }
};

// One counter-group of writers a read (or a later writer) must be ordered after.
struct Requirement {
  int32_t run_begin;  // index into WriterGroups::by_counter
  int32_t run_end;
  HappensBefore::Ticket ticket;
  bool fails_outright;  // no query can succeed (counterless writers, or the reader's own counter)
  bool includes_reader = false;  // the run holds the reading task itself (its own counter)
};

struct ReadCheck {
  int32_t task;
  int32_t buffer;
  bool kv;
  size_t req_begin, req_end;  // into the requirement list
};

struct WawCheck {
  int32_t buffer;
  bool one_counter;
  std::vector<int32_t> order;  // the writers in topological order (multi-counter case)
  size_t req_begin, req_end;   // one requirement per consecutive pair
  std::optional<std::pair<size_t, size_t>> overlap;  // one-counter case
};

}  // namespace

void check_races(const CheckInputs& in) {
  const Program& p = in.program;
  const BufferUse& use = in.use;
  const DependencyGraph& g = in.graph;
  HappensBefore& hb = in.hb;
  hb.clear();
  const WriterGroups groups(use, g);

  std::vector<Requirement> reqs;
  std::vector<ReadCheck> reads;

  // ---- RAW / KV: collect the happens-before queries ----
  for (int32_t t = 0; t < g.num_tasks; ++t) {
    for (int32_t b : use.reads.row(static_cast<size_t>(t))) {
      const Buffer& buf = p.buffers[static_cast<size_t>(b)];
      if (!enum_in_range(buf.kind, kNumBufferKinds) || is_readonly_kind(buf.kind)) continue;
      const bool kv = buf.kind == BufferKind::KV_CACHE;
      const size_t n_writers = use.writers.row_size(static_cast<size_t>(b));
      const bool self_writes = use.task_writes(t, b);
      if (kv && (n_writers == 0 || self_writes)) continue;  // prior-step state / own append
      if (n_writers == 0) {
        in.diag.error("task " + task_ref(p, t) + " reads buffer " + buffer_ref(p, b) +
                      " that is never produced");
        continue;
      }
      if (self_writes && n_writers == 1) {
        in.diag.warn("task " + task_ref(p, t) + " reads buffer " + buffer_ref(p, b) +
                     " in place with no external producer (reads its own uninitialized output?)");
        continue;
      }
      ReadCheck rc{t, b, kv, reqs.size(), 0};
      const auto runs = groups.runs.row(static_cast<size_t>(b));
      const auto end_of_writers = static_cast<int32_t>(use.writers.offsets[static_cast<size_t>(b) + 1]);
      for (size_t r = 0; r < runs.size(); ++r) {
        const int32_t lo = runs[r], hi = r + 1 < runs.size() ? runs[r + 1] : end_of_writers;
        const int32_t c = groups.counter_at(g, lo);
        if (self_writes && c == g.out_counter[static_cast<size_t>(t)]) {
          if (hi - lo == 1) continue;  // the run is t alone
          reqs.push_back({lo, hi, 0, true, true});  // siblings on t's own counter cannot precede t
        } else if (c < 0) {
          reqs.push_back({lo, hi, 0, true, false});
        } else {
          reqs.push_back({lo, hi, hb.ask(c, t), false, false});
        }
      }
      rc.req_end = reqs.size();
      reads.push_back(rc);
    }
  }

  // ---- WAW: collect ----
  std::vector<WawCheck> waws;
  std::vector<WriteRegion> regions;
  for (size_t bi = 0; bi < use.writers.rows(); ++bi) {
    const auto b = static_cast<int32_t>(bi);
    const auto ws = use.writers.row(bi);
    const Buffer& buf = p.buffers[bi];
    if (ws.size() < 2 || !enum_in_range(buf.kind, kNumBufferKinds) || is_readonly_kind(buf.kind))
      continue;
    const auto runs = groups.runs.row(bi);
    WawCheck w{b, runs.size() == 1 && groups.counter_at(g, runs[0]) >= 0, {}, reqs.size(), 0, {}};
    if (w.one_counter) {
      // Producers of one counter are never ordered among themselves; only disjointness helps.
      regions.clear();
      for (int32_t t : ws) regions.push_back(write_region(p.tasks[static_cast<size_t>(t)]));
      w.overlap = find_overlap(regions);
      if (!w.overlap) continue;
    } else {
      // Totally ordered iff each writer happens before the next one in topological order.
      w.order.assign(ws.begin(), ws.end());
      std::sort(w.order.begin(), w.order.end(),
                [&](int32_t x, int32_t y) { return hb.position(x) < hb.position(y); });
      for (size_t i = 0; i + 1 < w.order.size(); ++i) {
        const int32_t c = g.out_counter[static_cast<size_t>(w.order[i])];
        reqs.push_back({static_cast<int32_t>(i), static_cast<int32_t>(i + 1),
                        c < 0 ? 0 : hb.ask(c, w.order[i + 1]), c < 0, false});
      }
    }
    w.req_end = reqs.size();
    waws.push_back(std::move(w));
  }

  hb.solve();
  auto holds = [&](const Requirement& r) { return !r.fails_outright && hb.answer(r.ticket); };

  // ---- report, RAW first (task order), then WAW (buffer order) ----
  // A message names a few unordered writers and counts the rest, so a 1,000-tile run costs
  // O(1) per failing read, not O(1,000).
  constexpr size_t kNamed = 7;
  std::vector<int32_t> missing;
  for (const ReadCheck& rc : reads) {
    missing.clear();
    size_t total = 0;
    for (size_t i = rc.req_begin; i < rc.req_end; ++i) {
      if (holds(reqs[i])) continue;
      const Requirement& r = reqs[i];
      int32_t k = r.run_begin;
      for (; k < r.run_end && missing.size() < kNamed; ++k)
        if (groups.by_counter[static_cast<size_t>(k)] != rc.task)
          missing.push_back(groups.by_counter[static_cast<size_t>(k)]);
      total += static_cast<size_t>(r.run_end - r.run_begin) - (r.includes_reader ? 1 : 0);
    }
    if (total == 0) continue;
    std::sort(missing.begin(), missing.end());
    in.diag.error("task " + task_ref(p, rc.task) + " reads " + (rc.kv ? "KV cache " : "buffer ") +
                  buffer_ref(p, rc.buffer) + " but writer task(s) " + id_list(missing, total) +
                  " are NOT ordered before it, " + (rc.kv ? "KV cache RACE" : "data RACE"));
  }
  for (const WawCheck& w : waws) {
    std::pair<int32_t, int32_t> culprits{-1, -1};
    std::string reason;
    if (w.one_counter) {
      const auto ws = use.writers.row(static_cast<size_t>(w.buffer));
      culprits = {ws[w.overlap->first], ws[w.overlap->second]};
      if (culprits.first > culprits.second) std::swap(culprits.first, culprits.second);
      reason = "share a counter but their tiles OVERLAP; ";
    } else {
      for (size_t i = w.req_begin; i < w.req_end && culprits.first < 0; ++i)
        if (!holds(reqs[i]))
          culprits = {w.order[static_cast<size_t>(reqs[i].run_begin)],
                      w.order[static_cast<size_t>(reqs[i].run_end)]};
      if (culprits.first < 0) continue;  // totally ordered
      reason = "do not share one counter (disjoint tiles prove nothing then) and ";
    }
    in.diag.error("multi-writer WAW race on buffer " + buffer_ref(p, w.buffer) + ": writers " +
                  task_ref(p, culprits.first) + " and " + task_ref(p, culprits.second) + " " +
                  reason + "neither is ordered happens-before the other, write-after-write RACE");
  }
}

}  // namespace amk::detail
