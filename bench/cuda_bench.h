// Host helpers the CUDA micro-benchmarks share (bench/kv_walk.cu, l2_lookahead.cu,
// hop_protocol.cu): a checked CUDA call and the median of repeated measurements.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace amk::bench {

// True when `e` is cudaSuccess; otherwise names the tool, the call and CUDA's message on stderr.
inline bool cuda_ok(const char* tool, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s: %s\n", tool, what, cudaGetErrorString(e));
  return false;
}

// The median of `v` (the upper middle of an even count); sorts `v`.
inline double median(std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace amk::bench
