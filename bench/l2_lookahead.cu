// Does a weight prefetch into L2 survive until the ring's copy? (bench/RESULTS.md, thirteenth and
// nineteenth sessions.) The megakernel's HBM idles while the dependency chain waits: each SM's
// weight ring (~160 KiB) fills, then nothing moves until the chain releases the next level. An
// L2 lookahead would prefetch the chunks after the ring's capacity into L2 during that wait, so
// the ring's later bulk copies hit L2. The thirteenth session's try made the streaming levels
// slower and could not say why; this measures the mechanism alone, on a quiet GPU.
//
// One CTA per SM; its thread 0 plays the ring's producer over a contiguous slice of `per_sm`
// bytes (a tile's rows): 32 KiB bulk copies into 4 shared-memory stages, up to 4 in flight. Each
// trial reads a fresh region of a 2 GiB buffer (L2 holds none of it). Phase 1 (optional): the
// whole slice is prefetched into L2, by `cp.async.bulk.prefetch.L2` with or without an
// evict_last policy, in 32 or 4 KiB pieces, or by the ring's own bulk copy into a scratch stage
// (a real read) or into one small sink (a real read whose bytes are thrown away). Then the
// CTA spins `gap_us` (the chain's wait). Phase 2: the slice is streamed through the ring, with
// the megakernel's evict_first policy. Printed: phase 2's time over the GPU (first start to last
// end, globaltimer) and its bandwidth; a hit in L2 shows up as phase 2 above HBM's ceiling.
//
// Build: CMake target amk_bench_l2_lookahead (CUDA builds with AMK_BUILD_BENCH). Run it on the
// GPU machine with no arguments.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda_bench.h"
#include "vm/cuda/weight_ring.cuh"  // the kernel's own mbarrier and bulk-copy wrappers

namespace {

using namespace amk::cuda;

constexpr int kChunk = 32 * 1024, kStages = 4, kThreads = 32;
constexpr size_t kBufferBytes = size_t(2) << 30;

enum Prefetch : int {
  kNone = 0,
  kBulkPrefetch = 1,
  kBulkPrefetchEvictLast = 2,
  kReadIntoScratch = 3,
  kBulkPrefetch4K = 4,
  kReadIntoSink = 5,
};
constexpr int kSink = 4096;  // kReadIntoSink: every 32 KiB chunk lands as 8 copies in one 4 KiB area

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(src)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_prefetch_l2_hint(const void* src, uint32_t bytes,
                                                      uint64_t policy) {
  asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(
                   __cvta_generic_to_global(src)),
               "r"(bytes), "l"(policy)
               : "memory");
}
__device__ __forceinline__ uint64_t evict_last_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void wait_phase(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// Streams `bytes` from src through the stages, `inflight` copies outstanding. Thread 0 only.
__device__ void stream(const uint8_t* src, int64_t bytes, uint32_t stages, uint32_t bars,
                       uint64_t policy, int inflight, uint32_t* phases) {
  int64_t issued = 0, landed = 0;
  const int64_t n = bytes / kChunk;
  while (landed < n) {
    while (issued < n && issued - landed < inflight) {
      const int s = int(issued % kStages);
      mbar_arrive_expect_tx(bars + 8u * s, kChunk);
      bulk_copy_g2s(stages + uint32_t(s) * kChunk, src + issued * kChunk, kChunk, bars + 8u * s,
                    policy);
      ++issued;
    }
    const int s = int(landed % kStages);
    wait_phase(bars + 8u * s, phases[s]);
    phases[s] ^= 1u;
    ++landed;
  }
}

__global__ void __launch_bounds__(kThreads) lookahead(const uint8_t* region, int64_t per_sm,
                                                      int mode, int gap_ns, uint64_t* stamps) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[kStages];
  if (threadIdx.x != 0) return;
  for (int s = 0; s < kStages; ++s) mbar_init(smem_address(&bars[s]), 1u);
  mbar_init_fence();
  uint32_t phases[kStages] = {0u, 0u, 0u, 0u};
  const uint32_t stages = smem_address(smem), bar0 = smem_address(&bars[0]);
  const uint8_t* slice = region + int64_t(blockIdx.x) * per_sm;
  const uint64_t t0 = global_ns();
  if (mode == kBulkPrefetch || mode == kBulkPrefetchEvictLast) {
    const uint64_t keep = evict_last_policy();
    for (int64_t off = 0; off < per_sm; off += kChunk) {
      if (mode == kBulkPrefetch)
        bulk_prefetch_l2(slice + off, kChunk);
      else
        bulk_prefetch_l2_hint(slice + off, kChunk, keep);
    }
  } else if (mode == kReadIntoScratch) {
    stream(slice, per_sm, stages, bar0, 0ull, kStages, phases);  // no hint: normal priority
  } else if (mode == kBulkPrefetch4K) {
    for (int64_t off = 0; off < per_sm; off += kSink) bulk_prefetch_l2(slice + off, kSink);
  } else if (mode == kReadIntoSink) {
    // One chunk in flight at a time (the lookahead's bound), each as 8 copies into the same
    // 4 KiB: the bytes are thrown away, only their trip through L2 matters.
    const uint32_t bar = bar0, sink = stages + uint32_t(kStages - 1) * kChunk;
    for (int64_t off = 0; off < per_sm; off += kChunk) {
      mbar_arrive_expect_tx(bar, kChunk);
      for (int piece = 0; piece < kChunk; piece += kSink)
        bulk_copy_g2s(sink, slice + off + piece, kSink, bar, 0ull);
      wait_phase(bar, phases[0]);
      phases[0] ^= 1u;
    }
  }
  while (global_ns() - t0 < uint64_t(gap_ns)) {
  }
  const uint64_t t1 = global_ns();
  stream(slice, per_sm, stages, bar0, evict_first_policy(), kStages, phases);
  const uint64_t t2 = global_ns();
  stamps[2 * blockIdx.x] = t1;
  stamps[2 * blockIdx.x + 1] = t2;
}

// Reads 256 MiB with the default policy so the next trial starts with weights out of L2.
__global__ void flush(const uint4* p, size_t n, uint4* sink) {
  uint4 acc{0, 0, 0, 0};
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc.x ^= v.x;
  }
  if (acc.x == 0x12345678u) sink[0] = acc;
}

bool ok(cudaError_t e, const char* what) { return amk::bench::cuda_ok("l2_lookahead", e, what); }

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  uint8_t* buffer = nullptr;
  uint4* scrub = nullptr;
  uint64_t* stamps = nullptr;
  const size_t scrub_bytes = size_t(256) << 20;
  if (!ok(cudaMalloc(&buffer, kBufferBytes), "cudaMalloc") ||
      !ok(cudaMalloc(&scrub, scrub_bytes), "cudaMalloc") ||
      !ok(cudaMalloc(&stamps, sizeof(uint64_t) * 2 * sms), "cudaMalloc") ||
      !ok(cudaMemset(buffer, 1, kBufferBytes), "cudaMemset") ||
      !ok(cudaMemset(scrub, 2, scrub_bytes), "cudaMemset"))
    return 1;
  const int smem = kStages * kChunk;
  if (!ok(cudaFuncSetAttribute(lookahead, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
          "cudaFuncSetAttribute"))
    return 1;
  const char* names[] = {"none", "bulk prefetch.L2", "bulk prefetch.L2 evict_last",
                         "ring copy (a real read)", "bulk prefetch.L2 4 KiB", "4 KiB sink, 1 chunk"};
  std::printf("%-28s %8s %9s %7s %10s %9s %10s\n", "phase 1", "KiB/SM", "MiB total", "gap us",
              "phase 2 us", "GB/s", "CTA med us");
  size_t offset = 0;
  std::vector<uint64_t> host(2 * sms);
  bool good = true;
  const auto trial = [&](int mode, int64_t per_sm, int gap_us) {
    const size_t total = size_t(per_sm) * sms;
    if (offset + total > kBufferBytes) offset = 0;
    std::vector<double> spans, ctas;
    for (int rep = 0; rep < 5; ++rep) {
      flush<<<4 * sms, 256>>>(scrub, scrub_bytes / 16, scrub);
      if (offset + total > kBufferBytes) offset = 0;
      lookahead<<<sms, kThreads, smem>>>(buffer + offset, per_sm, mode, gap_us * 1000, stamps);
      offset += total;
      good = good && ok(cudaDeviceSynchronize(), "kernel") &&
             ok(cudaMemcpy(host.data(), stamps, sizeof(uint64_t) * 2 * sms, cudaMemcpyDeviceToHost),
                "cudaMemcpy");
      uint64_t first = ~0ull, last = 0;
      std::vector<double> cta;
      for (int b = 0; b < sms; ++b) {
        first = std::min(first, host[2 * b]);
        last = std::max(last, host[2 * b + 1]);
        cta.push_back(double(host[2 * b + 1] - host[2 * b]) / 1e3);
      }
      spans.push_back(double(last - first) / 1e3);
      ctas.push_back(amk::bench::median(cta));
    }
    const double us = amk::bench::median(spans);
    std::printf("%-28s %8lld %9.1f %7d %10.2f %9.0f %10.2f\n", names[mode],
                static_cast<long long>(per_sm / 1024), double(total) / (1 << 20), gap_us, us,
                double(total) / us / 1e3, amk::bench::median(ctas));
  };
  for (int64_t kib : {64, 128, 192, 256, 320})
    for (int mode : {kNone, kBulkPrefetch, kBulkPrefetchEvictLast, kReadIntoScratch,
                     kBulkPrefetch4K, kReadIntoSink})
      trial(mode, kib * 1024, 30);
  for (int gap : {2, 5, 10, 15, 20}) trial(kReadIntoSink, 256 * 1024, gap);
  return good ? 0 : 1;
}
