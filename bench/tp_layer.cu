// A decoder layer's hand-offs in two designs, on a synthetic step (issue 9; bench/cluster_stream.cu
// measured the pieces). Not the megakernel: the weights are bytes, the arithmetic a stand-in of
// the same shape (every level waits for its whole input, streams its bytes through a ring of bulk
// copies, takes a dot of them against x in shared memory, reduces across its warps and hands its
// outputs on), so the difference between the designs is their hand-offs.
//
//   global   today's: every level's rows split over all G CTAs; each level's outputs stored to
//            global memory, a consumer barrier, `red.release.gpu` on the level's counter; the next
//            level polls the counter to G and loads the whole vector (5 global hops a layer).
//   tp P C   P clusters of C CTAs, tensor-parallel: q/k/v and gate/up split by output rows over
//            every CTA, the attention by the cluster's heads, o_proj and down by input columns
//            (a cluster's partial sums of a slice of the hidden vector each). Inside a cluster a
//            level sends its outputs to every CTA of the cluster with `st.async` (completing on the
//            receiver's mbarrier): q/k/v -> attention -> o_proj, gate/up -> down. With P > 1,
//            o_proj's and down's partials go through global memory (a counter per slice, P
//            producers); CTA r of each cluster sums slice r over the P clusters and sends it to
//            its cluster (2 global hops + 5 in-cluster hops a layer); with P = 1 the cluster
//            holds every partial (5 in-cluster hops, no global one).
//
// Printed per model shape and design: µs a layer (median CTA, layers 2..L), the bytes a layer
// streams and what that is in GB/s. Build: CMake target amk_bench_tp_layer (AMK_BUILD_BENCH). Run
// on the GPU machine with no arguments; a hang is cut by a poll limit (the row says TIMEOUT).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cluster_ring.cuh"
#include "cuda_bench.h"
#include "vm/cuda/device_common.cuh"
#include "vm/cuda/ops/gemv.cuh"
#include "vm/cuda/primitives.cuh"

namespace {

using namespace amk::bench;
using amk::cuda::consumer_sync;
using amk::cuda::global_ns;
using amk::cuda::smem_address;

constexpr int kConsumers = 256, kThreads = kConsumers + 32, kChunk = 16 * 1024, kStages = 7;
constexpr int kMaxC = 16, kMaxOut = 512, kLevels = 5;
constexpr int kRegion = kMaxC * kMaxOut;
constexpr int kUnionFloats = 3 * kRegion;  // two inboxes (tp) or x (global), and a third x
constexpr size_t kBufferBytes = size_t(3) << 30;
constexpr long long kPollLimit = 1ll << 22;

struct Shape {
  const char* name;
  int H, Q, KV, F, L, kv_heads, head_dim, ctx;
};

// What CTA does at one level of a layer.
struct Level {
  int64_t bytes;  // streamed through its ring
  int n_out;      // outputs it produces (padded to 4 where sent)
  int K;          // x's length (the dot's index range)
  int in;  // 0: in-cluster inbox; 1: global, whole vector; 2: global partials, slice `rank`
           // summed, then the cluster's slices by inbox; 3: global partials, every slice summed
  int out;        // 0: in-cluster send; 1: global store + count; 2: global partial + slice count
};

struct Args {
  Level lv[kLevels];
  int layers, P, C, tp;
  int Pa;  // the clusters that run levels 0-2 (q/k/v, attention, o_proj): whole KV heads each
  const uint8_t* buffer;
  int64_t layer_stride;  // buffer bytes between one layer's slices and the next's
  float* gbuf;           // [2][G][kMaxOut] (global) / [2][P][C][kMaxOut] partials (tp)
  uint32_t* counters;    // [layers][kLevels][kMaxC]
  int* abort_flag;
  uint64_t* out;  // per CTA: ns at layer 1's start, ns at the end
};

__device__ __forceinline__ int pad4(int n) { return (n + 3) & ~3; }
__device__ __forceinline__ int64_t chunks_of(int64_t bytes) { return (bytes + kChunk - 1) / kChunk; }
__device__ __forceinline__ uint32_t chunk_bytes(int64_t bytes, int64_t i) {
  const int64_t rest = bytes - i * kChunk;
  return uint32_t(rest < kChunk ? (rest + 15) & ~int64_t(15) : kChunk);
}

// In-cluster hop h (counted from the step's start) feeds the h-th level, in step order after
// layer 0's level 0, whose input comes by inbox (in 0 or 2); each of its C senders sends the
// padded outputs of the level before (o_proj's / down's summed slice where in is 2).
// A cluster that does not run levels 0-2 (attn false) receives only levels 3's and 4's inputs.
__device__ __forceinline__ int inbox_n(const Args& a, uint32_t h, bool attn) {
  int fed[kLevels], n_fed = 0;
  for (int j = attn ? 0 : 3; j < kLevels; ++j)
    if (a.lv[j].in == 0 || a.lv[j].in == 2) fed[n_fed++] = j;
  if (n_fed == 0) return 0;
  const int level = fed[(h + (fed[0] == 0 ? 1u : 0u)) % uint32_t(n_fed)];
  return pad4(a.lv[(level + kLevels - 1) % kLevels].n_out);
}

__device__ void consumers(const Args& a, uint8_t* ring, float* uni, float* red, float* outv,
                          uint32_t full0, uint32_t empty0, uint32_t inbar0, uint32_t C,
                          uint32_t rank, int G, int p);

__global__ void __launch_bounds__(kThreads, 1) tp_layer_kernel(Args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* ring = smem;
  float* uni = reinterpret_cast<float*>(smem + kStages * kChunk);  // kUnionFloats
  __shared__ __align__(8) uint64_t bars[2 * kStages + 2];
  __shared__ float red[kConsumers];
  __shared__ __align__(16) float outv[kMaxOut];
  const int tid = threadIdx.x;
  const uint32_t C = a.tp ? cluster_size() : 1u, rank = a.tp ? cluster_rank() : 0u;
  const int G = int(gridDim.x), p = int(blockIdx.x / C);
  const uint32_t full0 = smem_address(&bars[0]), empty0 = smem_address(&bars[kStages]);
  const uint32_t inbar0 = smem_address(&bars[2 * kStages]);
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8u * s, 1u);
      mbar_init(empty0 + 8u * s, kConsumers / 32);
    }
    mbar_init(inbar0, 1u);
    mbar_init(inbar0 + 8u, 1u);
    mbar_init_fence();
    if (a.tp) {  // hops 0 and 1 (the first layer's inputs of levels 1 and 2)
      const bool attn = int(blockIdx.x / C) < a.Pa;
      mbar_arrive_expect_tx(inbar0, C * 4u * uint32_t(inbox_n(a, 0, attn)));
      mbar_arrive_expect_tx(inbar0 + 8u, C * 4u * uint32_t(inbox_n(a, 1, attn)));
    }
  }
  for (int i = tid; i < kUnionFloats; i += blockDim.x) uni[i] = 1.0f;  // before any peer sends
  if (a.tp) cluster_sync();
  __syncthreads();

  if (tid == kConsumers) {  // the producer lane: every level's bytes, layer after layer
    const uint64_t policy = amk::cuda::evict_first_policy();
    int64_t i = 0;
    bool stop = false;
    for (int l = 0; l < a.layers && !stop; ++l) {
      // This CTA's slice of the layer's region; its levels one after another in it.
      const uint8_t* src = a.buffer + int64_t(l) * a.layer_stride +
                           int64_t(blockIdx.x) * (a.layer_stride / G / 16 * 16);
      for (int j = 0; j < kLevels && !stop; ++j) {
        if (a.tp && j <= 2 && p >= a.Pa) continue;  // not this cluster's levels
        for (int64_t c = 0; c < chunks_of(a.lv[j].bytes) && !stop; ++c, ++i) {
          const int s = int(i % kStages);
          if (i >= kStages) {
            long long n = 0;
            while (!stop && !mbar_try_wait(empty0 + 8u * s, uint32_t((i / kStages - 1) & 1)))
              if (++n > kPollLimit || *(volatile int*)a.abort_flag) {
                atomicExch(a.abort_flag, 1);
                stop = true;
              }
            if (stop) break;
          }
          const uint32_t bytes = chunk_bytes(a.lv[j].bytes, c);
          mbar_arrive_expect_tx(full0 + 8u * s, bytes);
          bulk_copy_g2s(smem_address(ring + s * kChunk), src + c * kChunk, bytes,
                        full0 + 8u * s, policy);
        }
        src += (a.lv[j].bytes + 15) / 16 * 16;
      }
    }
  } else if (tid < kConsumers) {
    consumers(a, ring, uni, red, outv, full0, empty0, inbar0, C, rank, G, p);
  }
  // No CTA leaves while a peer may still write its inboxes (the consumers received every hop
  // sent to them before getting here). The producer warp reconverges first (.aligned).
  __syncwarp();
  if (a.tp) cluster_sync();
}

__device__ void consumers(const Args& a, uint8_t* ring, float* uni, float* red, float* outv,
                          uint32_t full0, uint32_t empty0, uint32_t inbar0, uint32_t C,
                          uint32_t rank, int G, int p) {
  const int tid = threadIdx.x;
  const bool attn = !a.tp || p < a.Pa;  // this cluster runs levels 0-2
  // Layer 0's x is in the third region (hop 0 may land in inbox 0 while level 0 reads x).
  const float4* x = reinterpret_cast<const float4*>(uni + 2 * kRegion);
  int K = a.lv[0].K;
  int64_t chunk = 0;
  uint32_t hop = 0;  // in-cluster hops received so far
  uint64_t t_start = global_ns();
  bool aborted = false;
  const auto poll_abort = [&](long long& n) {
    if (++n > kPollLimit || *(volatile int*)a.abort_flag) {
      atomicExch(a.abort_flag, 1);
      aborted = true;
    }
    return aborted;
  };
  // Waits for in-cluster hop `hop` (as x: C x n floats of inbox hop & 1).
  const auto recv_inbox = [&](int n) {
    const int b = int(hop & 1u);
    long long polls = 0;
    while (!mbar_try_wait(inbar0 + 8u * b, (hop >> 1) & 1u))
      if (poll_abort(polls)) return;
    x = reinterpret_cast<const float4*>(uni + b * kMaxC * kMaxOut);
    K = int(C) * n;
    ++hop;
  };
  // Sends outv[0, n) to inbox hop & 1 of every CTA of the cluster, at this CTA's rank.
  const auto send_inbox = [&](int n) {
    const int b = int(hop & 1u), pieces = n / 4;
    for (int t = tid; t < int(C) * pieces; t += kConsumers) {
      const uint32_t dest = uint32_t(t / pieces), piece = uint32_t(t % pieces);
      const uint32_t slot = smem_address(uni + b * kMaxC * kMaxOut + rank * n + 4 * piece);
      st_async_v4(peer_address(slot, dest), reinterpret_cast<const float4*>(outv)[piece],
                  peer_address(inbar0 + 8u * b, dest));
    }
  };
  for (int l = 0; l < a.layers && !aborted; ++l) {
    if (l == 1) t_start = global_ns();
    for (int j = 0; j < kLevels && !aborted; ++j) {
      const Level& lv = a.lv[j];
      if (j <= 2 && !attn) continue;
      // 1. The input.
      if (l > 0 || j > 0) {
        if (lv.in == 0) {
          recv_inbox(inbox_n(a, hop, attn));
        } else {
          const int prev = (j + kLevels - 1) % kLevels, pl = j == 0 ? l - 1 : l;
          const int n_prev = a.lv[prev].n_out;
          const int np = prev == 2 ? a.Pa : a.P;  // the clusters whose partials are summed
          uint32_t* ctr = a.counters + (size_t(pl) * kLevels + prev) * kMaxC;
          if (lv.in == 1) {  // every CTA's outputs: G of them
            if (tid == 0) {
              long long polls = 0;
              while (ld_acquire_gpu(ctr) < uint32_t(G))
                if (poll_abort(polls)) break;
            }
            consumer_sync(kConsumers);
            const float* src = a.gbuf + size_t((pl * kLevels + prev) & 1) * G * kMaxOut;
            float* xw = uni;
            for (int i = tid; i < G * n_prev; i += kConsumers) {
              const int g = i / n_prev, e = i - g * n_prev;
              xw[i] = __ldcg(src + size_t(g) * kMaxOut + e);
            }
            x = reinterpret_cast<const float4*>(uni);
            K = G * n_prev;
          } else if (lv.in == 3) {  // every slice's P partials, summed here
            if (tid < int(C)) {
              long long polls = 0;
              while (ld_acquire_gpu(ctr + tid) < uint32_t(np))
                if (poll_abort(polls)) break;
            }
            consumer_sync(kConsumers);
            const float* src = a.gbuf + size_t(prev == 2 ? 0 : 1) * a.P * C * kMaxOut;
            const int np = pad4(n_prev);
            float* xw = uni + 2 * kRegion;
            for (int i = tid; i < int(C) * np; i += kConsumers) {
              const int r = i / np, e = i - r * np;
              float s = 0.0f;
              for (int q = 0; q < np; ++q) s += __ldcg(src + (size_t(q) * C + r) * kMaxOut + e);
              xw[i] = s;
            }
            x = reinterpret_cast<const float4*>(xw);
            K = int(C) * np;
          } else {  // slice `rank` of the hidden vector: P partials, summed, then to the cluster
            if (tid == 0) {
              long long polls = 0;
              while (ld_acquire_gpu(ctr + rank) < uint32_t(np))
                if (poll_abort(polls)) break;
            }
            consumer_sync(kConsumers);
            const float* src = a.gbuf + size_t(prev == 2 ? 0 : 1) * a.P * C * kMaxOut;
            for (int e = tid; e < pad4(n_prev); e += kConsumers) {
              float s = 0.0f;
              for (int q = 0; q < np; ++q) s += __ldcg(src + (size_t(q) * C + rank) * kMaxOut + e);
              outv[e] = s;
            }
            consumer_sync(kConsumers);
            send_inbox(pad4(n_prev));
            recv_inbox(pad4(n_prev));
          }
        }
        if (aborted) break;
      }
      consumer_sync(kConsumers);
      // 2. The level's bytes against x.
      float acc = 0.0f;
      for (int64_t c = 0; c < chunks_of(lv.bytes); ++c, ++chunk) {
        const int s = int(chunk % kStages);
        long long polls = 0;
        while (!mbar_try_wait(full0 + 8u * s, uint32_t((chunk / kStages) & 1)))
          if (poll_abort(polls)) break;
        if (aborted) break;
        const uint4* w = reinterpret_cast<const uint4*>(ring + s * kChunk);
        const int nv = int(chunk_bytes(lv.bytes, c) / 16);
        for (int v = tid; v < nv; v += kConsumers) {
          // x's first 256 floats (the stand-in's index; every buffer x points at holds them).
          const int xv = 2 * (v & 31);
          const uint4 q = w[v];
          const float4 xa = x[xv], xb = x[xv + 1];
          acc = amk::cuda::gemv_detail::dot16<true>(q, xa, xb, acc);  // the GEMV's step
        }
        __syncwarp();
        if ((tid & 31) == 0) mbar_arrive(empty0 + 8u * s);
      }
      if (aborted) break;
      // 3. Across the warps: n_out outputs (finish_rows' barrier and shared-memory sums).
      red[tid] = acc;
      consumer_sync(kConsumers);
      const int n = lv.n_out;
      for (int t = tid; t < pad4(n); t += kConsumers) {
        float s = 0.0f;
        for (int u = t % 8; u < kConsumers; u += 8) s += red[u];
        outv[t] = t < n ? s * 1e-3f + 1.0f : 0.0f;
      }
      consumer_sync(kConsumers);  // outv written; the inbox this level read is free
      // The inbox this level read (in-cluster hop `hop - 1`) is free: armed for hop + 1, whose
      // bytes come only after every CTA of the cluster has received this CTA's next send.
      if (a.tp && tid == 0 && (lv.in == 0 || lv.in == 2) && (l > 0 || j > 0))
        mbar_arrive_expect_tx(inbar0 + 8u * ((hop - 1u) & 1u),  // hop + 1 reuses it
                              C * 4u * uint32_t(inbox_n(a, hop + 1u, attn)));
      consumer_sync(kConsumers);
      // 4. The outputs.
      if (lv.out == 0) {
        send_inbox(pad4(n));
      } else if (lv.out == 1) {
        float* dst = a.gbuf + size_t((l * kLevels + j) & 1) * G * kMaxOut +
                     size_t(blockIdx.x) * kMaxOut;
        for (int t = tid; t < n; t += kConsumers) dst[t] = outv[t];
        consumer_sync(kConsumers);
        if (tid == 0)
          asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(
                           a.counters + (size_t(l) * kLevels + j) * kMaxC)
                       : "memory");
      } else {
        // o_proj's partials in slot 0, down's in slot 1: a slot is rewritten a layer later,
        // after every reader of the slice has sent its next partial.
        float* dst = a.gbuf + size_t(j == 2 ? 0 : 1) * a.P * C * kMaxOut +
                     (size_t(p) * C + rank) * kMaxOut;
        for (int t = tid; t < pad4(n); t += kConsumers) dst[t] = outv[t];
        consumer_sync(kConsumers);
        if (tid == 0)
          asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(
                           a.counters + (size_t(l) * kLevels + j) * kMaxC + rank)
                       : "memory");
      }
    }
  }
  // The last send of a P = 1 layer feeds a next layer that does not run: received here, so
  // no peer writes into a CTA that has left.
  if (a.tp && a.lv[kLevels - 1].out == 0 && !aborted) recv_inbox(inbox_n(a, hop, attn));
  if (tid == 0) {
    a.out[2 * blockIdx.x] = t_start;
    a.out[2 * blockIdx.x + 1] = global_ns();
  }
}

bool ok(cudaError_t e, const char* what) { return cuda_ok("tp_layer", e, what); }

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The levels of one CTA for a shape and a design (G CTAs: P clusters of C; tp = 0: global).
Args plan(const Shape& m, int tp, int P, int C, int G, int direct, int Pa) {
  Args a{};
  const int64_t kv_bytes = int64_t(m.kv_heads) * m.ctx * m.head_dim * 2 * 2;
  if (!tp) {
    a.lv[0] = {int64_t(ceil_div(m.Q + 2 * m.KV, G)) * m.H * 2, ceil_div(m.Q + 2 * m.KV, G), 0, 1, 1};
    a.lv[1] = {kv_bytes / G, ceil_div(m.Q, G), 0, 1, 1};
    a.lv[2] = {int64_t(ceil_div(m.H, G)) * m.Q * 2, ceil_div(m.H, G), 0, 1, 1};
    a.lv[3] = {int64_t(ceil_div(2 * m.F, G)) * m.H * 2, ceil_div(m.F, G), 0, 1, 1};
    a.lv[4] = {int64_t(ceil_div(m.H, G)) * m.F * 2, ceil_div(m.H, G), 0, 1, 1};
  } else {
    const int part = P > 1 ? 2 : 0, in_part = P > 1 ? (direct ? 3 : 2) : 0;
    const int Ga = Pa * C;  // levels 0-2 run on the Pa clusters
    a.lv[0] = {int64_t(ceil_div(m.Q + 2 * m.KV, Ga)) * m.H * 2, ceil_div(m.Q + 2 * m.KV, Ga), 0, in_part, 0};
    a.lv[1] = {kv_bytes / Ga, ceil_div(m.Q, Ga), 0, 0, 0};
    a.lv[2] = {int64_t(ceil_div(m.H, C)) * ceil_div(m.Q, Pa) * 2, ceil_div(m.H, C), 0, 0,
               Pa > 1 || P > 1 ? 2 : 0};
    a.lv[3] = {int64_t(ceil_div(2 * m.F, G)) * m.H * 2, ceil_div(m.F, G), 0, in_part, 0};
    a.lv[4] = {int64_t(ceil_div(m.H, C)) * ceil_div(m.F, P) * 2, ceil_div(m.H, C), 0, 0, part};
  }
  a.lv[0].K = m.H;
  a.layers = m.L;
  a.P = P;
  a.C = C;
  a.tp = tp;
  a.Pa = tp ? Pa : 0;
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  // One shape (0, 1, 2), all (none), or -2: the resident clusters by shared memory.
  const int only_shape = argc > 1 ? std::atoi(argv[1]) : -1;
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  uint8_t* buffer = nullptr;
  float* gbuf = nullptr;
  uint32_t* counters = nullptr;
  int* abort_flag = nullptr;
  uint64_t* out = nullptr;
  const size_t n_counters = size_t(64) * kLevels * kMaxC;
  if (!ok(cudaMalloc(&buffer, kBufferBytes), "cudaMalloc") ||
      !ok(cudaMalloc(&gbuf, sizeof(float) * 2 * 256 * kMaxOut), "cudaMalloc") ||
      !ok(cudaMalloc(&counters, sizeof(uint32_t) * n_counters), "cudaMalloc") ||
      !ok(cudaMalloc(&abort_flag, sizeof(int)), "cudaMalloc") ||
      !ok(cudaMalloc(&out, sizeof(uint64_t) * 2 * sms), "cudaMalloc") ||
      !ok(cudaMemset(buffer, 0x3c, kBufferBytes), "cudaMemset") ||
      !ok(cudaMemset(gbuf, 0, sizeof(float) * 2 * 256 * kMaxOut), "cudaMemset"))
    return 1;
  const int smem = kStages * kChunk + kUnionFloats * 4;
  if (!ok(cudaFuncSetAttribute(tp_layer_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
          "cudaFuncSetAttribute") ||
      !ok(cudaFuncSetAttribute(tp_layer_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
          "cudaFuncSetAttribute (non-portable clusters)"))
    return 1;
  if (only_shape == -2) {  // how many clusters stay resident, by cluster size and shared memory
    std::printf("resident clusters (SMs) by dynamic shared memory a CTA\n%-8s", "cluster");
    const int kbs[] = {32, 64, 96, 128, 160, 176, 192, 200, 208, 216, 224};
    for (int kb : kbs) std::printf(" %9d KB", kb);
    std::printf("\n");
    for (int C : {1, 2, 4, 8, 10, 12, 14, 16}) {
      std::printf("%-8d", C);
      for (int kb : kbs) {
        cudaLaunchAttribute attr;
        cudaLaunchConfig_t cfg = cluster_launch(attr, unsigned(C), unsigned(sms / C * C), kThreads,
                                                size_t(kb) * 1024 - 4352);  // less the static
        int fit = 0;
        if (cudaOccupancyMaxActiveClusters(&fit, tp_layer_kernel, &cfg) != cudaSuccess) {
          (void)cudaGetLastError();
          fit = -1;
        }
        std::printf(" %4d (%3d)", fit, fit * C);
      }
      std::printf("\n");
    }
    return 0;
  }
  const Shape shapes[] = {{"smollm2-135m", 576, 576, 192, 1536, 30, 3, 64, 512},
                          {"qwen3-0.6b", 1024, 2048, 1024, 3072, 28, 8, 128, 512},
                          {"llama-3.2-1b", 2048, 2048, 512, 8192, 16, 8, 64, 512}};
  struct Design {
    int tp, P, C, direct;
    int heads;  // 1: levels 0-2 on the largest divisor of the KV heads <= P clusters (whole heads)
  };
  // (The H200 keeps 7 clusters of 16, 15 of 8 or 30 of 4 resident with this kernel's shared
  // memory: GPCs whose SMs are not a multiple of the cluster leave some idle.)
  const Design designs[] = {{0, 0, 0, 0, 0},  {1, 7, 16, 0, 0}, {1, 7, 16, 0, 1},
                            {1, 15, 8, 0, 0}, {1, 15, 8, 0, 1}, {1, 30, 4, 0, 1}};
  std::printf("tp_layer: %d SMs; ring %d x %d KiB a CTA; median of 5 launches\n", sms, kStages,
              kChunk / 1024);
  std::printf("%-13s %-12s %5s | %9s %9s %10s\n", "shape", "design", "CTAs", "MB/layer",
              "us/layer", "GB/s");
  std::vector<uint64_t> host(2 * sms);
  for (int si = 0; si < 3; ++si)
    for (const Design& d : designs) {
      const Shape& m = shapes[si];
      if (only_shape >= 0 && si != only_shape) continue;
      const int G = d.tp ? d.P * d.C : 128;
      if (G > sms) continue;
      int Pa = d.P;
      if (d.heads) {
        Pa = 1;
        for (int q = 1; q <= d.P; ++q)
          if (m.kv_heads % q == 0) Pa = q;
      }
      Args a = plan(m, d.tp, d.P, d.C, G, d.direct, Pa);
      bool fits = true;
      for (const Level& lv : a.lv) fits = fits && lv.n_out <= kMaxOut;
      if (!fits) {
        std::printf("%-13s tp %2d x %-5d %5d | (a level's outputs exceed %d a CTA)\n", m.name,
                    d.P, d.C, G, kMaxOut);
        continue;
      }
      int64_t layer_bytes = 0, total_bytes = 0;  // a CTA's most, the whole layer's
      for (int j = 0; j < kLevels; ++j) {
        layer_bytes += a.lv[j].bytes;
        total_bytes += a.lv[j].bytes * (d.tp && j <= 2 ? Pa * d.C : G);
      }
      a.layer_stride = int64_t(kBufferBytes / size_t(m.L)) / (G * kLevels * 16) * (G * kLevels * 16);
      a.buffer = buffer;
      a.gbuf = gbuf;
      a.counters = counters;
      a.abort_flag = abort_flag;
      a.out = out;
      if (layer_bytes + 16 * kLevels > a.layer_stride / G) {
        std::printf("%-13s (a CTA's layer exceeds its slice)\n", m.name);
        continue;
      }
      cudaLaunchAttribute attr;
      cudaLaunchConfig_t cfg =
          cluster_launch(attr, unsigned(d.tp ? d.C : 1), unsigned(G), kThreads, smem);
      char design[32];
      if (d.tp)
        std::snprintf(design, sizeof design, "tp %d x %d%s%s", d.P, d.C, d.direct ? " d" : "",
                      d.heads ? (" a" + std::to_string(Pa)).c_str() : "");
      else
        std::snprintf(design, sizeof design, "global");
      int fit = 0;
      if (cudaOccupancyMaxActiveClusters(&fit, tp_layer_kernel, &cfg) != cudaSuccess ||
          fit < (d.tp ? d.P : G)) {
        (void)cudaGetLastError();
        std::printf("%-13s %-12s %5d | only %d clusters resident\n", m.name, design, G, fit);
        continue;
      }
      std::vector<double> runs;
      bool timeout = false;
      for (int r = 0; r < 5 && !timeout; ++r) {
        int flag = 0;
        if (!ok(cudaMemset(counters, 0, sizeof(uint32_t) * n_counters), "cudaMemset") ||
            !ok(cudaMemcpy(abort_flag, &flag, sizeof(int), cudaMemcpyHostToDevice), "cudaMemcpy") ||
            !ok(cudaLaunchKernelEx(&cfg, tp_layer_kernel, a), "launch") ||
            !ok(cudaDeviceSynchronize(), "kernel") ||
            !ok(cudaMemcpy(&flag, abort_flag, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy") ||
            !ok(cudaMemcpy(host.data(), out, sizeof(uint64_t) * 2 * G, cudaMemcpyDeviceToHost),
                "cudaMemcpy"))
          return 1;
        if (flag) {
          timeout = true;
          break;
        }
        std::vector<double> per;
        for (int b = 0; b < G; ++b)
          per.push_back(double(host[2 * b + 1] - host[2 * b]) / 1000.0 / (m.L - 1));
        runs.push_back(median(per));
      }
      if (timeout) {
        std::printf("%-13s %-12s %5d | TIMEOUT\n", m.name, design, G);
        continue;
      }
      const double us = median(runs);
      std::printf("%-13s %-12s %5d | %9.2f %9.2f %10.0f\n", m.name, design, G,
                  double(total_bytes) / 1e6, us, double(total_bytes) / us / 1e3);
      std::fflush(stdout);
    }
  return 0;
}
