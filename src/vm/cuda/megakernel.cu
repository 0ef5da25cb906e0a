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
// them: a CTA's warps are spread over the SM's 4 sub-partitions (16K registers each), so 256+32
// threads (9 warps, 3 per sub-partition) allow 168 registers per thread, 512+32 (17 warps) only
// 96. The kernel is therefore built twice and megakernel_prepare/launch pick the smaller build
// that fits the layout: the common 256-consumer CTA never spills, larger ones still run.
// consumer_threads above kMaxConsumerThreads is refused.
constexpr int kSmallConsumerThreads = 256;
constexpr int kMaxConsumerThreads = 512;
constexpr int kProducerThreads = 32;
constexpr int kMaxTxBytes = (1 << 20) - 16;  // an mbarrier's tx-count is 20 bits

extern __shared__ __align__(128) uint8_t amk_dynamic_smem[];

__device__ __forceinline__ void dispatch(const OpContext& c) {
  switch (static_cast<amk_opcode_t>(c.inst->op)) {
    case AMK_OP_NOP: break;
    case AMK_OP_COPY: op_copy(c); break;
    case AMK_OP_EMBED: op_embed(c); break;
    case AMK_OP_RMSNORM: op_rmsnorm(c); break;
    case AMK_OP_GEMV_TILE:
    case AMK_OP_RMSNORM_GEMV_TILE:
    case AMK_OP_SILU_MUL_GEMV_TILE:
    case AMK_OP_GEMV_ADD_TILE: op_gemv(c); break;
    case AMK_OP_ATTENTION_TILE: op_attention_tile(c); break;
    case AMK_OP_ROPE:
    case AMK_OP_ROPE_FREQ: op_rope(c); break;
    case AMK_OP_SILU_MUL: op_silu_mul(c); break;
    case AMK_OP_ADD: op_add(c); break;
    case AMK_OP_KV_APPEND: op_kv_append(c); break;
    case AMK_OP_SAMPLE_ARGMAX: op_sample_argmax(c); break;
    case AMK_OP_ATTENTION_COMBINE: op_attention_combine(c); break;
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

__device__ __forceinline__ int32_t read_position(const amk_program_t& prog) {
  if (prog.pos_buffer < 0) return -1;
  // Volatile: the sink of the previous step (another SM) changed it; never a stale L1 line.
  return *static_cast<volatile const int32_t*>(prog.buffers[prog.pos_buffer].ptr);
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

constexpr int kInstructionVectors = int(sizeof(amk_instruction_t) / 16);
static_assert(sizeof(amk_instruction_t) % 16 == 0, "the instruction is staged in 16-byte vectors");
static_assert(sizeof(amk_buffer_t) % 16 == 0, "descriptors are staged in 16-byte vectors");
constexpr int kDescriptorVectors = int(sizeof(amk_buffer_t) / 16);
// The kernel's static shared memory; marshal.cpp leaves kStaticSmemReserve of the opt-in limit.
static_assert(sizeof(amk_instruction_t) + (AMK_MAX_INPUTS + AMK_MAX_OUTPUTS) * sizeof(amk_buffer_t) <=
                  kStaticSmemReserve,
              "staged instruction and descriptors exceed the reserved static shared memory");

// Copies the descriptors of inst's operands into desc (inputs at [i], outputs at
// [AMK_MAX_INPUTS + j]), one 16-byte vector per thread.
__device__ __forceinline__ void stage_descriptors(const amk_program_t& prog,
                                                  const amk_instruction_t& inst,
                                                  amk_buffer_t* desc, int tid, int n_threads) {
  const int n_in = inst.n_inputs, n_vec = (n_in + inst.n_outputs) * kDescriptorVectors;
  for (int k = tid; k < n_vec; k += n_threads) {
    const int b = k / kDescriptorVectors, part = k - b * kDescriptorVectors;
    const bool input = b < n_in;
    const int id = input ? inst.inputs[b] : inst.outputs[b - n_in];
    const int slot = input ? b : AMK_MAX_INPUTS + (b - n_in);
    reinterpret_cast<uint4*>(desc + slot)[part] =
        reinterpret_cast<const uint4*>(prog.buffers + id)[part];
  }
}

__device__ __forceinline__ void run_consumers(const amk_program_t& prog, amk_instruction_t* s_inst,
                                              amk_buffer_t* s_desc, float* scratch,
                                           int scratch_bytes, WeightRing* ring, int n_threads,
                                           int queue_begin, int queue_end) {
  const int tid = int(threadIdx.x);
  int gemv_started = 0;  // GEMV-family tasks whose waits passed: the producer's pacing signal
  SeenCounter seen;      // thread 0's last satisfied wait (sync.cuh)
  for (int s = 0; s < prog.n_steps; ++s) {
    const uint32_t epoch = prog.epoch + uint32_t(s);
    for (int q = queue_begin; q < queue_end; ++q) {
      const int32_t index = prog.sm_queue[q];
      // Stage the instruction, then its operands' descriptors, in shared memory: two parallel
      // L2 round trips instead of the chain of dependent loads the op would otherwise make
      // (instruction -> operand id -> descriptor -> field), which cost more than a tile's math.
      // No thread reads the previous task's copies after that task's end barrier.
      if (tid < kInstructionVectors)
        reinterpret_cast<uint4*>(s_inst)[tid] =
            reinterpret_cast<const uint4*>(prog.instructions + index)[tid];
      consumer_sync(n_threads);
      const amk_instruction_t& inst = *s_inst;
      stage_descriptors(prog, inst, s_desc, tid, n_threads);
      // Profiling (amk bench --profile): thread 0 stamps the last step's tasks.
      uint64_t* stamp = prog.profile != nullptr && tid == 0 && s + 1 == prog.n_steps
                            ? prog.profile + 3 * int64_t(index)
                            : nullptr;
      if (stamp) stamp[0] = global_ns();
      // Step s > 0 of a multi-step launch: a task with no waits (EMBED, which reads the token
      // the previous step's sink wrote) first waits for that sink. Every other task of the step
      // waits, transitively, on such a root, so all of step s is ordered after step s - 1.
      if (s > 0 && inst.n_waits == 0 && !wait_for_previous_step(prog, epoch, tid, n_threads))
        return;
      // Its barrier also publishes the staged descriptors to every consumer thread.
      if (!wait_for_inputs(prog, inst, epoch, tid, n_threads, seen)) return;
      const bool gemv = is_gemv_family(inst.op);
      const int out_counter = inst.out_counter;
      if (gemv) {
        ++gemv_started;
        if (tid == 0) atomicExch(&ring->consumer_progress, gemv_started);
      }
      // Only KV_APPEND and ATTENTION_TILE read the step position (their runtime-position flags):
      // the volatile load stays off every other task's path.
      const bool reads_position = inst.op == AMK_OP_KV_APPEND || inst.op == AMK_OP_ATTENTION_TILE;
      const OpContext c{&prog, &inst, s_desc, scratch, scratch_bytes, tid, n_threads,
                        reads_position ? read_position(prog) : -1, ring, q - queue_begin, epoch};
      if (stamp) stamp[1] = global_ns();
      dispatch(c);
      // Any other op may have used the op scratch: the GEMV x cache no longer holds.
      if (tid == 0 && !gemv) ring->x_op = -1;
      // The barrier that ends the instruction doubles as the abort vote (watchdog, op error).
      if (consumer_any(tid == 0 && abort_requested(prog), n_threads)) return;
      if (index == prog.sink_instruction && tid == 0) finish_decode_step(prog, s);
      publish_completion(prog, out_counter, tid);
      if (stamp) stamp[2] = global_ns();
    }
  }
}

}  // namespace

template <int kMaxConsumers>
__global__ void __launch_bounds__(kMaxConsumers + kProducerThreads, 1)
    amk_megakernel(const __grid_constant__ amk_program_t prog, MegakernelLayout layout) {
  const int n_consumers = layout.consumer_threads;
  uint8_t* smem = amk_dynamic_smem;
  float* scratch = reinterpret_cast<float*>(smem);
  uint8_t* stages = smem + layout.scratch_bytes;
  uint64_t* barriers =
      reinterpret_cast<uint64_t*>(stages + int64_t(layout.ring_stages) * layout.chunk_bytes);
  WeightRing* ring = reinterpret_cast<WeightRing*>(barriers + 2 * layout.ring_stages);

  if (threadIdx.x == 0)
    ring_init(*ring, stages, barriers, layout.ring_stages, layout.chunk_bytes, n_consumers / 32);
  __syncthreads();  // the only CTA-wide barrier: from here on consumers use named barrier 1
  if (int(blockIdx.x) >= prog.n_sms) return;

  const int queue_begin = prog.sm_queue_offset[blockIdx.x];
  const int queue_end = prog.sm_queue_offset[blockIdx.x + 1];
  if (int(threadIdx.x) >= n_consumers) {
    if (int(threadIdx.x) == n_consumers) ring_producer(prog, *ring, queue_begin, queue_end);
    return;
  }
  __shared__ __align__(16) amk_instruction_t s_inst;
  __shared__ __align__(16) amk_buffer_t s_desc[AMK_MAX_INPUTS + AMK_MAX_OUTPUTS];
  run_consumers(prog, &s_inst, s_desc, scratch, layout.scratch_bytes, ring, n_consumers, queue_begin, queue_end);
}

namespace {

bool layout_ok(const MegakernelLayout& l) {
  return l.consumer_threads >= 64 && l.consumer_threads <= kMaxConsumerThreads &&
         l.consumer_threads % 32 == 0 && l.scratch_bytes >= 0 && l.scratch_bytes % 16 == 0 &&
         l.ring_stages >= 0 && l.chunk_bytes >= 16 && l.chunk_bytes % 16 == 0 &&
         l.chunk_bytes <= kMaxTxBytes;
}

using MegakernelFn = void (*)(amk_program_t, MegakernelLayout);

// The build whose launch bounds admit the layout's CTA (layout_ok() already checked the size).
MegakernelFn kernel_for(const MegakernelLayout& l) {
  if (l.consumer_threads <= kSmallConsumerThreads) return &amk_megakernel<kSmallConsumerThreads>;
  return &amk_megakernel<kMaxConsumerThreads>;
}

}  // namespace

cudaError_t megakernel_prepare(const MegakernelLayout& layout, int* blocks_per_sm) {
  if (!layout_ok(layout) || blocks_per_sm == nullptr) return cudaErrorInvalidValue;
  const int smem = megakernel_smem_bytes(layout);
  const MegakernelFn kernel = kernel_for(layout);
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      blocks_per_sm, kernel, layout.consumer_threads + kProducerThreads, size_t(smem));
}

cudaError_t megakernel_launch(const amk_program_t& prog, const MegakernelLayout& layout,
                              cudaStream_t stream) {
  if (!layout_ok(layout) || prog.n_sms < 1 || prog.n_steps < 1) return cudaErrorInvalidValue;
  amk_program_t program = prog;
  MegakernelLayout shape = layout;
  void* args[] = {&program, &shape};
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel_for(layout)),
                                     dim3(unsigned(prog.n_sms)),
                                     dim3(unsigned(layout.consumer_threads + kProducerThreads)),
                                     args, size_t(megakernel_smem_bytes(layout)), stream);
}

}  // namespace amk::cuda
