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
  int scratch_bytes = 0;       // multiple of 16
  int chunk_bytes = 32768;     // one ring stage: a multiple of 16
  int ring_stages = 4;         // >= 2
  // Bulk copies the producer keeps in flight (issued, not yet landed), 1..ring_stages
  // (ScheduleConfig.stream_bytes_in_flight / chunk_bytes). The ring may hold more landed
  // stages than this: the bound is on requests queued in the memory system, not on capacity.
  int inflight_chunks = 4;
  // The same bound while the producer runs ahead of the consumers (a GEMV tile they have not
  // started): ScheduleConfig.stream_prefetch_bytes_in_flight / chunk_bytes, 1..ring_stages.
  int prefetch_chunks = 4;
};

// The ring's bookkeeping (WeightRing) after its mbarriers, then the output stage (sync.cuh
// OutStage): a GEMV tile's outputs gathered in shared memory and written by one bulk copy, whose
// completion the task's signal waits for instead of a gpu-scope release. 16 bytes of header
// (destination, bytes) and the outputs; a tile whose outputs do not fit stores them directly.
inline constexpr int kRingStateBytes = 64;
inline constexpr int kOutStageHeaderBytes = 16;
inline constexpr int kOutStageBytes = 8192;
// Whether a task's outputs, `bytes` (>= 1) at byte `offset` (an address, or an offset into a
// 16-byte aligned buffer), may leave through the output stage: whole 16-byte words at a 16-byte
// offset that the stage holds. The kernel decides by it at run time (ops/gemv.cuh finish_rows);
// the derived default's tiles are chosen to pass it. A template, so the kernel tests its own
// 32-bit byte count: the instructions of the kernel measured in bench/RESULTS.md (aa475fd).
template <typename Offset, typename Bytes>
constexpr bool output_stage_fits(Offset offset, Bytes bytes) {
  return bytes <= Bytes(kOutStageBytes) && bytes % 16 == 0 && offset % 16 == 0;
}
// Total dynamic shared memory the layout needs: scratch + ring + 2 mbarriers per stage + the
// ring's bookkeeping + the output stage, rounded up to 128. Defined inline so host planner and
// kernel agree.
inline int megakernel_smem_bytes(const MegakernelLayout& l) {
  const int raw = l.scratch_bytes + l.ring_stages * l.chunk_bytes + l.ring_stages * 16 +
                  kRingStateBytes + kOutStageHeaderBytes + kOutStageBytes;
  return (raw + 127) / 128 * 128;
}

}  // namespace amk::cuda
