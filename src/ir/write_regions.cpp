// Tile footprints and a sweep-line disjointness test (1,000 tiles must not cost 500k pairs).
#include "ir/write_regions.h"

#include <algorithm>
#include <limits>
#include <map>
#include <queue>

#include "amk/kv_window.h"
#include "amk/op_flags.h"
#include "amk/op_traits.h"

namespace amk::detail {

namespace {

constexpr int64_t kMin = kRegionMin;
constexpr int64_t kMax = kRegionMax;

// A non-negative integer param, or nullopt (absent, real, non-numeric or negative).
std::optional<int64_t> offset_param(const Params& p, std::string_view key) {
  const ParamValue* v = p.find(key);
  if (!v || v->kind != ParamValue::Kind::Int || v->i < 0) return std::nullopt;
  return v->i;
}

std::optional<int64_t> extent_param(const Params& p, std::string_view key) {
  const ParamValue* v = p.find(key);
  if (!v || v->kind != ParamValue::Kind::Int || v->i <= 0) return std::nullopt;
  return v->i;
}

int64_t end_of(int64_t off, int64_t len) {
  int64_t r = 0;
  return __builtin_add_overflow(off, len, &r) ? kMax : r;
}

// Heads [n_off, n_off + N_tile) of a one-row output of heads: the elements [n_off * head_dim,
// (n_off + N_tile) * head_dim); the whole buffer when a param is missing or a product overflows.
WriteRegion head_slice(const Params& p) {
  WriteRegion r;
  const auto n_off = offset_param(p, "n_off");
  const auto n_tile = extent_param(p, "N_tile");
  const auto head_dim = extent_param(p, "head_dim");
  int64_t lo = 0, len = 0;
  if (!n_off || !n_tile || !head_dim || __builtin_mul_overflow(*n_off, *head_dim, &lo) ||
      __builtin_mul_overflow(*n_tile, *head_dim, &len))
    return r;
  r.whole = false;
  r.col_lo = lo;
  r.col_hi = end_of(lo, len);
  r.row_lo = kMin;
  r.row_hi = kMax;
  return r;
}

// The flattened elements [lo, hi) of `b` as a region of its rows x columns, the columns its
// last dimension as the race check's coverage counts them: whole rows (a stack of partials
// [S * n_heads, head_dim + 2], or [S, n_heads, head_dim + 2]), a run of columns of a one-row
// buffer or of one row; else (a run across rows that does not start and end on row bounds) the
// whole buffer.
WriteRegion element_range(const Buffer& b, int64_t lo, int64_t hi) {
  WriteRegion r;
  const int64_t numel = b.numel();
  const int64_t cols = b.shape.empty() ? numel : b.shape.back();
  if (cols <= 0 || numel <= 0 || lo < 0 || hi <= lo || hi > numel) return r;
  r.whole = false;
  if (cols == numel) {  // one row
    r.row_lo = kMin;
    r.row_hi = kMax;
    r.col_lo = lo;
    r.col_hi = hi;
  } else if (lo % cols == 0 && hi % cols == 0) {
    r.row_lo = lo / cols;
    r.row_hi = hi / cols;
    r.col_lo = kMin;
    r.col_hi = kMax;
  } else if (lo / cols == (hi - 1) / cols) {
    r.row_lo = lo / cols;
    r.row_hi = r.row_lo + 1;
    r.col_lo = lo % cols;
    r.col_hi = (hi - 1) % cols + 1;
  } else {
    r.whole = true;
  }
  return r;
}

}  // namespace

WriteRegion write_region(const Program& program, const Task& task, int64_t buffer) {
  WriteRegion r;
  if (task.op == Op::KV_APPEND) {
    // A static append writes the cache rows [pos, pos + n), n = numel(new) / the cache's row
    // (n_kv_heads x head_dim); a runtime position (flags bit 0) is unknown here: the whole
    // cache.
    const auto pos = offset_param(task.params, "pos");
    const ParamValue* flags = task.params.find("flags");
    if (!pos || (flags && (flags->kind != ParamValue::Kind::Int || (flags->i & 1) != 0))) return r;
    if (task.inputs.size() < 2) return r;
    const int64_t in0 = task.inputs[0], in1 = task.inputs[1];
    const auto nb = static_cast<int64_t>(program.buffers.size());
    if (in0 < 0 || in0 >= nb || in1 < 0 || in1 >= nb) return r;
    const Buffer& cache = program.buffers[static_cast<size_t>(in1)];
    if (cache.shape.size() != 3) return r;
    int64_t row = 1;
    for (const size_t i : {size_t(0), size_t(2)})
      if (cache.shape[i] <= 0 || __builtin_mul_overflow(row, cache.shape[i], &row)) return r;
    const int64_t numel = program.buffers[static_cast<size_t>(in0)].numel();
    if (numel <= 0 || numel == kMax || numel % row != 0) return r;
    r.whole = false;
    r.row_lo = *pos;
    r.row_hi = end_of(*pos, numel / row);
    r.col_lo = kMin;
    r.col_hi = kMax;
    return r;
  }
  // Every tile op writes columns [n_off, n_off + N_tile) of its output (the fused GEMV tiles,
  // the GLU tiles among them, included), so sibling tiles of one buffer are checked for overlap
  // rather than refused.
  if (task.op == Op::SAMPLE_ARGMAX) {
    // A partial argmax writes row m_off of its [P, 2] pairs buffer (docs/OPCODES.md).
    const auto m_off = offset_param(task.params, "m_off");
    if (!m_off || !task.params.find("N_tile")) return r;
    r.whole = false;
    r.row_lo = *m_off;
    r.row_hi = end_of(*m_off, 1);
    r.col_lo = kMin;
    r.col_hi = kMax;
    return r;
  }
  if (task.op == Op::ATTENTION_COMBINE) {
    // A head-ranged combine writes heads [n_off, n_off + N_tile) of its one-row output
    // (docs/OPCODES.md).
    return head_slice(task.params);
  }
  const bool attention_tile =
      task.op == Op::ATTENTION_TILE || task.op == Op::ROPE_KV_ATTENTION_TILE;
  if (attention_tile && !task.outputs.empty() && buffer == task.outputs[0]) {
    // Its attention output (a block's partial, a head range's heads, or the whole attention row)
    // is written whole, unless a head range's full result goes to its slice of a row of every
    // head: the elements [n_off * head_dim, (n_off + N_tile) * head_dim) (docs/OPCODES.md).
    const auto n_tile = extent_param(task.params, "N_tile");
    const auto head_dim = extent_param(task.params, "head_dim");
    const auto n_heads = extent_param(task.params, "n_heads");
    const ParamValue* flags = task.params.find("flags");
    const bool partial = flags && flags->kind == ParamValue::Kind::Int &&
                         (flags->i & attention_flags::kPartial) != 0;
    const auto nb = static_cast<int64_t>(program.buffers.size());
    // A partial into a stack of partials of every head, [S * n_heads, head_dim + 2]: its heads'
    // rows [m_off * n_heads + first, ... + count) of it, first / count its head range (n_off,
    // N_tile) or 0 / n_heads without one, absent m_off slab 0 (docs/OPCODES.md).
    const bool has_range = task.params.find("n_off") || task.params.find("N_tile");
    const auto n_off = has_range ? offset_param(task.params, "n_off") : std::optional<int64_t>(0);
    const auto count = has_range ? n_tile : n_heads;
    const std::optional<int64_t> m_off =
        task.params.find("m_off") ? offset_param(task.params, "m_off") : std::optional<int64_t>(0);
    if (count && head_dim && n_heads && n_off && m_off && buffer >= 0 && buffer < nb &&
        attention_flags::writes_partial_stack(
            partial, *count, *n_heads, *head_dim,
            program.buffers[static_cast<size_t>(buffer)].numel())) {
      int64_t first = 0, width = 0, lo = 0, hi = 0;
      if (__builtin_mul_overflow(*m_off, *n_heads, &first) ||
          __builtin_add_overflow(first, *n_off, &first) ||
          __builtin_add_overflow(*head_dim, 2, &width) ||
          __builtin_mul_overflow(first, width, &lo) ||
          __builtin_add_overflow(first, *count, &hi) || __builtin_mul_overflow(hi, width, &hi))
        return r;
      return element_range(program.buffers[static_cast<size_t>(buffer)], lo, hi);
    }
    if (!n_tile || !head_dim || !n_heads || buffer < 0 || buffer >= nb ||
        !attention_flags::writes_head_slice(partial, *n_tile, *n_heads, *head_dim,
                                            program.buffers[static_cast<size_t>(buffer)].numel()))
      return r;
    return head_slice(task.params);
  }
  if (task.op == Op::ROPE_KV_ATTENTION_TILE) {
    // The fused attention writes (besides its own partial) the new row of its KV heads, and
    // only inside its window: rows [kv_start, kv_start + kv_len) (the step's position is one of
    // them or none), columns [kv0 * head_dim, (kv0 + kvc) * head_dim) of the flattened
    // [n_kv_heads * head_dim] row, kv0 / kvc its head range's KV heads (docs/OPCODES.md).
    const auto kv_start = offset_param(task.params, "kv_start");
    const auto kv_len = extent_param(task.params, "kv_len");
    const auto head_dim = extent_param(task.params, "head_dim");
    const auto n_heads = extent_param(task.params, "n_heads");
    const auto n_kv = extent_param(task.params, "n_kv_heads");
    if (!kv_start || !kv_len || !head_dim || !n_heads || !n_kv || *n_heads % *n_kv != 0) return r;
    const int64_t rep = *n_heads / *n_kv;
    int64_t first = 0, count = *n_heads;
    if (task.params.find("n_off") || task.params.find("N_tile")) {
      const auto n_off = offset_param(task.params, "n_off");
      const auto n_tile = extent_param(task.params, "N_tile");
      if (!n_off || !n_tile) return r;
      first = *n_off;
      count = *n_tile;
    }
    int64_t lo = 0, len = 0;
    if (__builtin_mul_overflow(first / rep, *head_dim, &lo) ||
        __builtin_mul_overflow(count / rep, *head_dim, &len))
      return r;
    // A strided window (param kv_stride > 0): its runs while whole runs fit the cache's rows.
    int64_t runs = 1, stride = 0;
    if (task.params.find("kv_stride")) {
      const auto s = offset_param(task.params, "kv_stride");
      if (!s) return r;
      if (*s > 0) {
        if (*s < *kv_len || buffer < 0 || buffer >= static_cast<int64_t>(program.buffers.size()))
          return r;
        const Buffer& cache = program.buffers[static_cast<size_t>(buffer)];
        if (cache.shape.size() != 3 || *kv_start > cache.shape[1] - *kv_len) return r;
        stride = *s;
        runs = KvWindow{*kv_start, *kv_len, stride, cache.shape[1]}.runs();
      }
    }
    r.whole = false;
    r.row_lo = *kv_start;
    r.row_hi = end_of(*kv_start, *kv_len);
    r.col_lo = lo;
    r.col_hi = end_of(lo, len);
    r.row_stride = stride;
    r.row_runs = runs;
    return r;
  }
  // A ranged shard sum writes its elements [n_off, n_off + N_tile) (IR 0.12.0).
  if (task.op == Op::ALLREDUCE_SHARD) {
    if (!task.params.find("n_off") && !task.params.find("N_tile")) return r;
    const auto n_off = offset_param(task.params, "n_off");
    const auto n_tile = extent_param(task.params, "N_tile");
    if (!n_off || !n_tile || buffer < 0 || buffer >= static_cast<int64_t>(program.buffers.size()))
      return r;
    return element_range(program.buffers[static_cast<size_t>(buffer)], *n_off,
                         end_of(*n_off, *n_tile));
  }
  // An accumulating MLP tile adds into all of its output (the validator's accumulation rule).
  if (is_glu_down(task.op)) return r;
  if (!is_gemv_family(task.op) && task.op != Op::GEMM_TILE) return r;
  const auto n_off = offset_param(task.params, "n_off");
  const auto n_tile = extent_param(task.params, "N_tile");
  if (!n_off || !n_tile) return r;
  r.whole = false;
  r.col_lo = *n_off;
  r.col_hi = end_of(*n_off, *n_tile);
  r.row_lo = kMin;
  r.row_hi = kMax;
  if (task.op == Op::GEMM_TILE) {
    const auto m_off = offset_param(task.params, "m_off");
    const auto m_tile = extent_param(task.params, "M_tile");
    if (m_off && m_tile) {
      r.row_lo = *m_off;
      r.row_hi = end_of(*m_off, *m_tile);
    }
  }
  return r;
}

// COMBINE_GEMV_ADD_TILE merging heads [m_off, m_off + count) reads those rows of every slab of a
// [S * n_heads, head_dim + 2] stack: rows m_off.. + count, every n_heads rows, S times.
WriteRegion combine_read_region(const Program& program, const Task& task, int64_t buffer) {
  WriteRegion whole;
  if (task.inputs.empty() || task.inputs[0] != buffer || !task.params.find("m_off")) return whole;
  for (size_t i = 1; i < task.inputs.size(); ++i)
    if (task.inputs[i] == buffer) return whole;  // read as something else too
  const auto first = offset_param(task.params, "m_off");
  const auto head_dim = extent_param(task.params, "head_dim");
  const auto n_heads = extent_param(task.params, "n_heads");
  const auto K = extent_param(task.params, "K");
  if (!first || !head_dim || !n_heads || !K || *K % *head_dim != 0) return whole;
  const int64_t count = *K / *head_dim;
  const Buffer& b = program.buffers[static_cast<size_t>(buffer)];
  if (count < 1 || *first > *n_heads - count || b.shape.size() != 2 ||
      b.shape[1] != *head_dim + 2 || b.shape[0] < *n_heads || b.shape[0] % *n_heads != 0)
    return whole;
  WriteRegion r;
  r.whole = false;
  r.row_lo = *first;
  r.row_hi = *first + count;
  r.col_lo = kMin;
  r.col_hi = kMax;
  r.row_stride = *n_heads;
  r.row_runs = b.shape[0] / *n_heads;
  return r;
}

WriteRegion read_region(const Program& program, const Task& task, int64_t buffer) {
  WriteRegion whole;
  const int64_t nb = static_cast<int64_t>(program.buffers.size());
  if (task.op == Op::COMBINE_GEMV_ADD_TILE && buffer >= 0 && buffer < nb)
    return combine_read_region(program, task, buffer);
  // A ranged shard sum reads the elements it writes, [n_off, n_off + N_tile), of every shard:
  // its write region, taken in the shard (but a shard it also writes, read whole).
  if (task.op == Op::ALLREDUCE_SHARD && buffer >= 0 && buffer < nb) {
    if (std::find(task.outputs.begin(), task.outputs.end(), buffer) != task.outputs.end())
      return whole;
    return write_region(program, task, buffer);
  }
  const bool attention = task.op == Op::ATTENTION_TILE || task.op == Op::ROPE_KV_ATTENTION_TILE;
  if (!attention || buffer < 0 || buffer >= nb) return whole;
  // A head range of whole GQA groups (both params, validated by param_check): its query heads
  // [first, first + count) and their KV heads [first / rep, ... + count / rep).
  if (!task.params.find("n_off") || !task.params.find("N_tile")) return whole;
  const auto first = offset_param(task.params, "n_off");
  const auto count = extent_param(task.params, "N_tile");
  const auto head_dim = extent_param(task.params, "head_dim");
  const auto n_heads = extent_param(task.params, "n_heads");
  const auto n_kv = extent_param(task.params, "n_kv_heads");
  if (!first || !count || !head_dim || !n_heads || !n_kv || *n_heads % *n_kv != 0) return whole;
  const int64_t rep = *n_heads / *n_kv;
  const Buffer& b = program.buffers[static_cast<size_t>(buffer)];
  std::optional<WriteRegion> region;
  for (size_t i = 0; i < task.inputs.size(); ++i) {
    if (task.inputs[i] != buffer) continue;
    // q (input 0) by query heads; the fused op's new k and v rows (inputs 1, 2) by KV heads.
    // Anything else the task reads (the caches, the norm weights, the table) it reads whole.
    const bool q = i == 0, kv_row = task.op == Op::ROPE_KV_ATTENTION_TILE && (i == 1 || i == 2);
    int64_t lo = 0, hi = 0;
    const int64_t heads_lo = q ? *first : *first / rep, heads_n = q ? *count : *count / rep;
    if ((!q && !kv_row) || __builtin_mul_overflow(heads_lo, *head_dim, &lo) ||
        __builtin_mul_overflow(heads_lo + heads_n, *head_dim, &hi) ||
        hi > b.numel() ||
        b.numel() != (q ? *n_heads : *n_kv) * *head_dim)
      return whole;
    const WriteRegion r = element_range(b, lo, hi);
    if (r.whole || (region && *region != r)) return whole;
    region = r;
  }
  return region.value_or(whole);
}

size_t run_count(const std::vector<WriteRegion>& regions) {
  size_t total = 0;
  for (const WriteRegion& r : regions) {
    const size_t runs = r.whole || r.row_runs < 1 ? 1 : size_t(r.row_runs);
    if (__builtin_add_overflow(total, runs, &total)) return SIZE_MAX;
  }
  return total;
}

std::optional<ExpandedRegions> expand_runs(const std::vector<WriteRegion>& regions,
                                           size_t limit) {
  const size_t total = run_count(regions);
  if (total > limit) return std::nullopt;
  ExpandedRegions e;
  e.regions.reserve(total);
  e.owner.reserve(total);
  for (size_t i = 0; i < regions.size(); ++i) {
    WriteRegion r = regions[i];
    const int64_t runs = r.whole ? 1 : std::max<int64_t>(r.row_runs, 1), stride = r.row_stride;
    r.row_stride = 0;
    r.row_runs = 1;
    for (int64_t run = 0; run < runs; ++run) {
      e.regions.push_back(r);
      e.owner.push_back(i);
      r.row_lo += stride;  // no overflow: write_region's runs lie in the cache's rows
      r.row_hi += stride;
    }
  }
  return e;
}

namespace {
std::optional<std::pair<size_t, size_t>> find_overlap_of_runs(const std::vector<WriteRegion>& regions);
}  // namespace

std::optional<std::pair<size_t, size_t>> find_overlap(const std::vector<WriteRegion>& regions) {
  if (std::none_of(regions.begin(), regions.end(),
                   [](const WriteRegion& r) { return !r.whole && r.row_runs > 1; }))
    return find_overlap_of_runs(regions);
  const std::optional<ExpandedRegions> e = expand_runs(regions);
  if (!e) return std::make_pair(size_t{0}, size_t{1});  // too many runs to prove anything
  const auto hit = find_overlap_of_runs(e->regions);
  if (!hit) return std::nullopt;
  return std::make_pair(e->owner[hit->first], e->owner[hit->second]);
}

namespace {
std::optional<std::pair<size_t, size_t>> find_overlap_of_runs(const std::vector<WriteRegion>& regions) {
  const size_t k = regions.size();
  if (k < 2) return std::nullopt;
  for (size_t i = 0; i < k; ++i)
    if (regions[i].whole) return std::make_pair(i == 0 ? size_t{1} : size_t{0}, i);

  // Sweep the column axis. The active regions all contain the sweep column, so they overlap
  // pairwise in columns and must be pairwise disjoint in rows: keep their row ranges in an
  // ordered map (disjoint, so keyed uniquely by row_lo) and test each newcomer against its two
  // neighbours there.
  std::vector<size_t> by_col(k);
  for (size_t i = 0; i < k; ++i) by_col[i] = i;
  std::sort(by_col.begin(), by_col.end(), [&](size_t a, size_t b) {
    return regions[a].col_lo != regions[b].col_lo ? regions[a].col_lo < regions[b].col_lo : a < b;
  });
  using Expiry = std::pair<int64_t, size_t>;  // (col_hi, region)
  std::priority_queue<Expiry, std::vector<Expiry>, std::greater<>> active_by_end;
  std::map<int64_t, size_t> active_rows;  // row_lo -> region
  for (size_t i : by_col) {
    const WriteRegion& r = regions[i];
    while (!active_by_end.empty() && active_by_end.top().first <= r.col_lo) {
      const size_t gone = active_by_end.top().second;
      active_by_end.pop();
      active_rows.erase(regions[gone].row_lo);
    }
    auto next = active_rows.lower_bound(r.row_lo);
    if (next != active_rows.end() && next->first < r.row_hi) return std::make_pair(next->second, i);
    if (next != active_rows.begin()) {
      const size_t prev = std::prev(next)->second;
      if (regions[prev].row_hi > r.row_lo) return std::make_pair(prev, i);
    }
    active_rows.emplace(r.row_lo, i);
    active_by_end.emplace(r.col_hi, i);
  }
  return std::nullopt;
}
}  // namespace

}  // namespace amk::detail
