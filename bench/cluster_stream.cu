// Could one thread-block cluster run a small model's whole layer? (issue 9: smollm2-135m's bar is
// 3x the peer, ~11 µs a layer, and every level of today's step costs ~3.5-4.5 µs of fixed
// hand-off through L2: store, release, poll, x load.) Inside a cluster a level could hand its
// outputs to every CTA's shared memory with `st.async` and an mbarrier, no fence and no L2 round
// trip; but then only the cluster's SMs stream weights. Two questions, measured here:
//
//   stream  How many bytes a second n SMs pull, each with its own ring of bulk copies (16 KiB
//           chunks, `inflight` outstanding; the megakernel's producer), with the 256 consumer
//           threads either releasing each stage at once (copy) or first taking a GEMV-like dot
//           of it against x in shared memory (dot: 8 bf16 weights a 16-byte load, two float4 x
//           loads, eight FMAs, as the kernel's strips do), from HBM (a cold slice of the 4 GiB
//           buffer, L2 flushed first) or from L2 (a 256 KiB slice cycled, default policy).
//   hop     The chain of all-to-all hand-offs among C CTAs of one cluster (C = 2..16): each
//           CTA sends 64 floats to every CTA of the cluster (C x 16 `st.async` of 16 bytes,
//           completing on the receiver's mbarrier), waits for the C x 256 bytes sent to it, sums
//           them into its next 64; against the same chain through global memory (stores,
//           `red.release.gpu`, an acquire poll, the loads: today's counter), with the producer
//           lane streaming meanwhile or not.
//
// Build: CMake target amk_bench_cluster_stream (CUDA builds with AMK_BUILD_BENCH). Run it on the
// GPU machine with no arguments.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cluster_ring.cuh"
#include "cuda_bench.h"
#include "vm/cuda/device_common.cuh"
#include "vm/cuda/ops/gemv.cuh"
#include "vm/cuda/primitives.cuh"

namespace {

using namespace amk::bench;

constexpr int kConsumers = 256, kThreads = kConsumers + 32, kChunk = 16 * 1024, kMaxStages = 12;
constexpr int kK = 1024;  // x's length for the dot: a chunk is 8 rows of 1,024 bf16
constexpr size_t kBufferBytes = size_t(4) << 30, kFlushBytes = size_t(512) << 20;
constexpr int64_t kWarmSlice = 256 * 1024;

struct StreamArgs {
  const uint8_t* buffer;
  int64_t slice_bytes;  // a CTA's slice; chunks cycle through it
  int64_t chunks;       // chunks a CTA streams
  int active;           // CTAs that stream; the others leave at once
  int inflight;         // chunks outstanding (and the ring's stages)
  int dot;              // consumers take the dot before releasing a stage
  int evict_first;      // the weights' L2 policy (1) or the default (0)
  float* sink;
  uint64_t* out;  // per CTA: t0 ns, t1 ns, bytes
};

__global__ void __launch_bounds__(kThreads, 1) stream_kernel(StreamArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[2 * kMaxStages];
  __shared__ __align__(16) float xs[kK];
  if (int(blockIdx.x) >= a.active) return;
  const int tid = threadIdx.x, S = a.inflight;
  const uint32_t full0 = amk::cuda::smem_address(&bars[0]);
  const uint32_t empty0 = amk::cuda::smem_address(&bars[kMaxStages]);
  for (int i = tid; i < kK; i += blockDim.x) xs[i] = 1.0f + float(i & 7) * 0.125f;
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(full0 + 8u * s, 1u);
      mbar_init(empty0 + 8u * s, kConsumers / 32);
    }
    mbar_init_fence();
  }
  __syncthreads();
  const uint64_t t0 = amk::cuda::global_ns();
  const uint8_t* slice = a.buffer + int64_t(blockIdx.x) * a.slice_bytes;
  const int64_t slice_chunks = a.slice_bytes / kChunk;
  if (tid == kConsumers) {  // the producer lane
    const uint64_t policy = a.evict_first ? amk::cuda::evict_first_policy() : 0;
    for (int64_t i = 0; i < a.chunks; ++i) {
      const int s = int(i % S);
      if (i >= S)
        while (!mbar_try_wait(empty0 + 8u * s, uint32_t((i / S - 1) & 1))) {
        }
      mbar_arrive_expect_tx(full0 + 8u * s, kChunk);
      const uint8_t* src = slice + (i % slice_chunks) * kChunk;
      const uint32_t dst = amk::cuda::smem_address(smem + s * kChunk);
      if (a.evict_first)
        bulk_copy_g2s(dst, src, kChunk, full0 + 8u * s, policy);
      else
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
            "[%3];" ::"r"(dst),
            "l"(__cvta_generic_to_global(src)), "r"(kChunk), "r"(full0 + 8u * s)
            : "memory");
    }
  } else if (tid < kConsumers) {
    const float4* x4 = reinterpret_cast<const float4*>(xs);
    float acc = 0.0f;
    for (int64_t i = 0; i < a.chunks; ++i) {
      const int s = int(i % S);
      while (!mbar_try_wait(full0 + 8u * s, uint32_t((i / S) & 1))) {
      }
      if (a.dot) {
        const uint4* w = reinterpret_cast<const uint4*>(smem + s * kChunk);
        float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int u = 0; u < kChunk / 16 / kConsumers; ++u) {
          const int v = tid + u * kConsumers, xv = 2 * (v % (kK / 8));
          const uint4 q = w[v];
          const float4 xa = x4[xv], xb = x4[xv + 1];
          part[u] = amk::cuda::gemv_detail::dot16<true>(q, xa, xb, part[u]);  // the GEMV's step
        }
        acc += (part[0] + part[1]) + (part[2] + part[3]);
      }
      __syncwarp();
      if ((tid & 31) == 0) mbar_arrive(empty0 + 8u * s);
    }
    if (acc == 12345.0f) a.sink[blockIdx.x] = acc;  // keeps the dot
  }
  __syncthreads();
  if (tid == 0) {
    a.out[3 * blockIdx.x] = t0;
    a.out[3 * blockIdx.x + 1] = amk::cuda::global_ns();
    a.out[3 * blockIdx.x + 2] = uint64_t(a.chunks) * kChunk;
  }
}

// ---- hops ---------------------------------------------------------------------------------------

constexpr int kHopFloats = 64, kMaxCluster = 16, kHops = 2000, kHopStreamStages = 4;

struct HopArgs {
  int dsmem;             // 1: st.async into the cluster's CTAs; 0: through global memory
  int stream_inflight;   // chunks the producer lane keeps outstanding (0: no stream)
  const uint8_t* buffer;
  int64_t slice_bytes;
  float* global_x;       // [2][grid][64] (the global chain's outputs)
  uint32_t* counters;    // [grid / C] (the global chain's count, one a cluster)
  float* sink;
  uint64_t* out;  // per CTA: t0, t1
};


__global__ void __launch_bounds__(kThreads, 1) hop_kernel(HopArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(16) float inbox[2][kMaxCluster][kHopFloats];
  __shared__ __align__(8) uint64_t hop_bars[2];
  __shared__ __align__(8) uint64_t ring_bars[kHopStreamStages];
  __shared__ volatile int stop;
  const int tid = threadIdx.x;
  const uint32_t C = cluster_size(), rank = cluster_rank();
  const uint32_t cluster = blockIdx.x / C;
  const uint32_t hb0 = amk::cuda::smem_address(&hop_bars[0]);
  if (tid == 0) {
    mbar_init(hb0, 1u);
    mbar_init(hb0 + 8u, 1u);
    for (int s = 0; s < kHopStreamStages; ++s)
      mbar_init(amk::cuda::smem_address(&ring_bars[s]), 1u);
    mbar_init_fence();
    mbar_arrive_expect_tx(hb0, C * kHopFloats * 4);
    mbar_arrive_expect_tx(hb0 + 8u, C * kHopFloats * 4);
    stop = 0;
  }
  cluster_sync();  // every inbox barrier armed before any CTA sends
  if (tid == kConsumers) {
    if (a.stream_inflight > 0) {
      const uint64_t policy = amk::cuda::evict_first_policy();
      const uint8_t* slice = a.buffer + int64_t(blockIdx.x) * a.slice_bytes;
      stream_ring<kChunk, kHopStreamStages>(
          slice, a.slice_bytes / kChunk, a.stream_inflight,
          amk::cuda::smem_address(&ring_bars[0]), &stop, [&](int s, const uint8_t* src) {
            bulk_copy_g2s(amk::cuda::smem_address(smem + s * kChunk), src, kChunk,
                          amk::cuda::smem_address(&ring_bars[s]), policy);
          });
    }
  } else if (tid < kConsumers) {
    // Thread t sends piece t % 16 (4 floats) of this CTA's 64 to CTA t / 16 of the cluster.
    const uint32_t dest = uint32_t(tid) / 16u, piece = uint32_t(tid) % 16u;
    float4 mine = make_float4(float(rank), 1.0f, 2.0f, 3.0f);
    uint64_t t0 = 0;
    for (int k = 0; k < kHops; ++k) {
      if (k == 8) t0 = amk::cuda::global_ns();  // after the warm-up hops
      const int b = k & 1;
      if (a.dsmem) {
        if (dest < C) {
          const uint32_t slot =
              amk::cuda::smem_address(&inbox[b][rank][4 * piece]);
          st_async_v4(peer_address(slot, dest), mine, peer_address(hb0 + 8u * b, dest));
        }
        while (!mbar_try_wait(hb0 + 8u * b, uint32_t((k >> 1) & 1))) {
        }
      } else {
        float* gx = a.global_x + (size_t(b) * gridDim.x + blockIdx.x) * kHopFloats;
        if (tid < 16) reinterpret_cast<float4*>(gx)[tid] = mine;
        amk::cuda::consumer_sync(kConsumers);
        if (tid == 0) {
          asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(a.counters + cluster)
                       : "memory");
          while (ld_acquire_gpu(a.counters + cluster) < C * uint32_t(k + 1)) {
          }
        }
        amk::cuda::consumer_sync(kConsumers);
        if (dest < C) {
          const float4 v = __ldcg(reinterpret_cast<const float4*>(
                                      a.global_x +
                                      (size_t(b) * gridDim.x + cluster * C + dest) * kHopFloats) +
                                  piece);
          *reinterpret_cast<float4*>(&inbox[b][dest][4 * piece]) = v;
        }
      }
      amk::cuda::consumer_sync(kConsumers);
      // The next 64: the sum over the senders (a data dependence on every one of them).
      if (dest < C) {
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
        for (uint32_t r = 0; r < C; ++r) {
          const float4 v = *reinterpret_cast<const float4*>(&inbox[b][r][4 * piece]);
          s.x += v.x;
          s.y += v.y;
          s.z += v.z;
          s.w += v.w;
        }
        mine = make_float4(s.x * 0.5f, s.y * 0.5f, s.z * 0.5f, s.w * 0.5f);
      }
      // Everyone has read inbox[b]; re-arm its barrier for hop k + 2, whose bytes can come only
      // after every CTA has received this CTA's hop k + 1.
      amk::cuda::consumer_sync(kConsumers);
      if (a.dsmem && tid == 0) mbar_arrive_expect_tx(hb0 + 8u * b, C * kHopFloats * 4);
    }
    if (tid == 0) {
      a.out[2 * blockIdx.x] = t0;
      a.out[2 * blockIdx.x + 1] = amk::cuda::global_ns();
      stop = 1;
    }
    if (mine.x == 12345.0f) a.sink[blockIdx.x] = mine.y;
  }
  __syncthreads();
  cluster_sync();  // no CTA leaves while a peer may still write its inbox
}

bool ok(cudaError_t e, const char* what) { return cuda_ok("cluster_stream", e, what); }

__global__ void flush_kernel(uint8_t* p, size_t n) {
  for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 16; i < n;
       i += size_t(gridDim.x) * blockDim.x * 16)
    *reinterpret_cast<uint4*>(p + i) = make_uint4(1, 2, 3, 4);
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  uint8_t *buffer = nullptr, *flush = nullptr;
  float *sink = nullptr, *global_x = nullptr;
  uint32_t* counters = nullptr;
  uint64_t* out = nullptr;
  if (!ok(cudaMalloc(&buffer, kBufferBytes), "cudaMalloc") ||
      !ok(cudaMalloc(&flush, kFlushBytes), "cudaMalloc") ||
      !ok(cudaMalloc(&sink, sizeof(float) * sms), "cudaMalloc") ||
      !ok(cudaMalloc(&global_x, sizeof(float) * 2 * sms * kHopFloats), "cudaMalloc") ||
      !ok(cudaMalloc(&counters, sizeof(uint32_t) * sms), "cudaMalloc") ||
      !ok(cudaMalloc(&out, sizeof(uint64_t) * 3 * sms), "cudaMalloc") ||
      !ok(cudaMemset(buffer, 0x3c, kBufferBytes), "cudaMemset"))
    return 1;
  std::vector<uint64_t> host(3 * sms);

  // ---- stream -----------------------------------------------------------------------------
  const int smem = kMaxStages * kChunk;
  if (!ok(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
          "cudaFuncSetAttribute"))
    return 1;
  std::printf("cluster_stream: %d SMs; stream: 16 KiB chunks, 8 MiB a CTA\n", sms);
  std::printf("%-5s %-4s %-4s %9s | %10s %12s %12s\n", "SMs", "src", "work", "in flight",
              "total GB/s", "per SM GB/s", "per SM min");
  const int counts[] = {1, 2, 4, 8, 16, 32, 66, sms};
  for (int warm = 0; warm < 2; ++warm)
    for (int dot = 0; dot < 2; ++dot)
      for (int inflight : {4, 8, 12})
        for (int n : counts) {
          if (dot == 0 && inflight == 12) continue;
          flush_kernel<<<sms * 4, 256>>>(flush, kFlushBytes);
          StreamArgs a{buffer, warm ? kWarmSlice : int64_t(kBufferBytes / size_t(sms)) / kChunk * kChunk,
                       (int64_t(8) << 20) / kChunk, n, inflight, dot, warm ? 0 : 1, sink, out};
          if (!ok(cudaMemset(out, 0, sizeof(uint64_t) * 3 * sms), "cudaMemset") ||
              !ok(cudaDeviceSynchronize(), "flush"))
            return 1;
          stream_kernel<<<sms, kThreads, smem>>>(a);
          if (!ok(cudaGetLastError(), "launch") || !ok(cudaDeviceSynchronize(), "stream kernel") ||
              !ok(cudaMemcpy(host.data(), out, sizeof(uint64_t) * 3 * sms, cudaMemcpyDeviceToHost),
                  "cudaMemcpy"))
            return 1;
          uint64_t first = ~0ull, last = 0, bytes = 0;
          std::vector<double> per;
          for (int b = 0; b < n; ++b) {
            first = std::min(first, host[3 * b]);
            last = std::max(last, host[3 * b + 1]);
            bytes += host[3 * b + 2];
            per.push_back(double(host[3 * b + 2]) / double(host[3 * b + 1] - host[3 * b]));
          }
          const double med = median(per);
          std::printf("%-5d %-4s %-4s %5d KiB | %10.0f %12.1f %12.1f\n", n, warm ? "L2" : "HBM",
                      dot ? "dot" : "copy", inflight * kChunk / 1024,
                      double(bytes) / double(last - first), med, per.front());
        }

  // ---- hops -------------------------------------------------------------------------------
  const int hop_smem = kHopStreamStages * kChunk;
  if (!ok(cudaFuncSetAttribute(hop_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, hop_smem),
          "cudaFuncSetAttribute") ||
      !ok(cudaFuncSetAttribute(hop_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
          "cudaFuncSetAttribute (non-portable clusters)"))
    return 1;
  std::printf("\nhop: %d hops, 64 floats from every CTA of a cluster to every CTA\n", kHops);
  std::printf("%-8s %-7s %9s %9s | %10s %10s\n", "cluster", "via", "clusters", "in flight",
              "us/hop p50", "us/hop max");
  for (int C : {2, 4, 8, 16})
    for (int n_clusters : {1, 0})  // 0: as many as fit
      for (int stream : {0, 2, 4})
        for (int dsmem : {1, 0}) {
          cudaLaunchAttribute attr;
          cudaLaunchConfig_t cfg =
              cluster_launch(attr, unsigned(C), unsigned(sms / C * C), kThreads, hop_smem);
          int fit = 0;
          if (cudaOccupancyMaxActiveClusters(&fit, hop_kernel, &cfg) != cudaSuccess || fit < 1) {
            (void)cudaGetLastError();
            std::printf("%-8d (no cluster of %d fits)\n", C, C);
            break;
          }
          const int clusters = n_clusters ? 1 : std::min(fit, sms / C);
          cfg.gridDim = dim3(unsigned(clusters * C));
          HopArgs a{dsmem, stream, buffer, int64_t(kBufferBytes / size_t(sms)) / kChunk * kChunk,
                    global_x, counters, sink, out};
          if (!ok(cudaMemset(counters, 0, sizeof(uint32_t) * sms), "cudaMemset") ||
              !ok(cudaLaunchKernelEx(&cfg, hop_kernel, a), "launch") ||
              !ok(cudaDeviceSynchronize(), "hop kernel") ||
              !ok(cudaMemcpy(host.data(), out, sizeof(uint64_t) * 2 * clusters * C,
                             cudaMemcpyDeviceToHost),
                  "cudaMemcpy"))
            return 1;
          std::vector<double> per;
          for (int b = 0; b < clusters * C; ++b)
            per.push_back(double(host[2 * b + 1] - host[2 * b]) / 1000.0 / (kHops - 8));
          const double mx = *std::max_element(per.begin(), per.end());
          std::printf("%-8d %-7s %9d %5d KiB | %10.3f %10.3f\n", C, dsmem ? "dsmem" : "global",
                      clusters, stream * kChunk / 1024, median(per), mx);
        }
  return 0;
}
