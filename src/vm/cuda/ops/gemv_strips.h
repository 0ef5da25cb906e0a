// How the GEMV consumers cut a ring chunk into strips (ops/gemv.cuh), as plain C++ that the
// device code and the host's timing simulator (src/search/sim_program.cpp) both read.
#pragma once

namespace amk::cuda {

// Strips of 32 16-byte vectors (one per lane) in a weight row of `row_bytes` bytes: the last one
// may be partial. The loader reserves one dot-product partial per (row, strip).
constexpr long long gemv_strips_per_row(long long row_bytes) { return (row_bytes / 16 + 31) / 32; }

// Warp w's strips of a chunk with S 32-vector strips per row and W consumer warps have segments
// (w + i W) mod S, which repeat with period P = S / gcd(S, W): the smallest p with S | p W. P <= 4:
// the x slices a lane meets stay in its registers (the fast path); otherwise 0: x is read from
// shared memory per strip. `mod(a, b)` is a % b (the device passes a division-free one).
template <typename Mod>
constexpr int gemv_strip_period_with(int S, int n_warps, Mod mod) {
  if (S < 1 || n_warps < 1) return 0;
  for (int p = 1; p <= 4; ++p)
    if (mod(p * n_warps, S) == 0) return p;
  return 0;
}
constexpr int gemv_strip_period(int S, int n_warps) {
  return gemv_strip_period_with(S, n_warps, [](int a, int b) { return a % b; });
}

}  // namespace amk::cuda
