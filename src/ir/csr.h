// Compressed sparse rows: the adjacency format of every index the validator builds.
//
// One flat value array plus row offsets keeps a 300k-task program's graph in a few contiguous
// allocations (no per-node vectors), which is what makes validate() fast and its memory bounded.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace amk::detail {

struct Csr {
  std::vector<int64_t> offsets{0};  // rows + 1 entries
  std::vector<int32_t> values;

  size_t rows() const { return offsets.size() - 1; }
  std::span<const int32_t> row(size_t r) const {
    return {values.data() + offsets[r], static_cast<size_t>(offsets[r + 1] - offsets[r])};
  }
  size_t row_size(size_t r) const { return static_cast<size_t>(offsets[r + 1] - offsets[r]); }

  // Counting sort of (row, value) pairs; values keep their input order within a row, so rows
  // built from task-ordered pairs are sorted by task index.
  static Csr from_pairs(size_t rows, const std::vector<std::pair<int32_t, int32_t>>& pairs) {
    Csr c;
    c.offsets.assign(rows + 1, 0);
    for (const auto& pr : pairs) ++c.offsets[static_cast<size_t>(pr.first) + 1];
    for (size_t r = 0; r < rows; ++r) c.offsets[r + 1] += c.offsets[r];
    c.values.resize(pairs.size());
    std::vector<int64_t> cursor(c.offsets.begin(), c.offsets.end() - 1);
    for (const auto& pr : pairs) c.values[static_cast<size_t>(cursor[pr.first]++)] = pr.second;
    return c;
  }
};

}  // namespace amk::detail
