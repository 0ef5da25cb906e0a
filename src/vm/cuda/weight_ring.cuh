// The shared-memory weight ring (docs/CUDA_VM.md "Weight streaming").
//
// A GEMV tile reads rows [n_off, n_off + N_tile) of a row-major [N, K] weight: one contiguous
// byte range, read exactly once. The CTA's producer warp copies that range into `n_stages`
// stages of `chunk_bytes` with cp.async.bulk (the TMA's 1-D form: no descriptor, completes on an
// mbarrier by byte count), so the weights of the next tasks stream in while the consumers are
// still waiting on counters. Weights never depend on activations, so the producer never waits on
// a counter: only on free stages (the ring's size), on the pipelining depth, and on the abort
// flag.
//
// Protocol, per stage i: full[i] (1 arrival + the copy's bytes) and empty[i] (one arrival per
// consumer warp). Producer and consumers walk the SAME deterministic sequence of chunks (the
// CTA's queue, n_steps times, ring-eligible GEMV tiles only, each cut into whole-row chunks) and
// keep identical (stage, phase) cursors, so no index ever travels between them.
#pragma once

#include <cstdint>

#include "amk/abi.h"
#include "vm/cuda/device_common.cuh"
#include "vm/cuda/megakernel_layout.h"
#include "vm/cuda/primitives.cuh"
#include "vm/cuda/sync.cuh"

namespace amk::cuda {

// ---- PTX wrappers (mbarrier and the bulk copy; addresses in the shared window, smem_address) --

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Barrier inits must be visible to the async proxy (the bulk copies complete on them).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  fence_proxy_async_shared();
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// True once the phase with parity `parity` has completed (try_wait may suspend briefly itself).
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0u;
}
// 1-D bulk copy global -> shared, completing `bytes` of transaction count on `bar`. dst, src and
// bytes are multiples of 16. `policy`: an L2 cache policy (evict_first_policy() for weights).
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes,
                                              uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
      "[%1], %2, [%3], %4;" ::"r"(dst),
      "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}

// ---- the ring ---------------------------------------------------------------------------------

// Lives in the bookkeeping tail of the dynamic shared memory (MegakernelLayout: 64 bytes).
struct WeightRing {
  uint8_t* stage_base;         // generic pointer to stage 0 (consumers read through it)
  uint32_t stage_base_smem;    // the same in the shared window (bulk-copy destination)
  uint32_t barriers_smem;      // full[i] at + 8 i, empty[i] at + 8 (n_stages + i)
  int n_stages;                // 0: no ring (every tile is read from global memory)
  int chunk_bytes;             // bytes per stage, a multiple of 16
  int inflight_chunks;         // copies the producer keeps issued-but-not-landed, <= n_stages
  int prefetch_chunks;         //   the same while it runs ahead of the consumers
  int consumer_warps;          // arrivals that free a stage
  int consumer_progress;  // GEMV-family tasks the consumers have started (atomics only)
  int consumer_stage;          // the consumers' cursor, carried from one GEMV task to the next
  uint32_t consumer_phase;     //   (written by consumer thread 0 after a consumer barrier)
  // What the op scratch's activation vector x holds (ops/gemv.cuh): the GEMV-family op, its x
  // and fused-prologue operand buffers and the step. Consecutive tiles of one projection on a
  // CTA share x, so they skip rebuilding it. x_op = -1: scratch holds nothing reusable (any
  // other op may have overwritten it). Written by consumer thread 0 only.
  int x_op, x_in0, x_in1;
  uint32_t x_epoch;

  __device__ __forceinline__ uint32_t full_bar(int stage) const {
    return barriers_smem + 8u * uint32_t(stage);
  }
  __device__ __forceinline__ uint32_t empty_bar(int stage) const {
    return barriers_smem + 8u * uint32_t(n_stages + stage);
  }
};
static_assert(sizeof(WeightRing) <= kRingStateBytes, "WeightRing must fit its 64 bytes");

// Stage index and phase bit; both sides advance identically over the same chunk sequence.
struct RingCursor {
  int stage;
  uint32_t phase;
  __device__ __forceinline__ void advance(int n_stages) {
    if (++stage == n_stages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// Thread 0 of the CTA, before the kernel's one __syncthreads.
__device__ __forceinline__ void ring_init(WeightRing& r, uint8_t* stages, uint64_t* barriers,
                                          int n_stages, int chunk_bytes, int inflight_chunks,
                                          int prefetch_chunks, int consumer_warps) {
  r.stage_base = stages;
  r.stage_base_smem = smem_address(stages);
  r.barriers_smem = smem_address(barriers);
  r.n_stages = n_stages;
  r.chunk_bytes = chunk_bytes;
  r.inflight_chunks = inflight_chunks < 1 ? 1 : (inflight_chunks > n_stages ? n_stages : inflight_chunks);
  r.prefetch_chunks = prefetch_chunks < 1 ? 1 : (prefetch_chunks > n_stages ? n_stages : prefetch_chunks);
  r.consumer_warps = consumer_warps;
  r.consumer_progress = 0;
  r.x_op = -1;
  r.consumer_stage = 0;
  r.consumer_phase = 0;
  for (int i = 0; i < n_stages; ++i) {
    mbar_init(r.full_bar(i), 1u);  // the producer's arrive.expect_tx; the bytes do the rest
    mbar_init(r.empty_bar(i), uint32_t(consumer_warps));
  }
  mbar_init_fence();
}

__device__ __forceinline__ bool is_glu_gemv(int op) {
  return op == AMK_OP_GEMV_GLU_TILE || op == AMK_OP_RMSNORM_GEMV_GLU_TILE;
}
__device__ __forceinline__ bool is_gemv_family(int op) {
  return op == AMK_OP_GEMV_TILE || op == AMK_OP_RMSNORM_GEMV_TILE ||
         op == AMK_OP_SILU_MUL_GEMV_TILE || op == AMK_OP_GEMV_ADD_TILE ||
         op == AMK_OP_SILU_MUL_GEMV_ADD_TILE || op == AMK_OP_COMBINE_GEMV_ADD_TILE ||
         is_glu_gemv(op);
}
// Which input is the [N, K] weight (a GLU tile's gate weight; its up weight follows).
__device__ __forceinline__ int gemv_weight_input(int op) {
  return (op == AMK_OP_RMSNORM_GEMV_TILE || op == AMK_OP_SILU_MUL_GEMV_TILE ||
          op == AMK_OP_SILU_MUL_GEMV_ADD_TILE || op == AMK_OP_RMSNORM_GEMV_GLU_TILE)
             ? 2
             : 1;
}

// How one GEMV tile's weights travel. Evaluated identically by the producer and the consumers
// (same instruction, same buffers, same ring), so both agree on which tiles use the ring and how
// they are chunked without exchanging anything.
//
// A GLU tile streams two row ranges, its N_tile gate rows then its N_tile up rows, as one tile
// of 2 N_tile rows: rows [0, split) start at src, rows [split, rows) at the up weight's row n_off
// (glu_up_rows). The consumers see one run of rows (their strips and partials do not care where
// a row came from); only the producer splits the one chunk that straddles the two ranges into
// two copies.
struct RingTile {
  bool eligible = false;
  const uint8_t* src = nullptr;   // first byte of row n_off
  uint32_t row_bytes = 0;
  int rows = 0;            // N_tile (GLU: 2 N_tile)
  int split = 0;           // rows from src (N_tile)
  int rows_per_chunk = 0;  // floor(chunk_bytes / row_bytes)
};

// Whether the tile streams through the ring is the loader's answer (AMK_RECORD_RING_TILE in
// `record_flags`, gemv_tile_check.cpp: one activation row, whole 16-byte rows that fit a stage,
// aligned weights, checked operands); the producer reads it from the task record in global
// memory, the consumers from their shared-memory copy, so both decide from identical bytes.
// `desc(i)` is input i's descriptor.
template <typename InputDesc>
__device__ __forceinline__ RingTile ring_tile(const amk_instruction_t& inst, int32_t record_flags,
                                              const WeightRing& ring, InputDesc desc) {
  RingTile t;
  if ((record_flags & AMK_RECORD_RING_TILE) == 0 || ring.n_stages < 1) return t;
  const amk_params_t& p = inst.params;
  const amk_buffer_t& W = desc(gemv_weight_input(inst.op));
  const uint32_t row_bytes = uint32_t(p.K) * (W.dtype == AMK_DTYPE_BF16 ? 2u : 4u);
  t.eligible = true;
  t.row_bytes = row_bytes;
  t.src = static_cast<const uint8_t*>(W.ptr) + int64_t(p.n_off) * row_bytes;
  t.split = p.N_tile;
  t.rows = is_glu_gemv(inst.op) ? 2 * p.N_tile : p.N_tile;
  t.rows_per_chunk = int(uint32_t(ring.chunk_bytes) / row_bytes);
  return t;
}

// The first byte of a GLU tile's up rows. Looked up per chunk rather than kept in RingTile: the
// consumers evaluate ring_tile too, and one more pointer there spills the 256-thread build.
template <typename InputDesc>
__device__ __forceinline__ const uint8_t* glu_up_rows(const amk_instruction_t& inst,
                                                      const RingTile& t, InputDesc desc) {
  return static_cast<const uint8_t*>(desc(gemv_weight_input(inst.op) + 1).ptr) +
         int64_t(inst.params.n_off) * t.row_bytes;
}

// ---- producer (lane 0 of the producer warp) ---------------------------------------------------

// GEMV-family tasks the consumers have started. An atomic read (not a volatile one): a flag
// between warps that racecheck can see.
__device__ __forceinline__ int64_t consumers_started(const WeightRing& ring) {
  return atomicAdd(const_cast<int*>(&ring.consumer_progress), 0);
}

// Waits until the consumers have started `needed` GEMV-family tasks. False on abort.
__device__ __forceinline__ bool producer_wait_progress(const amk_program_t& prog,
                                                       const WeightRing& ring, int64_t needed) {
  unsigned sleep_ns = 32;
  AbortPoll poll;
  while (consumers_started(ring) < needed) {
    if (poll.aborting(prog)) return false;
    __nanosleep(sleep_ns);
    if (sleep_ns < 512) sleep_ns <<= 1;
  }
  return true;
}

// Waits until mbarrier `bar`'s phase of parity `parity` has completed. False on abort.
__device__ __forceinline__ bool producer_wait_phase(const amk_program_t& prog, uint32_t bar,
                                                    uint32_t parity) {
  AbortPoll poll;
  while (!mbar_try_wait(bar, parity)) {
    if (poll.aborting(prog)) return false;
  }
  return true;
}

// Waits until the consumers have released the stage (empty phase done). False on abort.
// Parity phase^1: on a fresh barrier the "previous" phase counts as complete, so the first
// n_stages fills go straight through.
__device__ __forceinline__ bool producer_wait_empty(const amk_program_t& prog,
                                                    const WeightRing& ring, RingCursor cur) {
  return producer_wait_phase(prog, ring.empty_bar(cur.stage), cur.phase ^ 1u);
}

// Waits until the copy into `landed`'s stage has completed (its full phase is done): the
// in-flight bound. The producer re-arms that stage only after this wait, so the phase cannot
// have moved on. False on abort.
__device__ __forceinline__ bool producer_wait_landed(const amk_program_t& prog,
                                                     const WeightRing& ring, RingCursor landed) {
  return producer_wait_phase(prog, ring.full_bar(landed.stage), landed.phase);
}

// Streams every ring-eligible GEMV tile of this CTA's queue, n_steps times, in the consumers'
// order. Run by ONE thread. Before returning (normally or on abort) it waits for its own copies
// to land, so the CTA never exits with a bulk copy still writing its shared memory.
__device__ __forceinline__ void ring_producer(const amk_program_t& prog, WeightRing& ring,
                                           int queue_begin, int queue_end) {
  RingCursor cur{0, 0u};
  RingCursor landed{0, 0u};  // the oldest copy not yet seen complete
  const uint64_t policy = evict_first_policy();  // weights are read once per step
  int64_t issued = 0;     // chunks copied so far
  int64_t seen_landed = 0;  // of those, seen complete (in order)
  int64_t gemv_task = 0;  // index of the GEMV-family task in the consumers' sequence
  for (int s = 0; s < prog.n_steps; ++s) {
    for (int q = queue_begin; q < queue_end; ++q) {
      // The task record: the instruction and its descriptors in one place (one round trip).
      const amk_task_record_t& rec = prog.task_records[q];
      const amk_instruction_t& inst = rec.inst;
      if (!is_gemv_family(inst.op)) continue;
      const int64_t task = gemv_task++;
      const RingTile t =
          ring_tile(inst, rec.flags, ring, [&](int i) -> const amk_buffer_t& { return rec.desc[i]; });
      if (!t.eligible) continue;
      // Pipelining depth d (M_tile): start task j once the consumers have started task j - d.
      const int64_t depth = inst.params.M_tile > 0 ? inst.params.M_tile : 0;
      if (!producer_wait_progress(prog, ring, task - depth + 1)) goto drain;
      for (int row = 0; row < t.rows; row += t.rows_per_chunk) {
        const int n_rows = min(t.rows_per_chunk, t.rows - row);
        const uint32_t bytes = uint32_t(n_rows) * t.row_bytes;
        if (!producer_wait_empty(prog, ring, cur)) goto drain;
        // Bytes in flight: at most inflight_chunks copies outstanding while the consumers are
        // in this tile (demand), prefetch_chunks while they have not started it (the copies run
        // ahead across a wait), so HBM stays busy while the L2 round trips on the dependency
        // chain (counters, activations) do not queue behind a deep backlog of weight requests
        // (docs/CUDA_VM.md). Re-read each time: the consumers may start the tile meanwhile.
        while (issued - seen_landed >=
               (consumers_started(ring) > task ? ring.inflight_chunks : ring.prefetch_chunks)) {
          if (!producer_wait_landed(prog, ring, landed)) goto drain;
          landed.advance(ring.n_stages);
          ++seen_landed;
        }
        const uint32_t full = ring.full_bar(cur.stage);
        const uint32_t stage = ring.stage_base_smem + uint32_t(cur.stage) * uint32_t(ring.chunk_bytes);
        mbar_arrive_expect_tx(full, bytes);
        // Rows [row, row + n_rows): those below split from src, the rest from the up weight
        // (a GLU tile's up rows, glu_up_rows); the one chunk that straddles takes two copies on
        // one barrier.
        const int first = min(max(t.split - row, 0), n_rows);
        if (first > 0)
          bulk_copy_g2s(stage, t.src + int64_t(row) * t.row_bytes,
                        uint32_t(first) * t.row_bytes, full, policy);
        if (first < n_rows)
          bulk_copy_g2s(stage + uint32_t(first) * t.row_bytes,
                        glu_up_rows(inst, t, [&](int i) -> const amk_buffer_t& {
                          return rec.desc[i];
                        }) + int64_t(row + first - t.split) * t.row_bytes,
                        uint32_t(n_rows - first) * t.row_bytes, full, policy);
        ++issued;
        cur.advance(ring.n_stages);
      }
    }
  }
drain:
  // The last fill of each stage is the only one that can still be in flight.
  for (int64_t k = 0; k < issued && k < ring.n_stages; ++k) {
    if (cur.stage == 0) {
      cur.stage = ring.n_stages - 1;
      cur.phase ^= 1u;
    } else {
      --cur.stage;
    }
    while (!mbar_try_wait(ring.full_bar(cur.stage), cur.phase)) {
    }
  }
}

// ---- consumer side (warp-collective) ----------------------------------------------------------

// The whole warp waits for the stage's data. Warp-uniform result: false when the launch aborts
// (the producer may have stopped, so the stage might never fill).
__device__ __forceinline__ bool ring_wait_full(const amk_program_t& prog, const WeightRing& ring,
                                               RingCursor cur) {
  const uint32_t bar = ring.full_bar(cur.stage);
  AbortPoll poll;  // every lane counts the same rounds
  while (true) {
    // Every lane observes the completed phase itself, which makes the copied bytes visible to it.
    if (__all_sync(0xffffffffu, mbar_try_wait(bar, cur.phase))) return true;
    int aborting = 0;
    if ((threadIdx.x & 31) == 0) aborting = poll.aborting(prog) ? 1 : 0;
    if (__shfl_sync(0xffffffffu, aborting, 0)) return false;
  }
}

// The warp is done reading the stage: one arrival per warp frees it once all warps arrived.
__device__ __forceinline__ void ring_release(const WeightRing& ring, RingCursor cur) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) mbar_arrive(ring.empty_bar(cur.stage));
}

}  // namespace amk::cuda
