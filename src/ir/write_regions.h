// The part of its output buffer a task writes, and an O(k log k) test that k such parts are
// pairwise disjoint (the proof that tiles under one shared counter cannot race).
//
// GEMV_TILE, its fused variants (is_gemv_family: the GLU tiles too) and GEMM_TILE write the
// columns [n_off, n_off + N_tile); GEMM_TILE also the rows
// [m_off, m_off + M_tile) when both are given. A GEMV tile covers every row. A head-ranged
// ATTENTION_COMBINE writes the columns [n_off * head_dim, (n_off + N_tile) * head_dim) of its
// one-row output; a partial attention tile into a stack of partials [S * n_heads, head_dim + 2]
// the rows [m_off * n_heads + n_off, ... + N_tile) (0, n_heads without a head range), i.e. those
// rows' elements in the buffer's own rows of its last dimension; a partial SAMPLE_ARGMAX the row m_off of its pairs; ROPE_KV_ATTENTION_TILE
// its attention output whole and, of its KV caches, the rows of its window [kv_start, kv_start + kv_len) (with kv_stride, every run
// of it: a strided region) and the columns of its
// KV heads [kv0 * head_dim, (kv0 + kvc) * head_dim); KV_APPEND with a static position (flags
// bit 0 clear) the cache rows [pos, pos + n), n the rows of its input (numel / the cache's row
// size; with bit 0 the row is the step's, unknown here, so the whole cache). Any other op, or a
// tile whose params are absent or malformed, writes the whole buffer and overlaps everything.
// A KV cache's regions are in its logical [position][KV head x head_dim] view, whatever its
// storage order ([n_kv_heads, max_seq, head_dim]): disjointness is the same in either.
// A ranged ALLREDUCE_SHARD (n_off, N_tile) its elements [n_off, n_off + N_tile).
// RMSNORM_GEMV_GLU_DOWN_TILE adds into all of its output (an accumulator): whole, and the race
// check leaves such adds to the accumulation rule (validate_context.h check_accumulations).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "amk/ir.h"

namespace amk::detail {

// The bounds of "every row" / "every column" in a region.
inline constexpr int64_t kRegionMin = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kRegionMax = std::numeric_limits<int64_t>::max();

struct WriteRegion {
  bool whole = true;
  int64_t row_lo = 0, row_hi = 0;  // half-open; all rows = [INT64_MIN, INT64_MAX)
  int64_t col_lo = 0, col_hi = 0;  // half-open
  // A strided attention window's KV rows (amk/kv_window.h): the rows above repeat every
  // row_stride rows, row_runs times in all (row_stride >= row_hi - row_lo: the runs are disjoint).
  int64_t row_stride = 0, row_runs = 1;
  bool operator==(const WriteRegion&) const = default;
};

// `regions` with each strided region replaced by its runs, and for each entry the index of the
// region it came from. nullopt when the runs would pass `limit` entries (the caller then treats
// the writes as overlapping: a proof it cannot afford is no proof). The default, 2^18 runs
// (~15 MB), holds a 131,072-token context's strided blocks (16 x 8 tasks of 128 runs of 64 keys)
// and keeps a hostile cache of 2^30 one-key runs from costing memory.
struct ExpandedRegions {
  std::vector<WriteRegion> regions;
  std::vector<size_t> owner;
};
inline constexpr size_t kMaxExpandedRuns = size_t(1) << 18;
// The entries expand_runs would make (a whole or unstrided region is one), without making them;
// saturates at SIZE_MAX.
size_t run_count(const std::vector<WriteRegion>& regions);
std::optional<ExpandedRegions> expand_runs(const std::vector<WriteRegion>& regions,
                                           size_t limit = kMaxExpandedRuns);

// The part of the buffer with id `buffer` (one of the task's outputs) that `task` writes. `program` gives the
// buffers' shapes (KV_APPEND's row count). A task with several outputs may write them
// differently: ROPE_KV_ATTENTION_TILE writes its attention output (output 0) whole and only its
// window's rows of the KV caches.
WriteRegion write_region(const Program& program, const Task& task, int64_t buffer);

// The part of the buffer with id `buffer` (one of its inputs) that `task` reads: whole, but for
// an attention task with a head range (ATTENTION_TILE, ROPE_KV_ATTENTION_TILE), which reads its
// query heads' columns of q and (the fused op) its KV heads' of the new k and v rows, and a
// COMBINE_GEMV_ADD_TILE merging heads from m_off, which reads those heads' rows of every slab of
// its [S * n_heads, head_dim + 2] stack, and a ranged ALLREDUCE_SHARD, which reads its elements
// [n_off, n_off + N_tile) of every shard. The race check then orders the read against the
// writers of that part only (race_check.cpp).
WriteRegion read_region(const Program& program, const Task& task, int64_t buffer);

// Two regions overlap iff their row ranges AND their column ranges intersect (a strided region:
// any of its runs). Returns the indices of one overlapping pair, or nullopt when all regions are
// pairwise disjoint.
std::optional<std::pair<size_t, size_t>> find_overlap(const std::vector<WriteRegion>& regions);

}  // namespace amk::detail
