// The persistent megakernel (docs/CUDA_VM.md): one cooperative launch, one CTA per SM, each CTA
// walking its SM queue prog.n_steps times. Consumer warps wait, run the instruction and signal;
// the last warp streams GEMV weights into the shared-memory ring (weight_ring.cuh).
//
// The whole device side is this one translation unit: every op is header-only
// (ops/ops.cuh), so the dispatch switch inlines them and no relocatable device code is needed.
#include <cuda_runtime.h>

#include <cstdint>

#include "amk/abi.h"
#include "vm/cuda/device_common.cuh"
#include "vm/cuda/megakernel.h"
#include "vm/cuda/ops/ops.cuh"
#include "vm/cuda/sync.cuh"
#include "vm/cuda/weight_ring.cuh"

namespace amk::cuda {

namespace {

// Register budget. One CTA per SM, so registers cost no occupancy, but __launch_bounds__ caps
// them: a CTA's warps are spread over the SM's 4 sub-partitions (16K registers each), so 224+32
// threads (8 warps, 2 per sub-partition) allow 255 registers per thread and 512+32 (17 warps)
// 96. Spills are expensive here: the op scratch and the weight ring take almost all of the SM's
// shared memory, so the L1 left for the stack is small and a spill reload often goes to L2. The
// kernel is therefore built three times and megakernel_prepare/launch pick the smallest build
// that fits the layout: the 224-consumer CTA never spills, larger ones still run.
// The 256-consumer build gives its producer a whole warpgroup (256 + 128 threads, 168 registers
// each at launch) and moves registers from it to the consumers with Hopper's setmaxnreg: the
// producer needs few (kProducerRegs), the consumer warpgroups take the rest (kConsumerRegs,
// 2 x 232 + 40 = 3 x 168), where 256 + 32 threads would cap every thread at 168 and spill.
constexpr int kLeanConsumerThreads = 224;
constexpr int kSmallConsumerThreads = 256;
constexpr int kMaxConsumerThreads = 512;
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
// Producer threads of the build for kMaxConsumers consumers: one warp, or one warpgroup where
// the registers are reallocated.
constexpr bool reallocates_registers(int max_consumers) {
  return max_consumers == kSmallConsumerThreads;
}
constexpr int producer_threads(int max_consumers) {
  return reallocates_registers(max_consumers) ? 128 : 32;
}
static_assert(2 * kConsumerRegs + kProducerRegs <= 3 * 168,
              "setmaxnreg: the warpgroups' registers exceed the launch's 3 x 168");
constexpr int kMaxTxBytes = (1 << 20) - 16;  // an mbarrier's tx-count is 20 bits

extern __shared__ __align__(128) uint8_t amk_dynamic_smem[];

// Every op but the GEMV family, the attention tiles and their combine, which run_consumers
// calls itself (they pass the task's gate in the middle of the op: op_gemv's comment).
__device__ __forceinline__ void dispatch(const OpContext& c) {
  switch (static_cast<amk_opcode_t>(c.inst->op)) {
    case AMK_OP_NOP: break;
    case AMK_OP_COPY: op_copy(c); break;
    case AMK_OP_EMBED: op_embed(c); break;
    case AMK_OP_RMSNORM: op_rmsnorm(c); break;
    case AMK_OP_ROPE:
    case AMK_OP_ROPE_FREQ: op_rope(c); break;
    case AMK_OP_SILU_MUL: op_silu_mul(c); break;
    case AMK_OP_ADD: op_add(c); break;
    case AMK_OP_ALLREDUCE_SHARD: op_allreduce_shard(c); break;
    case AMK_OP_KV_APPEND: op_kv_append(c); break;
    case AMK_OP_SAMPLE_ARGMAX: op_sample_argmax(c); break;
    default: op_fail(c, 1); break;  // the loader refuses these; never compute garbage
  }
}

// After the sink of step s (thread 0, after the consumer barrier that ends it): record the
// token and advance the position, before the signal releases both to the next step's readers.
__device__ __forceinline__ void finish_decode_step(const amk_program_t& prog, int s) {
  if (prog.token_history && prog.next_token_buffer >= 0)
    prog.token_history[s] =
        *static_cast<volatile const int32_t*>(prog.buffers[prog.next_token_buffer].ptr);
  if (prog.pos_buffer >= 0) {
    volatile int32_t* pos = static_cast<volatile int32_t*>(prog.buffers[prog.pos_buffer].ptr);
    *pos = *pos + 1;
  }
}

static_assert(sizeof(amk_task_record_t) % 16 == 0, "task records are staged in 16-byte vectors");
constexpr int kRecordVectors = int(sizeof(amk_task_record_t) / 16);
// The kernel's static shared memory (two staged task records); marshal.cpp leaves
// kStaticSmemReserve of the opt-in limit.
static_assert(2 * sizeof(amk_task_record_t) <= kStaticSmemReserve,
              "two staged task records exceed the reserved static shared memory");

// Starts copying the first n_vectors of a task record into shared memory (cp.async, 16 bytes per
// thread, L2 only: records are read once per step); cp_async_wait_all + a consumer barrier
// make it visible. No thread reads `dst` until then.
__device__ __forceinline__ void prefetch_record(const amk_task_record_t* src,
                                                amk_task_record_t* dst, int n_vectors, int tid,
                                                int n_threads) {
  const uint4* from = reinterpret_cast<const uint4*>(src);
  const uint32_t to = smem_address(dst);
  for (int k = tid; k < n_vectors; k += n_threads) cp_async16(to + 16u * uint32_t(k), from + k);
  cp_async_commit();
}

__device__ __forceinline__ void run_consumers(const amk_program_t& prog, amk_task_record_t* s_rec,
                                              float* scratch, int scratch_bytes, WeightRing* ring,
                                              int* op_failed, int n_threads, int queue_begin,
                                              int queue_end) {
  const int tid = int(threadIdx.x);
  int gemv_started = 0;  // GEMV-family tasks whose waits passed: the producer's pacing signal
  SeenCounter seen;      // this lane's last satisfied wait (warp 0; sync.cuh)
  if (queue_begin >= queue_end) return;
  // Task k (over all steps) runs from s_rec[k & 1] while record k + 1 streams into the other
  // one: a task's staging costs no round trip once the queue is under way.
  prefetch_record(prog.task_records + queue_begin, &s_rec[0], kRecordVectors, tid, n_threads);
  int k = 0;
  for (int s = 0; s < prog.n_steps; ++s) {
    const uint32_t epoch = prog.epoch + uint32_t(s);
    for (int q = queue_begin; q < queue_end; ++q, ++k) {
      amk_task_record_t* rec = &s_rec[k & 1];
      // Every thread's copies of record k have landed; after the barrier, every thread's. The
      // other buffer's last readers (task k - 1) are past that task's end barrier.
      cp_async_wait_all();
      consumer_sync(n_threads);
      const bool more = q + 1 < queue_end || s + 1 < prog.n_steps;
      if (more)
        prefetch_record(prog.task_records + (q + 1 < queue_end ? q + 1 : queue_begin),
                        &s_rec[(k + 1) & 1], rec->next_vectors, tid, n_threads);
      const amk_instruction_t& inst = rec->inst;
      const int32_t index = rec->index;
      // Profiling (amk bench --profile): thread 0 stamps the last step's tasks.
      uint64_t* stamp = prog.profile != nullptr && tid == 0 && s + 1 == prog.n_steps
                            ? prog.profile + AMK_PROFILE_STAMPS * int64_t(index)
                            : nullptr;
      if (stamp) stamp[0] = global_ns();
      const bool gemv = is_gemv_family(inst.op);
      const int out_counter = inst.out_counter;
      // The gate: the task's waits (IR_SPEC §8.1), then the producer's pacing signal. Step s > 0
      // of a multi-step launch: a task with no waits (EMBED, which reads the token the previous
      // step's sink wrote) first waits for that sink. Every other task of the step waits,
      // transitively, on such a root, so all of step s is ordered after step s - 1. False on
      // every consumer thread when the launch is aborting.
      bool gate_passed = false, aborting = false;
      auto pass_gate = [&]() -> bool {
        if ((s > 0 && inst.n_waits == 0 && !wait_for_previous_step(prog, epoch, tid, n_threads)) ||
            !wait_for_inputs(prog, inst, epoch, tid, n_threads, seen)) {
          aborting = true;
          return false;
        }
        if (gemv) {
          ++gemv_started;
          if (tid == 0) atomicExch(&ring->consumer_progress, gemv_started);
        }
        if (stamp) stamp[1] = global_ns();
        gate_passed = true;
        return true;
      };
      // Every earlier task of this step in the queue passed its gate (a task that does not
      // ends the launch), so after the step's first task its position is visible.
      const bool pos_visible = s == 0 || q > queue_begin;
      OpContext c{&prog, &inst, rec->desc, scratch, scratch_bytes, tid, n_threads, -1, pos_visible,
                  ring, q - queue_begin, epoch, op_failed, stamp, rec->flags};
      // The GEMV family and the attention tiles check their operands (and plan their strips, or
      // take RoPE's frequencies) BEFORE passing the gate, so that work overlaps the wait instead
      // of following it on the layer's dependency chain. They read nothing another task writes
      // (the step position included) until then.
      if (gemv) {
        op_gemv(c, pass_gate);
      } else if (inst.op == AMK_OP_ATTENTION_TILE || inst.op == AMK_OP_ROPE_KV_ATTENTION_TILE) {
        op_attention_tiles(c, pass_gate);
      } else if (inst.op == AMK_OP_ATTENTION_COMBINE) {
        op_attention_combine(c, pass_gate);
      } else if (pass_gate()) {
        // Only KV_APPEND and a sampling SAMPLE_ARGMAX (its draw index) read the step position
        // here: the volatile load stays off every other task's path.
        if (inst.op == AMK_OP_KV_APPEND ||
            (inst.op == AMK_OP_SAMPLE_ARGMAX && (inst.params.flags & 2) != 0))
          c.pos = step_position(prog);
        dispatch(c);
      }
      // Leaving on an abort: first let the record prefetch land, so that no copy is still
      // writing this CTA's shared memory when it exits. (An op that failed before its gate
      // leaves through the vote below.)
      if (aborting) {
        cp_async_wait_all();
        return;
      }
      // Any other op may have used the op scratch: the GEMV x cache no longer holds.
      if (tid == 0 && !gemv) ring->x_op = -1;
      // The barrier that ends the instruction doubles as the vote on an op error in this CTA
      // (each thread reads the shared flag; the failing one sees its own write). No global read
      // here: a watchdog abort or another CTA's error reaches this CTA through its spins.
      // An op that returned without passing its gate (and without op_fail) leaves too: its
      // signal would release readers it never waited for.
      if (consumer_any(*reinterpret_cast<volatile int*>(op_failed) != 0 || !gate_passed,
                       n_threads)) {
        cp_async_wait_all();
        return;
      }
      if (index == prog.sink_instruction && tid == 0) finish_decode_step(prog, s);
      publish_completion(prog, out_counter, tid);
      if (stamp) stamp[2] = global_ns();
    }
  }
}

}  // namespace

template <int kMaxConsumers>
__global__ void __launch_bounds__(kMaxConsumers + producer_threads(kMaxConsumers), 1)
    amk_megakernel(const __grid_constant__ amk_program_t prog, MegakernelLayout layout) {
  const int n_consumers = layout.consumer_threads;
  uint8_t* smem = amk_dynamic_smem;
  float* scratch = reinterpret_cast<float*>(smem);
  uint8_t* stages = smem + layout.scratch_bytes;
  uint64_t* barriers =
      reinterpret_cast<uint64_t*>(stages + int64_t(layout.ring_stages) * layout.chunk_bytes);
  WeightRing* ring = reinterpret_cast<WeightRing*>(barriers + 2 * layout.ring_stages);

  __shared__ int s_op_failed;
  if (threadIdx.x == 0) {
    ring_init(*ring, stages, barriers, layout.ring_stages, layout.chunk_bytes,
              layout.inflight_chunks, layout.prefetch_chunks, n_consumers / 32);
    s_op_failed = 0;
  }
  __syncthreads();  // the only CTA-wide barrier: from here on consumers use named barrier 1
  if (int(blockIdx.x) >= prog.n_sms) return;

  const int queue_begin = prog.sm_queue_offset[blockIdx.x];
  const int queue_end = prog.sm_queue_offset[blockIdx.x + 1];
  if (int(threadIdx.x) >= n_consumers) {
    if constexpr (reallocates_registers(kMaxConsumers))
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegs));
    if (int(threadIdx.x) == n_consumers) ring_producer(prog, *ring, queue_begin, queue_end);
    return;
  }
  if constexpr (reallocates_registers(kMaxConsumers))
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegs));
  __shared__ __align__(16) amk_task_record_t s_rec[2];
  run_consumers(prog, s_rec, scratch, layout.scratch_bytes, ring, &s_op_failed, n_consumers,
                queue_begin, queue_end);
}

namespace {

bool layout_ok(const MegakernelLayout& l) {
  return l.consumer_threads >= 64 && l.consumer_threads <= kMaxConsumerThreads &&
         l.consumer_threads % 32 == 0 && l.scratch_bytes >= 0 &&
         l.scratch_bytes % kRingStageAlignment == 0 && l.ring_stages >= 0 &&
         l.chunk_bytes >= kRingStageAlignment && l.chunk_bytes % kRingStageAlignment == 0 &&
         l.chunk_bytes <= kMaxTxBytes;
}

using MegakernelFn = void (*)(amk_program_t, MegakernelLayout);

// The build whose launch bounds admit the layout's CTA (layout_ok() already checked the size).
struct MegakernelBuild {
  MegakernelFn fn;
  int threads;                 // the CTA: the layout's consumers and the build's producer threads
  bool reallocates_registers;  // its warpgroups trade registers with setmaxnreg
};
template <int kMaxConsumers>
MegakernelBuild build_of(int consumers) {
  return {&amk_megakernel<kMaxConsumers>, consumers + producer_threads(kMaxConsumers),
          reallocates_registers(kMaxConsumers)};
}
MegakernelBuild kernel_for(const MegakernelLayout& l) {
  const int c = l.consumer_threads;
  if (c <= kLeanConsumerThreads) return build_of<kLeanConsumerThreads>(c);
  // setmaxnreg is warpgroup-wide: the register-reallocating build runs exactly 256 consumers.
  if (c == kSmallConsumerThreads) return build_of<kSmallConsumerThreads>(c);
  return build_of<kMaxConsumerThreads>(c);
}

}  // namespace

int megakernel_cta_threads(const MegakernelLayout& layout) { return kernel_for(layout).threads; }

cudaError_t megakernel_prepare(const MegakernelLayout& layout, int* blocks_per_sm) {
  if (!layout_ok(layout) || blocks_per_sm == nullptr) return cudaErrorInvalidValue;
  const int smem = megakernel_smem_bytes(layout);
  const MegakernelBuild build = kernel_for(layout);
  // setmaxnreg.inc waits until the registers it asks for are free: if ptxas ever gave the build
  // fewer than 168 a thread at launch, 2 x 232 + 40 would exceed what the warpgroups hold and
  // the consumers would hang. Refuse to launch instead.
  if (build.reallocates_registers) {
    cudaFuncAttributes attr{};
    if (const cudaError_t a = cudaFuncGetAttributes(&attr, build.fn); a != cudaSuccess) return a;
    if (3 * attr.numRegs < 2 * kConsumerRegs + kProducerRegs) return cudaErrorInvalidKernelImage;
  }
  const cudaError_t e =
      cudaFuncSetAttribute(build.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, build.fn, build.threads,
                                                       size_t(smem));
}

namespace {

// The launch of `grid` CTAs in clusters of `cluster_size`, cooperative (every CTA resident).
cudaLaunchConfig_t cluster_config(cudaLaunchAttribute (&attrs)[2], const MegakernelLayout& layout,
                                  int grid, int cluster_size, cudaStream_t stream) {
  const MegakernelBuild build = kernel_for(layout);
  attrs[0] = cudaLaunchAttribute{};
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = unsigned(cluster_size);
  attrs[0].val.clusterDim.y = attrs[0].val.clusterDim.z = 1;
  attrs[1] = cudaLaunchAttribute{};
  attrs[1].id = cudaLaunchAttributeCooperative;
  attrs[1].val.cooperative = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(grid));
  cfg.blockDim = dim3(unsigned(build.threads));
  cfg.dynamicSmemBytes = size_t(megakernel_smem_bytes(layout));
  cfg.stream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = 2;
  return cfg;
}

}  // namespace

cudaError_t megakernel_resident_clusters(const MegakernelLayout& layout, int cluster_size,
                                         int* clusters) {
  if (!layout_ok(layout) || cluster_size < 2 || clusters == nullptr) return cudaErrorInvalidValue;
  const MegakernelBuild build = kernel_for(layout);
  // Clusters of more than 8 CTAs (the portable size) must be allowed explicitly.
  if (const cudaError_t e =
          cudaFuncSetAttribute(build.fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
      e != cudaSuccess)
    return e;
  cudaLaunchAttribute attrs[2];
  cudaLaunchConfig_t cfg = cluster_config(attrs, layout, cluster_size, cluster_size, nullptr);
  cfg.numAttrs = 1;  // the occupancy query takes the cluster dimension alone
  return cudaOccupancyMaxActiveClusters(clusters, build.fn, &cfg);
}

cudaError_t megakernel_launch(const amk_program_t& prog, const MegakernelLayout& layout,
                              cudaStream_t stream, int cluster_size) {
  if (!layout_ok(layout) || prog.n_sms < 1 || prog.n_steps < 1) return cudaErrorInvalidValue;
  amk_program_t program = prog;
  MegakernelLayout shape = layout;
  void* args[] = {&program, &shape};
  const MegakernelBuild build = kernel_for(layout);
  if (cluster_size > 1) {
    if (prog.n_sms % cluster_size != 0) return cudaErrorInvalidValue;
    cudaLaunchAttribute attrs[2];
    const cudaLaunchConfig_t cfg = cluster_config(attrs, layout, prog.n_sms, cluster_size, stream);
    return cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(build.fn), args);
  }
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(build.fn),
                                     dim3(unsigned(prog.n_sms)), dim3(unsigned(build.threads)),
                                     args, size_t(megakernel_smem_bytes(layout)), stream);
}

}  // namespace amk::cuda
