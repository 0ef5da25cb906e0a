// Host helpers the CUDA micro-benchmarks share (bench/kv_walk.cu, l2_lookahead.cu,
// hop_protocol.cu, cluster_stream.cu, tp_layer.cu): a checked CUDA call, the median of repeated
// measurements, a clustered launch.
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

// A launch of `grid` CTAs of `threads` in clusters of `cluster` CTAs (1: none) with `smem` bytes
// of dynamic shared memory; the cluster attribute lives in `attr`, which must outlive it.
inline cudaLaunchConfig_t cluster_launch(cudaLaunchAttribute& attr, unsigned cluster, unsigned grid,
                                         unsigned threads, size_t smem) {
  attr = cudaLaunchAttribute{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster;
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.gridDim = dim3(grid);
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cfg;
}

}  // namespace amk::bench
