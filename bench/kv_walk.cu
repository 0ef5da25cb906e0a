// The attention's K/V walk at a 4,096-token context, alone on the GPU (bench/RESULTS.md, eleventh
// session): llama-3.2-1b's cache shape (8 KV heads, head_dim 64, F32), one CTA per (KV head, key
// block) as the derived default splits it, each walking its keys 64 at a time the way
// attention_block stages them (cp.async, 16 bytes a thread, into 32 KiB of shared memory; then a
// barrier and a little compute), with one staging buffer or two (the next block in flight).
// Two cache layouts: [T][G][D] (the lowering's before IR 0.8.0: one head's row is 256 B every
// 2 KiB) and [G][T][D] (the lowering's since: each head's history contiguous). 16 layers' caches rotate, so L2 holds none of them.
//
// Build: CMake target amk_bench_kv_walk (CUDA builds with AMK_BUILD_BENCH). Run it on the GPU
// machine with no arguments; it prints µs per layer, GB/s and µs per 64-key block.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "cuda_bench.h"
#include "vm/cuda/primitives.cuh"  // the kernel's own cp.async wrappers

namespace {

constexpr int kKeys = 4096, kKvHeads = 8, kHeadDim = 64, kBlockKeys = 64, kThreads = 256;
constexpr int kLayers = 16, kReps = 10;

using amk::cuda::cp_async16;
using amk::cuda::cp_async_commit;
using amk::cuda::cp_async_wait_all;
using amk::cuda::smem_address;

// The second buffer's wait (attention_block has only one buffer, so primitives.cuh has no such
// wrapper): every cp.async group but the most recent one.
__device__ __forceinline__ void cp_async_wait_prior() {
  asm volatile("cp.async.wait_group 1;" ::: "memory");
}

// Row j of KV head g.
template <bool kHeadContiguous>
__device__ __forceinline__ const float* cache_row(const float* base, int g, int j) {
  return kHeadContiguous ? base + (int64_t(g) * kKeys + j) * kHeadDim
                         : base + (int64_t(j) * kKvHeads + g) * kHeadDim;
}

template <bool kHeadContiguous, int kBuffers>
__global__ void __launch_bounds__(kThreads) kv_walk(const float* k, const float* v, float* sink) {
  extern __shared__ float smem[];
  constexpr int kBufferFloats = 2 * kBlockKeys * kHeadDim;  // K then V of one block
  const int g = int(blockIdx.x) % kKvHeads;
  const int keys = kKeys / (int(gridDim.x) / kKvHeads);
  const int begin = int(blockIdx.x) / kKvHeads * keys;
  const auto stage = [&](int j0, int buffer) {
    float* ks = smem + buffer * kBufferFloats;
    float* vs = ks + kBlockKeys * kHeadDim;
    for (int i = int(threadIdx.x); i < kBlockKeys * kHeadDim / 4; i += kThreads) {
      const int j = i / (kHeadDim / 4), d4 = i % (kHeadDim / 4);
      cp_async16(smem_address(ks + 4 * i), cache_row<kHeadContiguous>(k, g, j0 + j) + 4 * d4);
      cp_async16(smem_address(vs + 4 * i), cache_row<kHeadContiguous>(v, g, j0 + j) + 4 * d4);
    }
    cp_async_commit();
  };
  float acc = 0.0f;
  if (kBuffers == 2) stage(begin, 0);
  for (int j0 = begin, buffer = 0; j0 < begin + keys; j0 += kBlockKeys, buffer ^= kBuffers - 1) {
    if (kBuffers == 1) {
      stage(j0, 0);
      cp_async_wait_all();
    } else if (j0 + kBlockKeys < begin + keys) {
      stage(j0 + kBlockKeys, buffer ^ 1);
      cp_async_wait_prior();
    } else {
      cp_async_wait_all();
    }
    __syncthreads();
    const float* block = smem + buffer * kBufferFloats;
    for (int i = int(threadIdx.x); i < kBufferFloats; i += kThreads) acc += block[i];
    __syncthreads();
  }
  if (acc == 12345.0f) sink[blockIdx.x] = acc;  // never true (zeroed caches): keeps the loads
}

bool ok(cudaError_t e, const char* what) { return amk::bench::cuda_ok("kv_walk", e, what); }

}  // namespace

int main() {
  const size_t cache_floats = size_t(kKeys) * kKvHeads * kHeadDim;
  float *k = nullptr, *v = nullptr, *sink = nullptr;
  if (!ok(cudaMalloc(&k, cache_floats * 4 * kLayers), "cudaMalloc") ||
      !ok(cudaMalloc(&v, cache_floats * 4 * kLayers), "cudaMalloc") ||
      !ok(cudaMalloc(&sink, 4096 * 4), "cudaMalloc") ||
      !ok(cudaMemset(k, 0, cache_floats * 4 * kLayers), "cudaMemset") ||
      !ok(cudaMemset(v, 0, cache_floats * 4 * kLayers), "cudaMemset"))
    return 1;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::printf("%-36s %5s %12s %9s %16s\n", "layout, staging buffers", "CTAs", "us / layer", "GB/s",
              "us / 64-key block");
  bool good = true;
  const auto run = [&](const char* name, auto kernel, int buffers, int ctas) {
    const int smem = buffers * 2 * kBlockKeys * kHeadDim * 4;
    good = good && ok(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                      "cudaFuncSetAttribute");
    const auto launch_all = [&] {
      for (int l = 0; l < kLayers; ++l)
        kernel<<<ctas, kThreads, smem>>>(k + l * cache_floats, v + l * cache_floats, sink);
    };
    launch_all();  // warm-up
    cudaEventRecord(start);
    for (int r = 0; r < kReps; ++r) launch_all();
    cudaEventRecord(stop);
    good = good && ok(cudaEventSynchronize(stop), "kernel");
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    const double us = ms * 1000.0 / (kReps * kLayers);
    const double blocks = double(kKeys) / (ctas / kKvHeads) / kBlockKeys;
    std::printf("%-36s %5d %12.2f %9.1f %16.2f\n", name, ctas, us, 2.0 * cache_floats * 4 / us / 1e3,
                us / blocks);
  };
  for (int ctas : {64, 128}) {
    run("[T][G][D], 1", kv_walk<false, 1>, 1, ctas);
    run("[T][G][D], 2", kv_walk<false, 2>, 2, ctas);
    run("[G][T][D], 1", kv_walk<true, 1>, 1, ctas);
    run("[G][T][D], 2", kv_walk<true, 2>, 2, ctas);
  }
  return good ? 0 : 1;
}
