// The shared-memory layout of one megakernel CTA, shared by the host planner (marshal.cpp) and
// the kernel (megakernel.cu). Plain C++.
#pragma once

namespace amk::cuda {

// Shared memory the kernel declares statically (two staged task records, abi.h
// amk_task_record_t, 1392 bytes each); the planner leaves it out of the dynamic budget.
inline constexpr int kStaticSmemReserve = 3072;

// Dynamic shared memory of one CTA:
//   [0, scratch_bytes)                          op scratch (OpContext::scratch)
//   [scratch_bytes, + ring_stages*chunk_bytes)  the weight ring (WeightRing stages)
//   then the ring's mbarriers (2 per stage) and the producer/consumer bookkeeping
// The loader fills this from the program (largest K of a GEMV tile, the largest op scratch) and
// the target's opt-in limit; megakernel_smem_bytes() gives the total to launch with.
struct MegakernelLayout {
  int consumer_threads = 256;  // ScheduleConfig.threads_per_block; + the producer warp(group)
  int scratch_bytes = 0;       // a multiple of kRingStageAlignment (below)
  int chunk_bytes = 32768;     // one ring stage: a multiple of kRingStageAlignment
  int ring_stages = 4;         // >= 2
  // Bulk copies the producer keeps in flight (issued, not yet landed), 1..ring_stages
  // (ScheduleConfig.stream_bytes_in_flight / chunk_bytes). The ring may hold more landed
  // stages than this: the bound is on requests queued in the memory system, not on capacity.
  int inflight_chunks = 4;
  // The same bound while the producer runs ahead of the consumers (a GEMV tile they have not
  // started): ScheduleConfig.stream_prefetch_bytes_in_flight / chunk_bytes, 1..ring_stages.
  int prefetch_chunks = 4;
};

// The ring's bookkeeping (WeightRing) after its mbarriers, a full and an empty one a stage.
inline constexpr int kRingStateBytes = 64;
inline constexpr int kMbarrierBytesPerStage = 16;
// Every ring stage starts 128-byte aligned in shared memory: the scratch before the ring and the
// stage size are multiples of it. A warp's strip reads 32 lanes x 16 contiguous bytes of a
// stage: 4 shared-memory wavefronts of 128 bytes where aligned, 5 where not. Measured on the
// H200 (bench/RESULTS.md, thirty-eighth session) against scratch rounded to 16: qwen3-0.6b
// (its ring had started at 48 mod 128) -7.4 %, smollm2-135m (64) -1.0 %, llama-3.2-1b (0) 0.0 %.
inline constexpr int kRingStageAlignment = 128;
// Total dynamic shared memory the layout needs: scratch + ring + 2 mbarriers per stage + the
// ring's bookkeeping, rounded up to 128. Defined inline so host planner and kernel agree.
inline int megakernel_smem_bytes(const MegakernelLayout& l) {
  const int raw = l.scratch_bytes + l.ring_stages * (l.chunk_bytes + kMbarrierBytesPerStage) +
                  kRingStateBytes;
  return (raw + 127) / 128 * 128;
}

}  // namespace amk::cuda
