// What one dependency hop of the megakernel costs under the weight stream, by hand-off protocol
// (issue 9 point 4: "few round trips on the chain"). Every SM runs one CTA shaped like the
// megakernel's: 256 consumer threads and a producer warp whose lane 0 streams a slice of a 4 GiB
// buffer (L2 holds none of it) through a 4-stage ring of 32 KiB bulk copies, `inflight` of them
// outstanding, with the kernel's evict_first policy, for as long as the chain runs.
//
// The chain: kLevels all-join levels. At each level every CTA reads the whole previous level's
// vector (132 x 16 floats, every CTA's slice), sums it over the block (the x build and norm of a
// GEMV task) and writes its own 16 outputs (a tile's epilogue). Three hand-offs:
//   counter  what the megakernel does: stores, consumer barrier, red.release.gpu on the level's
//            counter; thread 0 of each reader polls it with ld.acquire.gpu, a barrier, then the
//            vector's loads (an L2 round trip each: store ack + release, poll, load).
//   tagged   each value travels with its level's tag in one 64-bit word (NCCL's LL protocol):
//            stores and nothing else; every reader thread loads its words and re-loads the ones
//            whose tag is stale until the block agrees all are current (the poll is the load).
//   hybrid   tagged words, plus a relaxed counter increment after them (no fence): thread 0
//            polls the counter (one word, cheap while waiting), then the tagged loads validate.
//   counter, no fence   the counter protocol with a relaxed increment: NOT a protocol (nothing
//            orders the stores before the count; a reader may take stale floats and nothing
//            here checks), only the measure of what the release itself costs.
//   bulk store, relaxed / release count   the outputs written to shared memory, fenced to the
//            async proxy, then one bulk copy to global memory (the TMA's store), its completion
//            waited for (cp.async.bulk.wait_group 0), then the count: relaxed (what the
//            megakernel's GEMV tiles did until 2a7a402; NOT a protocol either: the wait makes
//            the writes visible to the storing thread only, and fresh qwen3 VMs read stale
//            activations through it, docs/CUDA_VM.md) or the proxy fence and a release (what
//            they did in 2a7a402, until the thirty-eighth session measured plain stores and the
//            counter protocol faster and removed the stage).
//   paired   clusters of two SMs (bench/fence_stall.cu: a release waits for the copies its SM
//            issued, not those landing in it). Rank 1's producer issues both rings' copies (its
//            own and rank 0's), so rank 0 issues none and its release stays cheap. Rank 0 stores
//            and releases as `counter`; rank 1 sends its outputs to rank 0's shared memory with
//            st.async (completing on an mbarrier there) and never fences: a forwarding warp of
//            rank 0 stores them and releases the count for it.
//   paired, copies by request   the same hand-off, shaped as the megakernel would run it: rank
//            0's producer lane keeps its ring's logic (arms its full barriers, bounds its bytes in
//            flight) but posts each copy as a 16-byte request into rank 1's shared memory
//            (st.async), where lane 1 of rank 1's producer warp issues it; rank 0's forwarding
//            agent is lane 1 of its producer warp (beside the requesting lane 0), not a warp; and
//            a forward is a 16-byte header (its size) on one mbarrier, then its payload on a
//            second that the agent arms once it has read the size (a tile's outputs vary).
// Printed per protocol and bytes in flight: µs per hop (median CTA), and the stream's GB/s over
// the chain (what the polling costs the weight stream). bench/RESULTS.md, twenty-second session:
// on the H100 the release costs 1.7 µs a hop at 32 KiB in flight per SM and 4 µs at 64 KiB, far
// more than its own stores' round trip (it waits for the SM's weight copies in flight too).
// Twenty-third: the bulk store with a relaxed count carries a hop in 1.55 µs at 32 KiB (the
// no-fence count 1.46), with a release count 3.2 (the fence waits for the copies whatever the
// stores were).
//
// Build: CMake target amk_bench_hop_protocol (CUDA builds with AMK_BUILD_BENCH). Run it on the
// GPU machine with no arguments.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cluster_ring.cuh"
#include "cuda_bench.h"

namespace {

using namespace amk::bench;

// Past the consumers: the producer warp, then the paired protocol's forwarding warp.
constexpr int kConsumers = 256, kThreads = kConsumers + 64, kChunk = 32 * 1024, kStages = 4;
constexpr int kSlice = 16, kLevels = 200;
constexpr size_t kStreamBytes = size_t(4) << 30;
constexpr int kMaxSms = 160, kVec = kMaxSms * kSlice;
constexpr int kPerThread = (kVec + kConsumers - 1) / kConsumers;

// kCounterNoFence is not a protocol (nothing makes the stores visible before the count): it
// measures what the release alone costs.
// kBulkRelaxed and kBulkRelease store a tile's outputs with one bulk copy from shared memory
// (the TMA's store), wait for its completion (cp.async.bulk.wait_group 0: the writes performed),
// then count, relaxed or release.
enum Protocol : int {
  kCounter = 0,
  kTagged = 1,
  kHybrid = 2,
  kCounterNoFence = 3,
  kBulkRelaxed = 4,
  kBulkRelease = 5,
  kPaired = 6,
  kPairedRequests = 7
};
__host__ __device__ constexpr bool is_paired(int p) { return p == kPaired || p == kPairedRequests; }
constexpr int kRequestSlots = 8;  // > 2 x the most chunks in flight: a slot is never reused early
__host__ __device__ constexpr bool is_counter(int p) {
  return p == kCounter || p == kCounterNoFence || p == kBulkRelaxed || p == kBulkRelease ||
         is_paired(p);
}

// The kernel's own global_ns, consumer_sync / consumer_any (named barrier 1), load_acquire_gpu,
// block_sum and fence_proxy_async_shared come with weight_ring.cuh; the relaxed accesses and the
// bulk store below (the kernel no longer has one) are this file's.
__device__ __forceinline__ void bar_consumers() { consumer_sync(kConsumers); }
// One bulk copy of `bytes` from shared memory to global memory (the TMA's store), waited for
// until complete: its writes performed and visible to this thread. The caller fenced the shared
// memory it wrote to the async proxy first (fence_proxy_async_shared, then a barrier).
__device__ __forceinline__ void bulk_store_s2g(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                   __cvta_generic_to_global(dst)),
               "r"(smem_address(src)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
__device__ __forceinline__ uint32_t ld_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t ld_relaxed64(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed64(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// 16 bytes into another CTA's shared memory, completing 16 bytes of transaction count on its
// mbarrier `bar` (both shared::cluster addresses): no fence, nothing waited for here.
__device__ __forceinline__ void st_async16(uint32_t addr, float4 v, uint32_t bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::
          "r"(addr),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar)
      : "memory");
}

// The paired protocol's shared state, in each CTA's static shared memory.
struct Pairing {
  float fwd[kSlice];           // rank 0: rank 1's outputs of the level in flight
  uint64_t fwd_bar;            // rank 0: completes when they have all arrived
  volatile uint32_t landed;    // rank 1: chunks of rank 0's ring landed (rank 0 writes it)
  volatile uint32_t final_issued;  // rank 0: rank 1's chunks for it in all (rank 1 writes it)
  // Copies by request (rank 1's): request k in slot k % kRequestSlots, {source low, source high,
  // stage, bytes} (bytes 0: the last), completing 16 bytes on its barrier.
  uint4 request[kRequestSlots];
  uint64_t request_bar[kRequestSlots];
  // Copies by request (rank 0's): a forward's header {level, floats, 0, 0} on fwd_bar, then its
  // payload (in fwd) on payload_bar, armed by the agent for the header's size.
  uint4 fwd_header;
  uint64_t payload_bar;
};

struct Args {
  const uint8_t* stream;
  int64_t stream_per_sm;
  int inflight;  // 0: no stream
  int protocol;
  uint32_t tag_base;  // distinct per launch: the tagged vectors are never cleared
  float* fvec;        // counter: kLevels vectors of kVec floats
  uint64_t* tvec;     // tagged / hybrid: kLevels vectors of kVec words
  uint32_t* counters; // kLevels, zeroed before each launch
  uint64_t* out;      // per CTA: t0, t1, streamed bytes (until the chain ended), stream start
};

// Lane 0 of the producer warp: stream until the consumers raise `stop`, then drain.
__device__ void produce(const Args& a, uint32_t stages, uint32_t bars, volatile int* stop,
                        uint64_t* streamed) {
  const uint64_t policy = evict_first_policy();
  *streamed = stream_ring<kChunk, kStages>(
      a.stream + int64_t(blockIdx.x) * a.stream_per_sm, a.stream_per_sm / kChunk, a.inflight,
      bars, stop, [&](int s, const uint8_t* src) {
        bulk_copy_g2s(stages + uint32_t(s) * kChunk, src, kChunk, bars + 8u * s, policy);
      });
}

// Paired, rank 1: both rings' copies, `inflight` outstanding in each: its own (its mbarriers,
// waited for here) and rank 0's (rank 0's mbarriers; rank 0 counts them landed into
// `pair.landed`). At the stop it tells rank 0 how many it sent and drains both.
__device__ void produce_paired_issuer(const Args& a, uint32_t stages, uint32_t bars,
                                      volatile int* stop, uint64_t* streamed, Pairing& pair) {
  const uint8_t* slice = a.stream + int64_t(blockIdx.x) * a.stream_per_sm;
  const int64_t n = a.stream_per_sm / kChunk;
  const uint64_t policy = evict_first_policy();
  const uint32_t peer_stages = peer_address(stages, 0u), peer_bars = peer_address(bars, 0u);
  const uint8_t* peer_slice = slice - a.stream_per_sm;  // rank 0's slice (blockIdx.x - 1)
  uint32_t phase[kStages] = {0u, 0u, 0u, 0u};
  int64_t issued = 0, landed = 0, at_stop = -1;
  uint32_t peer_issued = 0;
  while (true) {
    const bool stopping = *stop != 0;
    if (stopping && at_stop < 0) at_stop = landed;
    if (!stopping) {
      while (issued - landed < a.inflight) {
        const int s = int(issued % kStages);
        mbar_arrive_expect_tx(bars + 8u * s, kChunk);
        bulk_copy_g2s(stages + uint32_t(s) * kChunk, slice + (issued % n) * kChunk, kChunk,
                      bars + 8u * s, policy);
        ++issued;
      }
      while (peer_issued - pair.landed < uint32_t(a.inflight)) {
        const int s = int(peer_issued % kStages);
        bulk_copy_g2s(peer_stages + uint32_t(s) * kChunk, peer_slice + (peer_issued % n) * kChunk,
                      kChunk, peer_bars + 8u * s, policy);
        ++peer_issued;
      }
    }
    if (landed == issued && stopping) break;
    if (landed < issued) {  // not blocking: rank 0's ring needs refills meanwhile
      const int s = int(landed % kStages);
      if (mbar_try_wait(bars + 8u * s, phase[s])) {
        phase[s] ^= 1u;
        ++landed;
      }
    }
  }
  st_cluster(peer_address(smem_address(const_cast<uint32_t*>(&pair.final_issued)), 0u),
             peer_issued);
  while (pair.landed < peer_issued) {
  }
  *streamed = uint64_t(at_stop < 0 ? landed : at_stop) * kChunk;
}

// Paired, rank 0's forwarding warp: for each level, rank 1's 16 outputs as they arrive in
// `pair.fwd`, stored to rank 1's slice of the vector and counted with a release (rank 0 has
// issued no copy, so its fence is short). The barrier is re-armed first: rank 1 can send the
// next level only after this count.
__device__ void forward_levels(const Args& a, Pairing& pair) {
  const int lane = int(threadIdx.x) & 31;
  const uint32_t bar = smem_address(&pair.fwd_bar);
  uint32_t phase = 0;
  for (int l = 0; l < kLevels; ++l) {
    while (!mbar_try_wait(bar, phase)) {
    }
    phase ^= 1u;
    const float v = lane < kSlice ? pair.fwd[lane] : 0.0f;
    __syncwarp();
    if (lane == 0) mbar_arrive_expect_tx(bar, kSlice * 4);
    if (lane < kSlice) a.fvec[int64_t(l) * kVec + int64_t(blockIdx.x + 1) * kSlice + lane] = v;
    __syncwarp();
    if (lane == 0)
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(a.counters + l) : "memory");
  }
}

// Copies by request, rank 0's lane 0: its ring as produce() runs it, each copy posted to rank 1.
__device__ void produce_requester(const Args& a, uint32_t bars, volatile int* stop,
                                  uint64_t* streamed, Pairing& pair) {
  const uint32_t slots = peer_address(smem_address(&pair.request[0]), 1u);
  const uint32_t slot_bars = peer_address(smem_address(&pair.request_bar[0]), 1u);
  uint32_t posted = 0;
  const auto post = [&](int stage, const uint8_t* src, uint32_t bytes) {
    const uint32_t k = posted++ % uint32_t(kRequestSlots);
    const uint64_t g = __cvta_generic_to_global(src);
    asm volatile(
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, "
        "[%5];" ::"r"(slots + 16u * k),
        "r"(uint32_t(g)), "r"(uint32_t(g >> 32)), "r"(uint32_t(stage)), "r"(bytes),
        "r"(slot_bars + 8u * k)
        : "memory");
  };
  *streamed = stream_ring<kChunk, kStages>(
      a.stream + int64_t(blockIdx.x) * a.stream_per_sm, a.stream_per_sm / kChunk, a.inflight,
      bars, stop, [&](int s, const uint8_t* src) { post(s, src, kChunk); });
  post(0, nullptr, 0u);  // the server stops
}

// Copies by request, rank 1's lane 1: issues rank 0's requests in order into rank 0's ring, on
// rank 0's full barriers, until the last (bytes 0). Each slot is re-armed before its copy.
__device__ void serve_requests(uint32_t stages, uint32_t bars, Pairing& pair) {
  const uint64_t policy = evict_first_policy();
  const uint32_t peer_stages = peer_address(stages, 0u), peer_bars = peer_address(bars, 0u);
  for (uint32_t k = 0;; ++k) {
    const int slot = int(k % kRequestSlots);
    const uint32_t bar = smem_address(&pair.request_bar[slot]);
    while (!mbar_try_wait(bar, (k / kRequestSlots) & 1u)) {
    }
    const uint4 r = pair.request[slot];
    mbar_arrive_expect_tx(bar, 16);
    if (r.w == 0u) return;
    const void* src = reinterpret_cast<const void*>(uint64_t(r.x) | (uint64_t(r.y) << 32));
    bulk_copy_g2s(peer_stages + r.z * uint32_t(kChunk), src, r.w, peer_bars + 8u * r.z, policy);
  }
}

// Copies by request, rank 0's lane 1: forward_levels by one lane, a header then its payload.
// The payload may complete on its barrier before the agent arms it (the transaction count goes
// below zero meanwhile); the phase cannot end before the agent's arrival.
__device__ void forward_levels_lane(const Args& a, Pairing& pair) {
  const uint32_t bar = smem_address(&pair.fwd_bar), pay = smem_address(&pair.payload_bar);
  uint32_t phase = 0;
  for (int l = 0; l < kLevels; ++l) {
    while (!mbar_try_wait(bar, phase)) {
    }
    const uint4 header = pair.fwd_header;
    mbar_arrive_expect_tx(bar, 16);
    mbar_arrive_expect_tx(pay, 4u * header.y);
    while (!mbar_try_wait(pay, phase)) {
    }
    phase ^= 1u;
    float4 v[kSlice / 4];
#pragma unroll
    for (int k = 0; k < kSlice / 4; ++k) v[k] = reinterpret_cast<const float4*>(pair.fwd)[k];
    float4* dst =
        reinterpret_cast<float4*>(a.fvec + int64_t(l) * kVec + int64_t(blockIdx.x + 1) * kSlice);
#pragma unroll
    for (int k = 0; k < kSlice / 4; ++k) dst[k] = v[k];
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(a.counters + l) : "memory");
  }
}

// One level's read of vector `l` (all n values), summed over the block.
__device__ float read_level(const Args& a, int l, int n, float* red) {
  const int tid = int(threadIdx.x);
  float s = 0.0f;
  if (is_counter(a.protocol)) {
    if (tid == 0) {
      const uint32_t target = uint32_t(gridDim.x);
      while (load_acquire_gpu(a.counters + l) < target) {
      }
    }
    bar_consumers();
    const float* v = a.fvec + int64_t(l) * kVec;
    float x[kPerThread];
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int i = tid + k * kConsumers;
      x[k] = i < n ? __ldcg(v + i) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) s += x[k];
  } else {
    if (a.protocol == kHybrid && tid == 0) {
      const uint32_t target = uint32_t(gridDim.x);
      while (ld_relaxed(a.counters + l) < target) {
      }
    }
    if (a.protocol == kHybrid) bar_consumers();
    const uint64_t* v = a.tvec + int64_t(l) * kVec;
    const uint32_t tag = a.tag_base + uint32_t(l);
    float x[kPerThread];
    uint32_t pending = 0;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      x[k] = 0.0f;
      if (tid + k * kConsumers < n) pending |= 1u << k;
    }
    while (true) {
      uint64_t w[kPerThread];
#pragma unroll
      for (int k = 0; k < kPerThread; ++k)
        if (pending & (1u << k)) w[k] = ld_relaxed64(v + tid + k * kConsumers);
#pragma unroll
      for (int k = 0; k < kPerThread; ++k)
        if ((pending & (1u << k)) && uint32_t(w[k] >> 32) == tag) {
          x[k] = __uint_as_float(uint32_t(w[k]));
          pending &= ~(1u << k);
        }
      if (!consumer_any(pending != 0, kConsumers)) break;
    }
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) s += x[k];
  }
  return block_sum(s, red, tid, kConsumers);
}

__device__ void write_level(const Args& a, int l, float value, float* staged, Pairing& pair) {
  const int tid = int(threadIdx.x);
  const int i = int(blockIdx.x) * kSlice + tid;
  if (is_paired(a.protocol) && cluster_rank() == 1) {
    // Four threads, four floats each, into rank 0's forwarding buffer: no fence, no count.
    // By request: the header first (its own barrier), the payload on the second.
    const bool requests = a.protocol == kPairedRequests;
    if (requests && tid == 0)
      asm volatile(
          "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, "
          "[%5];" ::"r"(peer_address(smem_address(&pair.fwd_header), 0u)),
          "r"(uint32_t(l)), "r"(uint32_t(kSlice)), "r"(0u), "r"(0u),
          "r"(peer_address(smem_address(&pair.fwd_bar), 0u))
          : "memory");
    if (tid < kSlice / 4) {
      const float b = value + float(4 * tid);
      st_async16(peer_address(smem_address(&pair.fwd[4 * tid]), 0u),
                 make_float4(b, b + 1.0f, b + 2.0f, b + 3.0f),
                 peer_address(smem_address(requests ? &pair.payload_bar : &pair.fwd_bar), 0u));
    }
    return;
  }
  if (a.protocol == kBulkRelaxed || a.protocol == kBulkRelease) {
    if (tid < kSlice) staged[tid] = value + float(tid);
    fence_proxy_async_shared();  // the staged outputs, visible to the bulk copy
    bar_consumers();
    if (tid == 0) {
      bulk_store_s2g(a.fvec + int64_t(l) * kVec + int64_t(blockIdx.x) * kSlice, staged,
                     kSlice * 4);
      if (a.protocol == kBulkRelaxed)
        asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(a.counters + l) : "memory");
      else
        asm volatile(
            "fence.proxy.async.global;\n\t"
            "red.release.gpu.global.add.u32 [%0], 1;" ::"l"(a.counters + l)
            : "memory");
    }
  } else if (a.protocol == kCounter || a.protocol == kCounterNoFence || is_paired(a.protocol)) {
    if (tid < kSlice) a.fvec[int64_t(l) * kVec + i] = value + float(tid);
    bar_consumers();
    if (tid == 0 && (a.protocol == kCounter || is_paired(a.protocol)))
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(a.counters + l) : "memory");
    if (tid == 0 && a.protocol == kCounterNoFence)
      asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(a.counters + l) : "memory");
  } else {
    if (tid < kSlice)
      st_relaxed64(a.tvec + int64_t(l) * kVec + i,
                   (uint64_t(a.tag_base + uint32_t(l)) << 32) | __float_as_uint(value + float(tid)));
    if (a.protocol == kHybrid) {
      bar_consumers();
      if (tid == 0)
        asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(a.counters + l) : "memory");
    }
  }
}

__global__ void __launch_bounds__(kThreads) hop_chain(Args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[kStages];
  __shared__ float red[32];
  __shared__ __align__(128) float staged[kSlice];
  __shared__ __align__(16) Pairing pair;
  __shared__ volatile int stop;
  __shared__ uint64_t streamed, stream_t0;
  const int tid = int(threadIdx.x);
  const bool paired = is_paired(a.protocol);  // launched in clusters of two
  const bool requests = a.protocol == kPairedRequests;
  const uint32_t rank = paired ? cluster_rank() : 0u;
  if (tid == 0) {
    stop = 0;
    streamed = 0;
    pair.landed = 0;
    pair.final_issued = kNotYet;
    for (int s = 0; s < kStages; ++s) mbar_init(smem_address(&bars[s]), 1u);
    mbar_init(smem_address(&pair.fwd_bar), 1u);
    mbar_init(smem_address(&pair.payload_bar), 1u);
    for (int k = 0; k < kRequestSlots; ++k) mbar_init(smem_address(&pair.request_bar[k]), 1u);
    mbar_init_fence();
    // Barriers another CTA completes on, armed for their first phase before it may: rank 0's
    // forwarding barrier, its ring's (paired: rank 1 issues freely; by request, rank 0 arms its
    // own before each request), rank 1's request slots.
    if (paired && rank == 0) {
      if (!requests)
        for (int s = 0; s < kStages; ++s) mbar_arrive_expect_tx(smem_address(&bars[s]), kChunk);
      mbar_arrive_expect_tx(smem_address(&pair.fwd_bar), requests ? 16 : kSlice * 4);
    }
    if (requests && rank == 1)
      for (int k = 0; k < kRequestSlots; ++k)
        mbar_arrive_expect_tx(smem_address(&pair.request_bar[k]), 16);
  }
  __syncthreads();
  if (paired) cluster_sync();
  if (tid >= kConsumers) {
    if (tid == kConsumers) {
      stream_t0 = global_ns();
      const uint32_t stages = smem_address(smem), b = smem_address(&bars[0]);
      if (a.inflight > 0 && (!paired || (requests && rank == 1)))
        produce(a, stages, b, &stop, &streamed);
      if (a.inflight > 0 && requests && rank == 0)
        produce_requester(a, b, &stop, &streamed, pair);
      if (a.inflight > 0 && a.protocol == kPaired && rank == 1)
        produce_paired_issuer(a, stages, b, &stop, &streamed, pair);
      if (a.inflight > 0 && a.protocol == kPaired && rank == 0)
        streamed = receive_peer_ring<kChunk, kStages>(
            b, &stop, peer_address(smem_address(const_cast<uint32_t*>(&pair.landed)), 1u),
            &pair.final_issued);
    }
    if (tid == kConsumers + 1 && requests && rank == 0) forward_levels_lane(a, pair);
    if (tid == kConsumers + 1 && requests && rank == 1 && a.inflight > 0)
      serve_requests(smem_address(smem), smem_address(&bars[0]), pair);
    if (tid >= kConsumers + 32 && a.protocol == kPaired && rank == 0) forward_levels(a, pair);
    __syncwarp();
    asm volatile("bar.sync 2, %0;" ::"r"(kThreads) : "memory");  // drained: the CTA may exit
  } else {
    const int n = int(gridDim.x) * kSlice;
    // Let the stream reach its steady state before the chain starts.
    const uint64_t warm = global_ns();
    while (global_ns() - warm < 20000) {
    }
    bar_consumers();
    const uint64_t t0 = global_ns();
    write_level(a, 0, float(blockIdx.x), staged, pair);
    for (int l = 1; l < kLevels; ++l) {
      const float s = read_level(a, l - 1, n, red);
      write_level(a, l, s * 1e-6f, staged, pair);
    }
    (void)read_level(a, kLevels - 1, n, red);
    const uint64_t t1 = global_ns();
    if (tid == 0) stop = 1;
    asm volatile("bar.sync 2, %0;" ::"r"(kThreads) : "memory");  // the producer has drained
    if (tid == 0) {
      a.out[4 * blockIdx.x] = t0;
      a.out[4 * blockIdx.x + 1] = t1;
      a.out[4 * blockIdx.x + 2] = streamed;
      a.out[4 * blockIdx.x + 3] = stream_t0;
    }
  }
  if (paired) cluster_sync();  // no CTA leaves while its peer may still write its shared memory
}

bool ok(cudaError_t e, const char* what) { return amk::bench::cuda_ok("hop_protocol", e, what); }

}  // namespace

int main(int argc, char** argv) {
  // Optional: the protocols to run, as their numbers (kCounter 0 .. kPairedRequests 7), e.g. "0,7".
  std::vector<int> only;
  if (argc > 1)
    for (const char* p = argv[1]; *p;) {
      only.push_back(int(std::strtol(p, const_cast<char**>(&p), 10)));
      if (*p == ',') ++p;
      else if (*p) return std::fprintf(stderr, "hop_protocol: usage: %s [N,N,...]\n", argv[0]), 2;
    }
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  if (sms > kMaxSms) {
    std::fprintf(stderr, "hop_protocol: %d SMs, built for at most %d\n", sms, kMaxSms);
    return 1;
  }
  uint8_t* stream = nullptr;
  float* fvec = nullptr;
  uint64_t* tvec = nullptr;
  uint32_t* counters = nullptr;
  uint64_t* out = nullptr;
  if (!ok(cudaMalloc(&stream, kStreamBytes), "cudaMalloc") ||
      !ok(cudaMalloc(&fvec, sizeof(float) * kLevels * kVec), "cudaMalloc") ||
      !ok(cudaMalloc(&tvec, sizeof(uint64_t) * kLevels * kVec), "cudaMalloc") ||
      !ok(cudaMalloc(&counters, sizeof(uint32_t) * kLevels), "cudaMalloc") ||
      !ok(cudaMalloc(&out, sizeof(uint64_t) * 4 * sms), "cudaMalloc") ||
      !ok(cudaMemset(stream, 1, kStreamBytes), "cudaMemset") ||
      !ok(cudaMemset(tvec, 0, sizeof(uint64_t) * kLevels * kVec), "cudaMemset"))
    return 1;
  const int smem = kStages * kChunk;
  if (!ok(cudaFuncSetAttribute(hop_chain, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
          "cudaFuncSetAttribute"))
    return 1;
  const char* names[] = {"counter (release/acquire)", "tagged words", "hybrid (relaxed counter)",
                         "counter, no fence (unsafe)", "bulk store, relaxed count",
                         "bulk store, release count", "paired (clusters of 2)",
                         "paired, copies by request"};
  // Paired runs in clusters of two and its chain joins every CTA, so every cluster must be
  // resident at once.
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = 2;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t paired_cfg{};
  paired_cfg.gridDim = dim3(sms);
  paired_cfg.blockDim = dim3(kThreads);
  paired_cfg.dynamicSmemBytes = smem;
  paired_cfg.attrs = &cluster;
  paired_cfg.numAttrs = 1;
  int clusters = 0;
  const bool can_pair =
      sms % 2 == 0 &&
      cudaOccupancyMaxActiveClusters(&clusters, hop_chain, &paired_cfg) == cudaSuccess &&
      clusters >= sms / 2;
  if (!can_pair)
    std::printf("(paired skipped: %d SMs, %d clusters of two resident at once)\n", sms, clusters);
  std::printf("%-26s %9s %10s %10s %10s\n", "protocol", "in flight", "us/hop", "p90 us/hop",
              "stream GB/s");
  uint32_t tag_base = 1;
  std::vector<uint64_t> host(4 * sms);
  for (int inflight : {0, 1, 2, 4}) {
    for (int protocol :
         {kCounter, kTagged, kHybrid, kCounterNoFence, kBulkRelaxed, kBulkRelease, kPaired,
          kPairedRequests}) {
      if (is_paired(protocol) && !can_pair) continue;
      if (!only.empty() && std::find(only.begin(), only.end(), protocol) == only.end()) continue;
      std::vector<double> hops, p90s, gbs;
      for (int rep = 0; rep < 5; ++rep) {
        Args a{stream, int64_t(kStreamBytes / size_t(sms)) / kChunk * kChunk, inflight, protocol,
               tag_base, fvec, tvec, counters, out};
        tag_base += kLevels;
        if (!ok(cudaMemset(counters, 0, sizeof(uint32_t) * kLevels), "cudaMemset") ||
            !ok(cudaMemset(out, 0, sizeof(uint64_t) * 4 * sms), "cudaMemset"))
          return 1;
        if (is_paired(protocol)) {
          if (!ok(cudaLaunchKernelEx(&paired_cfg, hop_chain, a), "launch")) return 1;
        } else {
          hop_chain<<<sms, kThreads, smem>>>(a);
        }
        if (!ok(cudaDeviceSynchronize(), "kernel") ||
            !ok(cudaMemcpy(host.data(), out, sizeof(uint64_t) * 4 * sms, cudaMemcpyDeviceToHost),
                "cudaMemcpy"))
          return 1;
        std::vector<double> per;
        uint64_t first = ~0ull, last = 0, bytes = 0;
        for (int b = 0; b < sms; ++b) {
          per.push_back(double(host[4 * b + 1] - host[4 * b]) / 1e3 / kLevels);
          first = std::min(first, host[4 * b + 3]);
          last = std::max(last, host[4 * b + 1]);
          bytes += host[4 * b + 2];
        }
        hops.push_back(amk::bench::median(per));  // sorts `per`
        p90s.push_back(per[per.size() * 9 / 10]);
        gbs.push_back(double(bytes) / double(last - first));  // bytes per ns = GB/s
      }
      std::printf("%-26s %6d KiB %10.3f %10.3f %10.0f\n", names[protocol],
                  inflight * kChunk / 1024, amk::bench::median(hops), amk::bench::median(p90s),
                  amk::bench::median(gbs));
    }
  }
  return 0;
}
