// How the GEMV consumers cut a ring chunk into strips (ops/gemv.cuh), as plain C++ that the
// device code and the host's timing simulator (src/search/sim_program.cpp) both read.
#pragma once

namespace amk::cuda {

// Strips of 32 16-byte vectors (one per lane) in a weight row of `row_bytes` bytes: the last one
// may be partial. The loader reserves one dot-product partial per (row, strip).
constexpr long long gemv_strips_per_row(long long row_bytes) { return (row_bytes / 16 + 31) / 32; }

// Warp w's strips of a chunk with S 32-vector strips per row and W consumer warps have segments
// (w + i W) mod S, which repeat with period P = S / gcd(S, W). P <= 4: the x slices a lane meets
// stay in its registers (the fast path); otherwise 0: x is read from shared memory per strip.
constexpr int gemv_strip_period(int S, int n_warps) {
  int a = S, b = n_warps;
  while (b != 0) {
    const int t = a % b;
    a = b;
    b = t;
  }
  if (a <= 0) return 0;
  const int P = S / a;
  return P <= 4 ? P : 0;
}

}  // namespace amk::cuda
