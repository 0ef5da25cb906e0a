// Race-freedom (IR_SPEC §3.2), checked exactly at every program size.
//
// The ordering rule. A read of a transient buffer (ACTIVATION, IO_OUTPUT) is valid iff some
// writer of it happens before the read and every other writer is ordered with respect to the
// read: before it or after it (so ping-pong reuse A -> B -> A and in-place accumulation chains
// are valid, and a read with no writer ordered before it is an uninitialized read). A read of a
// KV_CACHE needs no writer (prior-step state), but every writer of it in this pass must be
// ordered before or after the read; a task that appends to the cache it reads is exempt (its
// own append, or the fused attention's disjoint rows). WAW: writers of one buffer must either
// write pairwise disjoint regions (tiles, KV rows: write_regions.h), or be totally ordered.
// A task's own write comes after its read (ops read all inputs before writing). When the writers
// ordered before a read are tiles (partial write regions), their regions must cover the whole
// buffer: tiles written only after the read, or by nobody, leave columns (rows) it reads
// unwritten.
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
        const int32_t cx = g.out_counter[static_cast<size_t>(x)],
                      cy = g.out_counter[static_cast<size_t>(y)];
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

// A set of writers a read must be ordered after: tasks[begin, end) of some task array (a
// counter run of WriterGroups::by_counter, or a slice of a writer chain), proven by one query.
struct Requirement {
  const std::vector<int32_t>* tasks;
  int32_t begin, end;
  HappensBefore::Ticket ticket;
  bool fails_outright;           // no query can succeed (see where it is made)
  bool includes_reader = false;  // the range holds the reading task itself (its own counter)
  bool after_impossible = false;  // the writers cannot be ordered after the reader either
  bool before = false;            // after phase 1: the range happens before the reader
  size_t after_begin = 0, after_end = 0;  // phase 2: its writers' after-checks
};

// Does the reader happen before writer `task`?
struct AfterCheck {
  int32_t task;
  HappensBefore::Ticket ticket;
  bool fails_outright;
};

struct ReadCheck {
  int32_t task;
  int32_t buffer;
  bool kv;
  size_t req_begin, req_end;  // into the requirement list
  bool unchecked = false;     // too many after-checks: reported as skipped
  WriteRegion want;           // the part read (whole unless read_region says less)
  bool read_as_whole = false;  // a partial read checked as whole: the region budget ran out
};

struct WawCheck {
  int32_t buffer = -1;
  bool one_counter = false;
  std::vector<int32_t> order;                // multi-counter case: the writers in topological order
  std::vector<int32_t> order_pos;            // ... and their positions
  std::vector<HappensBefore::Ticket> links;  // order[i] happens before order[i + 1]?
  std::optional<std::pair<size_t, size_t>> overlap;  // one-counter case
  std::pair<int32_t, int32_t> culprits{-1, -1};      // after solving: a racing pair
  bool chain = false;  // after solving: writers totally ordered (multi-counter case)
  bool disjoint = false;  // multi-counter writers whose regions are pairwise disjoint
};

// Reads of buffers whose writers race among themselves (a WAW error) are checked per counter
// run; this caps those queries so a hostile program cannot make the check quadratic. Reads past
// the cap are reported as unchecked (the program is rejected by its WAW error anyway).
constexpr int64_t kUnorderedRunBudget = int64_t{1} << 22;
// Writer regions looked at for partial reads (read_region), per task besides that: a tensor-
// parallel step's shard sums, head-ranged merges and head-ranged attention tasks look at ~130
// writers each a task (llama-3.2-1b in 8 clusters of 16: 5.3 M looks, 41 k tasks), which a
// fixed budget ran out of at layer 13. Linear in the program, so no input makes it quadratic.
constexpr int64_t kRegionLooksPerTask = 256;

// Do `regions` (writes to one buffer of `rows` x `cols` elements, in the write_region sense)
// cover all of it? A whole write does; else tiles that each span every row must cover every
// column, or tiles that each span every column must cover every row. Other shapes (2-D tiles)
// are Unknown: where some writers follow the read the caller then requires every writer to
// precede it; where all precede it, only a proven gap (NotCovered) is an error.
enum class Coverage { Covered, NotCovered, Unknown };
// `want`: the part read (read_region, one run), its rows and columns clamped to the buffer's;
// whole: all.
Coverage covers_box(std::vector<WriteRegion>& regions, int64_t rows, int64_t cols,
                    const WriteRegion& want) {
  for (const WriteRegion& r : regions)
    if (r.whole) return Coverage::Covered;
  const int64_t row0 = want.whole ? 0 : std::max<int64_t>(want.row_lo, 0);
  const int64_t row1 = want.whole ? rows : std::min(want.row_hi, rows);
  const int64_t col0 = want.whole ? 0 : std::max<int64_t>(want.col_lo, 0);
  const int64_t col1 = want.whole ? cols : std::min(want.col_hi, cols);
  if (std::any_of(regions.begin(), regions.end(), [](const WriteRegion& r) { return r.row_runs > 1; })) {
    std::optional<ExpandedRegions> runs = expand_runs(regions);
    if (!runs) return Coverage::Unknown;
    regions = std::move(runs->regions);
  }
  const auto verdict = [](bool covered) { return covered ? Coverage::Covered : Coverage::NotCovered; };
  const auto spans = [](int64_t lo, int64_t hi, int64_t from, int64_t to) {
    return lo <= from && hi >= to;
  };
  // Do the regions' [lo, hi) ranges cover [from, to)?
  const auto sweep = [&](auto lo_of, auto hi_of, int64_t from, int64_t to) {
    std::sort(regions.begin(), regions.end(),
              [&](const WriteRegion& a, const WriteRegion& b) { return lo_of(a) < lo_of(b); });
    int64_t reached = from;
    for (const WriteRegion& r : regions) {
      if (hi_of(r) <= reached) continue;
      if (lo_of(r) > reached) return false;
      reached = hi_of(r);
      if (reached >= to) return true;
    }
    return reached >= to;
  };
  if (std::all_of(regions.begin(), regions.end(), [&](const WriteRegion& r) {
        return spans(r.row_lo, r.row_hi, row0, row1);
      }))
    return verdict(sweep([](const WriteRegion& r) { return r.col_lo; },
                         [](const WriteRegion& r) { return r.col_hi; }, col0, col1));
  if (std::all_of(regions.begin(), regions.end(),
                  [&](const WriteRegion& r) { return spans(r.col_lo, r.col_hi, col0, col1); }))
    return verdict(sweep([](const WriteRegion& r) { return r.row_lo; },
                         [](const WriteRegion& r) { return r.row_hi; }, row0, row1));
  return Coverage::Unknown;
}

// As covers_box for each run of a strided `want` (a merge's heads in every slab of a stack):
// NotCovered if one run is not, Unknown if one cannot be decided, else Covered.
Coverage covers_runs(std::vector<WriteRegion>& regions, int64_t rows, int64_t cols,
                     const WriteRegion& want) {
  if (want.whole || want.row_runs <= 1) return covers_box(regions, rows, cols, want);
  if (size_t(want.row_runs) > kMaxExpandedRuns) return Coverage::Unknown;
  Coverage all = Coverage::Covered;
  for (int64_t i = 0; i < want.row_runs; ++i) {
    WriteRegion run = want;
    run.row_lo += i * want.row_stride;
    run.row_hi += i * want.row_stride;
    run.row_stride = 0;
    run.row_runs = 1;
    const Coverage c = covers_box(regions, rows, cols, run);
    if (c == Coverage::NotCovered) return c;
    if (c == Coverage::Unknown) all = c;
  }
  return all;
}

// Does `r` touch any of `want`'s rows and columns (find_overlap's sense)?
bool touches(const WriteRegion& r, const WriteRegion& want) {
  return want.whole || find_overlap({r, want}).has_value();
}

}  // namespace

void check_races(const CheckInputs& in) {
  const Program& p = in.program;
  const BufferUse& use = in.use;
  const DependencyGraph& g = in.graph;
  HappensBefore& hb = in.hb;
  const WriterGroups groups(use, g);
  const size_t nb = use.writers.rows();

  // ---- WAW first: whether a buffer's writers form a chain decides how its reads are checked ----
  std::vector<WawCheck> waws;
  std::vector<int32_t> waw_of(nb, -1);
  std::vector<WriteRegion> regions;
  hb.clear();
  for (size_t bi = 0; bi < nb; ++bi) {
    const auto ws = use.writers.row(bi);
    const Buffer& buf = p.buffers[bi];
    if (ws.size() < 2 || !enum_in_range(buf.kind, kNumBufferKinds) || is_readonly_kind(buf.kind))
      continue;
    // Strided windows' runs are proved disjoint one by one: a hostile number of them is named
    // as what it is, not as an overlap of two tasks.
    regions.clear();
    for (int32_t t : ws) regions.push_back(write_region(p, p.tasks[static_cast<size_t>(t)], buf.id));
    if (run_count(regions) > kMaxExpandedRuns) {
      in.diag.error("buffer " + buffer_ref(p, static_cast<int32_t>(bi)) + ": its writers' strided "
                    "windows (param kv_stride) have more than " + std::to_string(kMaxExpandedRuns) +
                    " runs in all, too many to prove disjoint");
      continue;
    }
    const auto runs = groups.runs.row(bi);
    WawCheck w;
    w.buffer = static_cast<int32_t>(bi);
    w.one_counter = runs.size() == 1 && groups.counter_at(g, runs[0]) >= 0;
    if (w.one_counter) {
      // Producers of one counter are never ordered among themselves; only disjointness helps.
      w.overlap = find_overlap(regions);
      if (w.overlap) {
        w.culprits = {std::min(ws[w.overlap->first], ws[w.overlap->second]),
                      std::max(ws[w.overlap->first], ws[w.overlap->second])};
      }
    } else {
      // Writers under several counters whose regions are pairwise disjoint (say the fused
      // attention's KV rows, one counter per head group) never conflict with each other.
      if (!find_overlap(regions)) {
        w.disjoint = true;
        waw_of[bi] = static_cast<int32_t>(waws.size());
        waws.push_back(std::move(w));
        continue;
      }
      // Totally ordered iff each writer happens before the next one in topological order.
      w.order.assign(ws.begin(), ws.end());
      std::sort(w.order.begin(), w.order.end(),
                [&](int32_t x, int32_t y) { return hb.position(x) < hb.position(y); });
      for (int32_t t : w.order) w.order_pos.push_back(hb.position(t));
      for (size_t i = 0; i + 1 < w.order.size(); ++i) {
        const int32_t c = g.out_counter[static_cast<size_t>(w.order[i])];
        w.links.push_back(c < 0 ? HappensBefore::Ticket{-2} : hb.ask(c, w.order[i + 1]));
      }
    }
    waw_of[bi] = static_cast<int32_t>(waws.size());
    waws.push_back(std::move(w));
  }
  hb.solve();
  for (WawCheck& w : waws) {
    if (w.one_counter || w.disjoint) continue;
    w.chain = true;
    for (size_t i = 0; i < w.links.size() && w.chain; ++i)
      if (!hb.answer(w.links[i])) {
        w.chain = false;
        w.culprits = {w.order[i], w.order[i + 1]};
      }
  }

  // ---- RAW / KV, phase 1: is each writer group ordered BEFORE its reader? ----
  hb.clear();
  std::vector<Requirement> reqs;
  std::vector<ReadCheck> reads;
  std::vector<int64_t> unchecked(nb, 0);
  int64_t run_budget = kUnorderedRunBudget;
  // Writer regions looked at for partial reads.
  int64_t region_budget = kUnorderedRunBudget + kRegionLooksPerTask * int64_t(g.num_tasks);
  for (int32_t t = 0; t < g.num_tasks; ++t) {
    const int32_t my_counter = g.out_counter[static_cast<size_t>(t)];
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
      const auto runs = groups.runs.row(static_cast<size_t>(b));
      const WawCheck* waw = waw_of[static_cast<size_t>(b)] >= 0
                                ? &waws[static_cast<size_t>(waw_of[static_cast<size_t>(b)])]
                                : nullptr;
      if (runs.size() > 1 && !(waw && waw->chain)) {
        if (run_budget < static_cast<int64_t>(runs.size())) {
          ++unchecked[static_cast<size_t>(b)];
          continue;
        }
        run_budget -= static_cast<int64_t>(runs.size());
      }
      ReadCheck rc{t, b, kv, reqs.size(), 0, false, WriteRegion{}};
      if (waw && waw->chain) {
        // A chain w1 -> ... -> wk: the writers before t in topological order are all ordered
        // before t iff the last of them is; those after t are all ordered after t iff the first
        // of them is. A writer cannot be ordered against the topological order.
        const auto j = static_cast<int32_t>(
            std::lower_bound(waw->order_pos.begin(), waw->order_pos.end(), hb.position(t)) -
            waw->order_pos.begin());
        const auto k = static_cast<int32_t>(waw->order.size());
        if (j > 0) {
          const int32_t c =
              g.out_counter[static_cast<size_t>(waw->order[static_cast<size_t>(j - 1)])];
          Requirement r{&waw->order, j - 1, j, c < 0 ? 0 : hb.ask(c, t), c < 0};
          r.after_impossible = true;
          reqs.push_back(r);
        }
        const int32_t after = j + (self_writes ? 1 : 0);
        if (after < k) {
          reqs.push_back({&waw->order, after, after + 1, 0, true});
        }
      } else {
        const auto end_of_writers =
            static_cast<int32_t>(use.writers.offsets[static_cast<size_t>(b) + 1]);
        // A task that reads part of the buffer (read_region: an attention task's heads) need
        // be ordered only against the runs with a writer of that part. Each writer's region
        // costs a look; past the budget a read counts as whole (a stricter check, never a
        // weaker one).
        WriteRegion want = read_region(p, p.tasks[static_cast<size_t>(t)], buf.id);
        if (!want.whole && (region_budget -= int64_t(n_writers)) < 0) {
          want = WriteRegion{};
          rc.read_as_whole = true;
        }
        rc.want = want;
        for (size_t r = 0; r < runs.size(); ++r) {
          const int32_t lo = runs[r], hi = r + 1 < runs.size() ? runs[r + 1] : end_of_writers;
          const int32_t c = groups.counter_at(g, lo);
          if (!want.whole) {
            bool any = false;
            for (int32_t k = lo; k < hi && !any; ++k)
              any = touches(write_region(p, p.tasks[static_cast<size_t>(groups.by_counter[size_t(k)])],
                                         buf.id),
                            want);
            if (!any) continue;  // this run writes none of what t reads
          }
          if (self_writes && c == my_counter) {
            if (hi - lo == 1) continue;  // the run is t alone
            // Siblings on t's own counter: producers of one counter are never ordered.
            Requirement q{&groups.by_counter, lo, hi, 0, true, true};
            q.after_impossible = true;
            reqs.push_back(q);
          } else {
            // c < 0: writers whose out_counter is missing signal nothing, so precede nothing.
            reqs.push_back({&groups.by_counter, lo, hi, c < 0 ? 0 : hb.ask(c, t), c < 0});
          }
        }
      }
      rc.req_end = reqs.size();
      reads.push_back(rc);
    }
  }
  hb.solve();
  for (Requirement& r : reqs) r.before = !r.fails_outright && hb.answer(r.ticket);

  // ---- phase 2: a group not ordered before its reader must be ordered AFTER it ----
  // t happens before w iff all producers of t's counter do (ordering is counter-granular).
  // Writers sharing a wait set share an answer, so a tile run usually costs one query.
  hb.clear();
  std::vector<AfterCheck> afters;
  int64_t after_budget = kUnorderedRunBudget;
  for (ReadCheck& rc : reads) {
    const int32_t my_counter = g.out_counter[static_cast<size_t>(rc.task)];
    bool too_many = false;
    for (size_t i = rc.req_begin; i < rc.req_end && !too_many; ++i) {
      Requirement& r = reqs[i];
      if (r.before) continue;
      r.after_begin = afters.size();
      int32_t last_rep = -1;
      HappensBefore::Ticket last_ticket = 0;
      for (int32_t k = r.begin; k < r.end; ++k) {
        const int32_t w = (*r.tasks)[static_cast<size_t>(k)];
        if (w == rc.task) continue;
        AfterCheck a{w, 0, true};
        if (!r.after_impossible && my_counter >= 0 && hb.position(w) > hb.position(rc.task)) {
          const int32_t rep = hb.representative(w);
          if (rep != last_rep) {
            if (--after_budget < 0) {
              too_many = true;
              break;
            }
            last_rep = rep;
            last_ticket = hb.ask(my_counter, w);
          }
          a = {w, last_ticket, false};
        }
        afters.push_back(a);
      }
      r.after_end = afters.size();
    }
    if (too_many) {
      rc.unchecked = true;
      ++unchecked[static_cast<size_t>(rc.buffer)];
    }
  }
  hb.solve();

  // ---- report, RAW first (task order), then WAW (buffer order) ----
  // A message names a few unordered writers and counts the rest, so a 1,000-tile run costs
  // O(1) per failing read, not O(1,000).
  constexpr size_t kNamed = 7;
  std::vector<int32_t> missing;
  const std::string budget_note =
      " (checked as a read of the whole buffer: the program's budget of writer regions for "
      "partial reads ran out)";
  for (const ReadCheck& rc : reads) {
    if (rc.unchecked) continue;
    missing.clear();
    size_t total = 0;
    bool some_before = false;
    for (size_t i = rc.req_begin; i < rc.req_end; ++i) {
      const Requirement& r = reqs[i];
      if (r.before) {
        some_before = true;
        continue;
      }
      for (size_t k = r.after_begin; k < r.after_end; ++k) {
        const AfterCheck& a = afters[k];
        if (!a.fails_outright && hb.answer(a.ticket)) continue;
        if (missing.size() < kNamed) missing.push_back(a.task);
        ++total;
      }
    }
    if (total > 0) {
      std::sort(missing.begin(), missing.end());
      in.diag.error("task " + task_ref(p, rc.task) + " reads " +
                    (rc.kv ? "KV cache " : "buffer ") + buffer_ref(p, rc.buffer) +
                    " but writer task(s) " + id_list(missing, total) +
                    " are NOT ordered before or after it, " +
                    (rc.kv ? "KV cache RACE" : "data RACE") +
                    (rc.read_as_whole ? budget_note : ""));
    } else if (!some_before && !rc.kv) {
      in.diag.error("task " + task_ref(p, rc.task) + " reads buffer " +
                    buffer_ref(p, rc.buffer) +
                    " but no writer of it is ordered before it (an uninitialized read), data RACE");
    } else if (!rc.kv) {
      // The writers that precede the read must write all of the buffer: else the read sees
      // parts only a later writer fills (some writers follow it) or parts nobody writes.
      bool all_before = true, whole_before = false;
      for (size_t i = rc.req_begin; i < rc.req_end; ++i) all_before &= reqs[i].before;
      regions.clear();
      for (size_t i = rc.req_begin; i < rc.req_end && !whole_before; ++i) {
        const Requirement& r = reqs[i];
        if (!r.before) continue;
        // A chain's requirement names only the last writer before the read; the earlier links
        // precede it, so their writes count too. Newest first, stopping at a whole write (an
        // accumulator chain costs O(1) a read, not O(chain)).
        const int32_t first = r.tasks == &groups.by_counter ? r.begin : 0;
        for (int32_t k = r.end - 1; k >= first && !whole_before; --k) {
          regions.push_back(write_region(p, p.tasks[static_cast<size_t>((*r.tasks)[size_t(k)])],
                                         p.buffers[static_cast<size_t>(rc.buffer)].id));
          whole_before = regions.back().whole;
        }
      }
      const Buffer& buf = p.buffers[static_cast<size_t>(rc.buffer)];
      const int64_t cols = buf.shape.empty() ? buf.numel() : buf.shape.back();
      const int64_t rows = cols > 0 ? buf.numel() / cols : 0;
      const Coverage coverage = covers_runs(regions, rows, cols, rc.want);
      if (!all_before && coverage != Coverage::Covered)
        in.diag.error("task " + task_ref(p, rc.task) + " reads buffer " +
                      buffer_ref(p, rc.buffer) +
                      " but the writers ordered before it write only part of it (the rest is "
                      "written after the read), data RACE" +
                      (rc.read_as_whole ? budget_note : ""));
      else if (all_before && coverage == Coverage::NotCovered)
        in.diag.error("task " + task_ref(p, rc.task) + " reads buffer " +
                      buffer_ref(p, rc.buffer) +
                      " but its writers write only part of it (the rest is never written: an "
                      "uninitialized read), data RACE" +
                      (rc.read_as_whole ? budget_note : ""));
    }
  }
  for (size_t b = 0; b < nb; ++b)
    if (unchecked[b] > 0)
      in.diag.error("data-race check skipped for " + std::to_string(unchecked[b]) +
                    " read(s) of buffer " + buffer_ref(p, static_cast<int32_t>(b)) + ": its " +
                    std::to_string(use.writers.row_size(b)) +
                    " writers are too many to order one by one against each read (neither "
                    "disjoint tiles under one counter nor totally ordered: see any "
                    "write-after-write error)");
  for (const WawCheck& w : waws) {
    if (w.culprits.first < 0) continue;
    const std::string reason =
        w.one_counter ? "share a counter but their tiles OVERLAP; "
                      : "do not share one counter (disjoint tiles prove nothing then) and ";
    in.diag.error("multi-writer WAW race on buffer " + buffer_ref(p, w.buffer) + ": writers " +
                  task_ref(p, w.culprits.first) + " and " + task_ref(p, w.culprits.second) + " " +
                  reason + "neither is ordered happens-before the other, write-after-write RACE");
  }
}

}  // namespace amk::detail
