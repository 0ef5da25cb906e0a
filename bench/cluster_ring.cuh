// What the weight-stream micro-benchmarks share (bench/fence_stall.cu, bench/hop_protocol.cu,
// bench/cluster_stream.cu, bench/tp_layer.cu):
// the cluster PTX their paired modes use, a producer lane's ring of bulk copies, and rank 0's
// side of a ring that its cluster peer fills.
#pragma once

#include <cstdint>

#include "vm/cuda/weight_ring.cuh"  // the kernel's own mbarrier and bulk-copy wrappers

namespace amk::bench {

using namespace amk::cuda;

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %cluster_ctarank;" : "=r"(r));
  return r;
}
// `addr` (this CTA's shared window) in CTA `rank`'s shared memory, as a shared::cluster address.
__device__ __forceinline__ uint32_t peer_address(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ void st_cluster(uint32_t addr, uint32_t v) {
  asm volatile("st.relaxed.cluster.shared::cluster.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t cluster_size() {
  uint32_t n;
  asm volatile("mov.u32 %0, %cluster_nctarank;" : "=r"(n));
  return n;
}
// 16 bytes into a cluster CTA's shared memory (`addr` as mapa gives it), completing that many
// bytes of transaction count on its mbarrier `bar` (also a shared::cluster address).
__device__ __forceinline__ void st_async_v4(uint32_t addr, float4 v, uint32_t bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, "
      "[%5];" ::"r"(addr),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar)
      : "memory");
}
__device__ __forceinline__ uint32_t ld_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;"
               ::: "memory");
}

inline constexpr uint32_t kNotYet = 0xffffffffu;  // a peer's final count, until it stops

// A producer lane's ring: chunks of `Chunk` bytes from `slice` (n_chunks of them, cycled), with
// `inflight` outstanding, each stage's full barrier (bars + 8 s) armed here and the copy issued by
// `issue(stage, source)` (the lane's own bulk copy, or a request to a peer); until `stop`, then
// it drains. Returns the bytes that had landed at the stop.
template <int Chunk, int Stages, typename Issue>
__device__ uint64_t stream_ring(const uint8_t* slice, int64_t n_chunks, int inflight,
                                uint32_t bars, volatile int* stop, Issue&& issue) {
  uint32_t phase[Stages] = {};
  int64_t issued = 0, landed = 0, at_stop = -1;
  while (true) {
    const bool stopping = *stop != 0;
    if (stopping && at_stop < 0) at_stop = landed;
    while (!stopping && issued - landed < inflight) {
      const int s = int(issued % Stages);
      mbar_arrive_expect_tx(bars + 8u * s, Chunk);
      issue(s, slice + (issued % n_chunks) * Chunk);
      ++issued;
    }
    if (landed == issued) break;
    const int s = int(landed % Stages);
    while (!mbar_try_wait(bars + 8u * s, phase[s])) {
    }
    phase[s] ^= 1u;
    ++landed;
  }
  return uint64_t(at_stop < 0 ? landed : at_stop) * Chunk;
}

// Rank 0's lane when rank 1 fills its ring: waits for the chunks in order, re-arms each stage for
// its next phase before telling rank 1 (through `landed_in_peer`, rank 1's counter as a
// shared::cluster address) that it may refill it, until rank 1's final count (`final_issued`,
// written by rank 1) has landed. Returns the bytes that had landed at the stop.
template <int Chunk, int Stages>
__device__ uint64_t receive_peer_ring(uint32_t bars, volatile int* stop, uint32_t landed_in_peer,
                                      volatile uint32_t* final_issued) {
  uint32_t phase[Stages] = {};
  uint32_t landed = 0;
  int64_t at_stop = -1;
  while (true) {
    if (*stop != 0 && at_stop < 0) at_stop = landed;
    const uint32_t fin = *final_issued;
    if (fin != kNotYet && landed >= fin) break;
    const int s = int(landed % Stages);
    if (!mbar_try_wait(bars + 8u * s, phase[s])) continue;
    phase[s] ^= 1u;
    ++landed;
    mbar_arrive_expect_tx(bars + 8u * s, Chunk);
    st_cluster(landed_in_peer, landed);
  }
  return uint64_t(at_stop < 0 ? landed : at_stop) * Chunk;
}

}  // namespace amk::bench
