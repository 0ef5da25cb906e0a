// What every device instruction sees: the OpContext, the consumer-only barrier, typed buffer
// access and the step position. Header-only: the whole megakernel is one translation unit
// (src/vm/cuda/megakernel.cu includes every op), so no relocatable device code is needed.
//
// Threads: a CTA is `n_threads` consumer threads (warps 0 .. n_threads/32 - 1) plus a producer
// warp (a warpgroup in the 256-consumer build, megakernel.cu) whose first thread streams GEMV
// weight tiles into the shared-memory ring (weight_ring.cuh).
// Ops run on the consumer threads only, so they synchronise with consumer_sync() (named barrier
// 1 over the consumer threads), NEVER __syncthreads(), which would wait for the producer warp.
#pragma once

#include <cstdint>

#include "amk/abi.h"

namespace amk::cuda {

struct WeightRing;  // weight_ring.cuh

struct OpContext {
  const amk_program_t* prog;
  const amk_instruction_t* inst;  // staged in shared memory by the megakernel
  const amk_buffer_t* desc;       // operand descriptors in shared memory (the task record's):
                                  // inputs at [i], then outputs at [n_inputs + j]
  float* scratch;     // op scratch in dynamic shared memory, 16-byte aligned
  int scratch_bytes;  // >= what MegakernelLayout::scratch_bytes promised (see megakernel.h)
  int tid;            // 0 .. n_threads - 1
  int n_threads;      // consumer threads, a multiple of 32, >= 64
  int32_t pos;        // the step position (*pos_buffer) for KV_APPEND, the attention ops and a
                      // sampling SAMPLE_ARGMAX (the only readers); -1 for other ops and
                      // programs without one
  bool pos_visible;   // the step's position may be read before this task's gate: the CTA has
                      // passed a gate in this step (every one is ordered after the previous
                      // step's sink, which wrote it), or it is the launch's first step (the
                      // host or the previous launch wrote it). This step's sink, which writes
                      // the next, waits (transitively) for every task of the step.
  WeightRing* ring;   // GEMV family: where the producer warp delivers this task's weights
  int32_t queue_index;  // this instruction's index in the CTA's queue (the ring's sequence)
  uint32_t epoch;       // the step (prog.epoch + s): what op-scratch caches are keyed by
  int* op_failed;       // shared: set by op_fail, voted on at the task's end barrier
  uint64_t* stamp;      // profiling (thread 0, the launch's last step): the task's
                        // AMK_PROFILE_STAMPS slots; null otherwise
  int32_t record_flags;  // the task record's AMK_RECORD_* bits (abi.h)
};

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
// Profiling: the op's body begins (slot 3) / ends (slot 4), see amk_program_t.profile.
__device__ __forceinline__ void mark_body_begin(const OpContext& c) {
  if (c.stamp) c.stamp[3] = global_ns();
}
__device__ __forceinline__ void mark_body_end(const OpContext& c) {
  if (c.stamp) c.stamp[4] = global_ns();
}

// Barrier over the consumer threads only (named barrier 1; barrier 0 is __syncthreads).
__device__ __forceinline__ void consumer_sync(int n_threads) {
  asm volatile("bar.sync 1, %0;" ::"r"(n_threads) : "memory");
}

__device__ __forceinline__ const amk_buffer_t& in_buf(const OpContext& c, int i) {
  return c.desc[i];
}
__device__ __forceinline__ const amk_buffer_t& out_buf(const OpContext& c, int i) {
  return c.desc[c.inst->n_inputs + i];
}

// bf16 <-> f32 without cuda_bf16.h's host/device split: bf16 is the top half of an f32.
__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) {
  return __uint_as_float(uint32_t(b) << 16);
}
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {  // round to nearest even
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// Element i of a float buffer (F32 or BF16; other float dtypes are refused by the loader).
__device__ __forceinline__ float load_f(const amk_buffer_t& b, int64_t i) {
  if (b.dtype == AMK_DTYPE_BF16) return bf16_bits_to_float(static_cast<const uint16_t*>(b.ptr)[i]);
  return static_cast<const float*>(b.ptr)[i];
}
__device__ __forceinline__ void store_f(const amk_buffer_t& b, int64_t i, float v) {
  if (b.dtype == AMK_DTYPE_BF16)
    static_cast<uint16_t*>(b.ptr)[i] = float_to_bf16_bits(v);
  else
    static_cast<float*>(b.ptr)[i] = v;
}
// Element i of an integer buffer (I32; the loader refuses other integer dtypes for ids).
__device__ __forceinline__ int32_t load_i32(const amk_buffer_t& b, int64_t i) {
  return static_cast<const int32_t*>(b.ptr)[i];
}

// An op found its operands inconsistent (a loader bug, since validate() and the loader check
// shapes): record the first error and abort the whole launch instead of computing garbage.
// The host reports it as OP_ERROR with the instruction index.
// The CTA learns it through the shared flag at the task's end barrier (no global read on every
// task's path); the other CTAs through the global flag, which their spins poll.
__device__ __forceinline__ void op_fail(const OpContext& c, int code) {
  // The abort flag doubles as the error channel: 1 = watchdog, 0x100 + code = op error.
  atomicCAS(const_cast<uint32_t*>(c.prog->abort_flag), 0u, 0x100u + uint32_t(code));
  *reinterpret_cast<volatile int*>(c.op_failed) = 1;
}

}  // namespace amk::cuda
