// What a gpu-scope release waits for (issue 9: the release is most of a loaded hop). The
// twenty-second session found a task's `red.release.gpu` costs more the more weight bytes its SM
// has in flight (bench/hop_protocol.cu), far more than its own stores' round trip: the fence seems
// to wait for the SM's bulk copies too. This asks which copies: those the SM issued, those landing
// in its shared memory, or any load traffic at all.
//
// Every SM runs one CTA, in clusters of two (rank 0, rank 1): 256 consumer threads and a producer
// warp. Thread 0 of the consumers runs kIters rounds of a task's epilogue: 16 threads store one
// float each, a consumer barrier, then `fence.acq_rel.gpu` (what `red.release.gpu` begins with),
// timed by clock64 around the fence alone, then a relaxed count; ~2 µs of spinning between rounds
// (a task's body). Lane 0 of the producer warp keeps a weight-like stream going meanwhile, one of:
//   none       no stream: the fence's own cost
//   own        bulk copies of 32 KiB into its own CTA's 4-stage ring, `inflight` outstanding
//              (the megakernel's weight ring)
//   peer       rank 1's lane issues the copies into rank 0's ring (the mbarriers are rank 0's;
//              rank 0's lane waits on them and tells rank 1 through distributed shared memory);
//              rank 0 issues nothing. Rank 0 then has bytes landing that it did not issue,
//              rank 1 bytes issued that land elsewhere.
//   prefetch   cp.async.bulk.prefetch.L2 of 32 KiB pieces, paced at one per kPrefetchNs (no
//              shared-memory destination, nothing completes on the SM)
// Printed per stream and bytes in flight: the fence's median and 90th percentile (ns, over
// every round of every CTA of a rank), and the stream's GB/s over the GPU.
//
// Build: CMake target amk_bench_fence_stall (CUDA builds with AMK_BUILD_BENCH). Run it on the
// GPU machine with no arguments.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cluster_ring.cuh"
#include "cuda_bench.h"

namespace {

using namespace amk::bench;

constexpr int kConsumers = 256, kThreads = kConsumers + 32, kChunk = 32 * 1024, kStages = 4;
constexpr int kIters = 400, kBodyNs = 2000, kPrefetchNs = 900;
constexpr size_t kStreamBytes = size_t(4) << 30;

enum Stream : int { kNone = 0, kOwn = 1, kPeer = 2, kPrefetch = 3 };

struct Args {
  const uint8_t* stream;
  int64_t stream_per_cta;
  int mode;
  int inflight;
  int cluster_scope;   // time fence.acq_rel.cluster instead of .gpu
  float* outputs;      // 16 floats a CTA
  uint32_t* counters;  // one a CTA
  uint64_t* stalls;    // kIters fence stalls (SM cycles) a CTA
  uint64_t* out;       // per CTA: t0 ns, t1 ns, cycles over [t0, t1], streamed bytes
};

__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(p)),
               "r"(bytes)
               : "memory");
}

// Lane 0 of the producer warp, one function a stream. Each runs until `stop` (its CTA's consumers
// are done) and returns the bytes streamed until then.
__device__ uint64_t produce_prefetch(const Args& a, volatile int* stop) {
  const uint8_t* slice = a.stream + int64_t(blockIdx.x) * a.stream_per_cta;
  const int64_t n = a.stream_per_cta / kChunk;
  int64_t issued = 0;
  uint64_t next = global_ns();
  while (*stop == 0) {
    if (global_ns() < next) continue;
    prefetch_l2(slice + (issued % n) * kChunk, kChunk);
    ++issued;
    next += kPrefetchNs;
  }
  return uint64_t(issued) * kChunk;
}

// own: copies into this CTA's ring, `inflight` outstanding; drains before returning.
__device__ uint64_t produce_own(const Args& a, uint32_t ring, uint32_t bars, volatile int* stop) {
  const uint64_t policy = evict_first_policy();
  return stream_ring<kChunk, kStages>(
      a.stream + int64_t(blockIdx.x) * a.stream_per_cta, a.stream_per_cta / kChunk, a.inflight,
      bars, stop, [&](int s, const uint8_t* src) {
        bulk_copy_g2s(ring + uint32_t(s) * kChunk, src, kChunk, bars + 8u * s, policy);
      });
}

// Peer mode's rank 1: copies into rank 0's ring on rank 0's mbarriers, `inflight` outstanding by
// the landed count rank 0 writes here (`landed`); at its stop, it tells rank 0 how many it
// issued (`final_issued`, in rank 0) and waits until they have all landed. Nothing lands here.
__device__ uint64_t produce_peer_issuer(const Args& a, uint32_t ring, uint32_t bars,
                                        volatile int* stop, volatile uint32_t* landed,
                                        uint32_t final_issued) {
  const uint8_t* slice = a.stream + int64_t(blockIdx.x) * a.stream_per_cta;
  const int64_t n = a.stream_per_cta / kChunk;
  const uint64_t policy = evict_first_policy();
  const uint32_t dst_ring = peer_address(ring, 0u), dst_bars = peer_address(bars, 0u);
  uint32_t issued = 0;
  while (*stop == 0) {
    while (issued - *landed < uint32_t(a.inflight)) {
      const int s = int(issued % kStages);
      bulk_copy_g2s(dst_ring + uint32_t(s) * kChunk, slice + (issued % n) * kChunk, kChunk,
                    dst_bars + 8u * s, policy);
      ++issued;
    }
  }
  st_cluster(peer_address(final_issued, 0u), issued);
  while (*landed < issued) {
  }
  return 0;  // rank 0 counts the bytes
}

__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kThreads) fence_stall(Args a) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t bars[kStages];
  __shared__ volatile int stop;
  __shared__ volatile uint32_t peer_landed;   // peer mode, rank 1: what rank 0 has received
  __shared__ volatile uint32_t final_issued;  // peer mode, rank 0: what rank 1 issued in all
  __shared__ uint64_t streamed;
  const int tid = int(threadIdx.x);
  const uint32_t rank = cluster_rank();
  if (tid == 0) {
    stop = 0;
    streamed = 0;
    peer_landed = 0;
    final_issued = kNotYet;
    for (int s = 0; s < kStages; ++s) mbar_init(smem_address(&bars[s]), 1u);
    mbar_init_fence();
    // Peer mode: rank 0's stages armed for their first phase before rank 1 may issue.
    if (a.mode == kPeer && rank == 0)
      for (int s = 0; s < kStages; ++s) mbar_arrive_expect_tx(smem_address(&bars[s]), kChunk);
  }
  __syncthreads();
  cluster_sync();  // the peer's barriers exist (and are armed) before any copy targets them
  if (tid >= kConsumers) {
    if (tid == kConsumers) {
      const uint32_t ring_s = smem_address(ring), bars_s = smem_address(&bars[0]);
      if (a.mode == kOwn) streamed = produce_own(a, ring_s, bars_s, &stop);
      if (a.mode == kPrefetch) streamed = produce_prefetch(a, &stop);
      if (a.mode == kPeer && rank == 1)
        streamed = produce_peer_issuer(a, ring_s, bars_s, &stop, &peer_landed,
                                       smem_address(const_cast<uint32_t*>(&final_issued)));
      if (a.mode == kPeer && rank == 0)
        streamed = receive_peer_ring<kChunk, kStages>(
            bars_s, &stop, peer_address(smem_address(const_cast<uint32_t*>(&peer_landed)), 1u),
            &final_issued);
    }
    __syncwarp();
    asm volatile("bar.sync 2, %0;" ::"r"(kThreads) : "memory");
  } else {
    // Let the stream reach its steady state.
    const uint64_t warm = global_ns();
    while (global_ns() - warm < 20000) {
    }
    consumer_sync(kConsumers);
    const uint64_t t0 = global_ns(), c0 = clock64();
    for (int i = 0; i < kIters; ++i) {
      if (tid < 16) a.outputs[16 * blockIdx.x + tid] = float(i + tid);
      consumer_sync(kConsumers);
      if (tid == 0) {
        const uint64_t f0 = clock64();
        if (a.cluster_scope)
          asm volatile("fence.acq_rel.cluster;" ::: "memory");
        else
          asm volatile("fence.acq_rel.gpu;" ::: "memory");
        const uint64_t f1 = clock64();
        asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(a.counters + blockIdx.x)
                     : "memory");
        a.stalls[int64_t(blockIdx.x) * kIters + i] = f1 - f0;
        const uint64_t body = global_ns();
        while (global_ns() - body < kBodyNs) {
        }
      }
      consumer_sync(kConsumers);
    }
    const uint64_t t1 = global_ns(), c1 = clock64();
    if (tid == 0) {
      stop = 1;
      a.out[4 * blockIdx.x] = t0;
      a.out[4 * blockIdx.x + 1] = t1;
      a.out[4 * blockIdx.x + 2] = c1 - c0;
    }
    asm volatile("bar.sync 2, %0;" ::"r"(kThreads) : "memory");  // the producer has stopped
    if (tid == 0) a.out[4 * blockIdx.x + 3] = streamed;
  }
  cluster_sync();  // no CTA leaves while its peer may still write its shared memory
}

bool ok(cudaError_t e, const char* what) { return amk::bench::cuda_ok("fence_stall", e, what); }

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int smem = kStages * kChunk;
  if (!ok(cudaFuncSetAttribute(fence_stall, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
          "cudaFuncSetAttribute"))
    return 1;
  // As many clusters as can be resident at once: the CTAs do not wait for each other, but a CTA
  // that started late would time a stream that has ended elsewhere.
  cudaLaunchConfig_t cfg{};
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.gridDim = dim3(sms / 2 * 2);
  int clusters = 0;
  if (!ok(cudaOccupancyMaxActiveClusters(&clusters, fence_stall, &cfg), "max active clusters"))
    return 1;
  const int ctas = std::min(sms / 2, clusters) * 2;
  std::printf("fence_stall: %d SMs, %d CTAs in %d clusters of 2\n", sms, ctas, ctas / 2);
  uint8_t* stream = nullptr;
  float* outputs = nullptr;
  uint32_t* counters = nullptr;
  uint64_t *stalls = nullptr, *out = nullptr;
  if (!ok(cudaMalloc(&stream, kStreamBytes), "cudaMalloc") ||
      !ok(cudaMalloc(&outputs, sizeof(float) * 16 * ctas), "cudaMalloc") ||
      !ok(cudaMalloc(&counters, sizeof(uint32_t) * ctas), "cudaMalloc") ||
      !ok(cudaMalloc(&stalls, sizeof(uint64_t) * kIters * ctas), "cudaMalloc") ||
      !ok(cudaMalloc(&out, sizeof(uint64_t) * 4 * ctas), "cudaMalloc") ||
      !ok(cudaMemset(stream, 1, kStreamBytes), "cudaMemset"))
    return 1;
  const char* names[] = {"none", "own copies", "peer copies", "L2 prefetch"};
  std::printf("%-12s %-7s %9s | %-22s | %-22s | %10s\n", "stream", "fence", "in flight",
              "rank 0 fence ns p50 p90", "rank 1 fence ns p50 p90", "stream GB/s");
  std::vector<uint64_t> host_stalls(size_t(kIters) * ctas), host(4 * ctas);
  struct Case {
    int mode, inflight, cluster_scope;
  };
  const Case cases[] = {{kNone, 0, 0}, {kOwn, 1, 0},  {kOwn, 2, 0},  {kOwn, 4, 0},
                        {kPeer, 1, 0}, {kPeer, 2, 0}, {kPeer, 4, 0}, {kPrefetch, 1, 0},
                        {kNone, 0, 1}, {kOwn, 2, 1},  {kOwn, 4, 1},  {kPeer, 4, 1}};
  for (const Case& c : cases) {
    Args a{stream,  int64_t(kStreamBytes / size_t(ctas)) / kChunk * kChunk, c.mode, c.inflight,
           c.cluster_scope, outputs, counters, stalls, out};
    cfg.gridDim = dim3(ctas);
    if (!ok(cudaMemset(out, 0, sizeof(uint64_t) * 4 * ctas), "cudaMemset") ||
        !ok(cudaLaunchKernelEx(&cfg, fence_stall, a), "launch") ||
        !ok(cudaDeviceSynchronize(), "kernel") ||
        !ok(cudaMemcpy(host_stalls.data(), stalls, sizeof(uint64_t) * kIters * ctas,
                       cudaMemcpyDeviceToHost),
            "cudaMemcpy") ||
        !ok(cudaMemcpy(host.data(), out, sizeof(uint64_t) * 4 * ctas, cudaMemcpyDeviceToHost),
            "cudaMemcpy"))
      return 1;
    std::vector<double> by_rank[2];
    uint64_t first = ~0ull, last = 0, bytes = 0;
    for (int b = 0; b < ctas; ++b) {
      const double ns_per_cycle =
          double(host[4 * b + 1] - host[4 * b]) / double(std::max<uint64_t>(host[4 * b + 2], 1));
      for (int i = 0; i < kIters; ++i)
        by_rank[b % 2].push_back(double(host_stalls[size_t(b) * kIters + i]) * ns_per_cycle);
      first = std::min(first, host[4 * b]);
      last = std::max(last, host[4 * b + 1]);
      bytes += host[4 * b + 3];
    }
    double p50[2], p90[2];
    for (int r = 0; r < 2; ++r) {
      p50[r] = amk::bench::median(by_rank[r]);  // sorts
      p90[r] = by_rank[r][by_rank[r].size() * 9 / 10];
    }
    std::printf("%-12s %-7s %6d KiB | %10.0f %10.0f | %10.0f %10.0f | %10.0f\n", names[c.mode],
                c.cluster_scope ? "cluster" : "gpu",
                c.inflight * kChunk / 1024, p50[0], p90[0], p50[1], p90[1],
                double(bytes) / double(last - first));
  }
  return 0;
}
