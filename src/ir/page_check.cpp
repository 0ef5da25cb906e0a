// The page allocation (IR_SPEC §3.3, §4): the table must be well formed, and two buffers sharing
// a page must have ordered live ranges (every use of one happens before every write of the
// other), else a write may clobber a value still to be read. Per the spec, an unordered reuse is
// a WARNING ("possible clobber").
//
// Ordering is checked on consecutive occupants only. Sort a page's written occupants by their
// first write in topological order; if a is ordered before b then every write of a precedes
// every write of b, so any chain of ordered occupants must be this sorted order, and checking
// consecutive pairs decides "all pairs ordered" exactly (the writes of the middle occupant carry
// the order across by transitivity). An occupant nobody writes is vacuously ordered with all.
#include <algorithm>
#include <unordered_map>

#include "ir/validate_context.h"

namespace amk::detail {

namespace {

// Page id -> index in the page table; the first entry wins for a duplicated id.
std::unordered_map<int64_t, int32_t> page_index(const PageAllocation& pa) {
  std::unordered_map<int64_t, int32_t> idx;
  idx.reserve(pa.pages.size());
  for (size_t i = 0; i < pa.pages.size(); ++i) idx.emplace(pa.pages[i].id, static_cast<int32_t>(i));
  return idx;
}

// Caps the queries of one program's aliasing check (each pair costs |counters of the first
// buffer's users| x |wait sets of the second's writers|, a handful in a real schedule).
constexpr int64_t kQueryBudget = int64_t{1} << 22;

}  // namespace

void check_page_table(const Program& p, Diagnostics& diag) {
  const PageAllocation& pa = *p.pages;
  const auto idx = page_index(pa);
  for (size_t i = 0; i < pa.pages.size(); ++i) {
    const Page& pg = pa.pages[i];
    if (idx.at(pg.id) != static_cast<int32_t>(i))
      diag.error("page table lists page id " + std::to_string(pg.id) + " more than once");
    if (!enum_in_range(pg.space, kNumMemSpaces))
      diag.error("page " + std::to_string(pg.id) + " has invalid memory space code " +
                 std::to_string(static_cast<int64_t>(pg.space)));
    if (pg.nbytes < 0)
      diag.error("page " + std::to_string(pg.id) + " has negative size " +
                 std::to_string(pg.nbytes));
  }
  const int64_t nb = static_cast<int64_t>(p.buffers.size());
  std::unordered_map<int64_t, int64_t> seen;  // buffer -> first page it was mapped to
  seen.reserve(pa.buffer_to_page.size());
  for (const auto& [bid, pid] : pa.buffer_to_page) {
    if (bid < 0 || bid >= nb) {
      diag.error("page table maps missing buffer " + std::to_string(bid) + " to page " +
                 std::to_string(pid));
      continue;
    }
    const auto b = static_cast<int32_t>(bid);
    const Buffer& buf = p.buffers[static_cast<size_t>(b)];
    const auto [it, fresh] = seen.emplace(bid, pid);
    if (!fresh) {
      diag.error("page table maps buffer " + buffer_ref(p, b) + " more than once (pages " +
                 std::to_string(it->second) + " and " + std::to_string(pid) + ")");
      continue;
    }
    const auto page = idx.find(pid);
    if (page == idx.end()) {
      diag.error("page table maps buffer " + buffer_ref(p, b) + " to missing page " +
                 std::to_string(pid));
      continue;
    }
    if (buf.kind != BufferKind::ACTIVATION)
      diag.warn("buffer " + buffer_ref(p, b) + " of kind " + std::string(name_of(buf.kind)) +
                " is bound to page " + std::to_string(pid) +
                " (only transient ACTIVATION buffers should be paged)");
    const Page& pg = pa.pages[static_cast<size_t>(page->second)];
    if (pg.nbytes < buf.nbytes())
      diag.error("page " + std::to_string(pid) + " (" + std::to_string(pg.nbytes) +
                 " bytes) is smaller than buffer " + buffer_ref(p, b) + " (" +
                 std::to_string(buf.nbytes()) + " bytes) mapped to it");
  }
}

void check_page_aliasing(const CheckInputs& in) {
  const Program& p = in.program;
  const PageAllocation& pa = *p.pages;
  const BufferUse& use = in.use;
  const DependencyGraph& g = in.graph;
  HappensBefore& hb = in.hb;
  hb.clear();

  // (page index, buffer) for every valid, first mapping of a written buffer.
  const auto idx = page_index(pa);
  const int64_t nb = static_cast<int64_t>(p.buffers.size());
  std::vector<std::pair<int32_t, int32_t>> occ;
  std::vector<uint8_t> mapped(p.buffers.size(), 0);
  for (const auto& [bid, pid] : pa.buffer_to_page) {
    if (bid < 0 || bid >= nb || mapped[static_cast<size_t>(bid)]) continue;
    mapped[static_cast<size_t>(bid)] = 1;
    const auto page = idx.find(pid);
    if (page == idx.end() || use.writers.row_size(static_cast<size_t>(bid)) == 0) continue;
    occ.emplace_back(page->second, static_cast<int32_t>(bid));
  }
  std::vector<int32_t> first_write(p.buffers.size(), 0);
  for (const auto& [pg, b] : occ) {
    int32_t m = INT32_MAX;
    for (int32_t w : use.writers.row(static_cast<size_t>(b))) m = std::min(m, hb.position(w));
    first_write[static_cast<size_t>(b)] = m;
  }
  std::sort(occ.begin(), occ.end(), [&](const auto& x, const auto& y) {
    if (x.first != y.first) return x.first < y.first;
    const int32_t fx = first_write[static_cast<size_t>(x.second)],
                  fy = first_write[static_cast<size_t>(y.second)];
    return fx != fy ? fx < fy : x.second < y.second;
  });

  struct Query {
    int32_t counter;  // out_counter of some user of the earlier buffer (-1: none, fails)
    int32_t rep;      // representative of some writer of the later buffer
    HappensBefore::Ticket ticket;
  };
  struct PairCheck {
    int32_t page, a, b;
    size_t q_begin, q_end;
  };
  std::vector<Query> queries;
  std::vector<PairCheck> pairs;
  std::vector<int32_t> counters, reps;
  int64_t budget = kQueryBudget, skipped = 0;
  for (size_t i = 0; i + 1 < occ.size(); ++i) {
    if (occ[i].first != occ[i + 1].first) continue;
    const int32_t a = occ[i].second, b = occ[i + 1].second;
    counters.clear();
    for (const Csr* users : {&use.readers, &use.writers})
      for (int32_t u : users->row(static_cast<size_t>(a)))
        counters.push_back(g.out_counter[static_cast<size_t>(u)]);
    std::sort(counters.begin(), counters.end());
    counters.erase(std::unique(counters.begin(), counters.end()), counters.end());
    reps.clear();
    for (int32_t w : use.writers.row(static_cast<size_t>(b))) reps.push_back(hb.representative(w));
    std::sort(reps.begin(), reps.end());
    reps.erase(std::unique(reps.begin(), reps.end()), reps.end());
    // Bounded work per program: the pair needs |counters| x |reps| queries.
    const auto cost = static_cast<int64_t>(counters.size()) * static_cast<int64_t>(reps.size());
    if (cost > budget) {
      ++skipped;
      continue;
    }
    budget -= cost;
    PairCheck pc{occ[i].first, a, b, queries.size(), 0};
    for (int32_t c : counters)
      for (int32_t r : reps)
        queries.push_back({c, r, c < 0 ? HappensBefore::Ticket{-2} : hb.ask(c, r)});
    pc.q_end = queries.size();
    pairs.push_back(pc);
  }

  hb.solve();
  if (skipped > 0)
    in.diag.warn("page aliasing check skipped for " + std::to_string(skipped) +
                 " pair(s) of buffers sharing a page: their uses are too many to order one by one");

  for (const PairCheck& pc : pairs) {
    const Query* bad = nullptr;
    for (size_t i = pc.q_begin; i < pc.q_end && !bad; ++i)
      if (queries[i].counter < 0 || !hb.answer(queries[i].ticket)) bad = &queries[i];
    if (!bad) continue;
    // Name one concrete unordered pair of tasks for the witness.
    int32_t user = -1, writer = -1;
    for (const Csr* users : {&use.readers, &use.writers})
      for (int32_t u : users->row(static_cast<size_t>(pc.a)))
        if (user < 0 && g.out_counter[static_cast<size_t>(u)] == bad->counter) user = u;
    for (int32_t w : use.writers.row(static_cast<size_t>(pc.b)))
      if (writer < 0 && hb.representative(w) == bad->rep) writer = w;
    in.diag.warn("page " + std::to_string(pa.pages[static_cast<size_t>(pc.page)].id) +
                 " reused by buffers " + buffer_ref(p, pc.a) + " and " + buffer_ref(p, pc.b) +
                 " whose live ranges are NOT ordered (task " + task_ref(p, user) +
                 " uses the first" + " but is not ordered before task " + task_ref(p, writer) +
                 " writing the second), possible clobber");
  }
}

}  // namespace amk::detail
