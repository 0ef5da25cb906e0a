// The few block-level primitives every device instruction is built from (ThunderKittens' habit:
// small readable ops over a handful of shared pieces). Consumer threads only (device_common.cuh).
#pragma once

#include <cstdint>

#include "vm/cuda/device_common.cuh"

namespace amk::cuda {

// Keeps a value's computation without storing it anywhere (an empty asm that reads it).
__device__ __forceinline__ void opaque_use(float v) { asm volatile("" ::"f"(v)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum of `v` over the consumer threads; every consumer thread gets the result. `red` is 32
// floats of shared memory owned by the caller for the duration of the call.
__device__ __forceinline__ float block_sum(float v, float* red, int tid, int n_threads) {
  v = warp_sum(v);
  const int warp = tid >> 5, lane = tid & 31, n_warps = n_threads >> 5;
  if (lane == 0) red[warp] = v;
  consumer_sync(n_threads);
  float total = lane < n_warps ? red[lane] : 0.0f;
  total = warp_sum(total);
  consumer_sync(n_threads);  // red may be reused right after
  return total;
}

// An L2 policy for bytes read exactly once per step (the weights): evict them first. The weight
// stream is ~50x the L2 per step; left at the default policy it flushes everything else there:
// the activations other SMs just wrote, the task records, the KV cache, and the megakernel's own
// code, whose instruction fetches then go to DRAM on every task.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// 16 bytes of a read-only stream (weights; the bandwidth probe) that is read exactly once: the
// non-coherent path, kept out of L1 where it would only evict activations, and evicted first
// from L2. NEVER for buffers other CTAs write during the launch (activations, KV).
__device__ __forceinline__ uint4 load_stream16(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(evict_first_policy()));
  return v;
}

// cp.async of 16 bytes from global memory to the shared-memory address `smem` (L2 only: the
// CTA reads the copy from shared memory), then the group commit and the wait that, with a
// consumer barrier, make the copies visible. The task-record prefetch and attention's K/V
// staging use them.
__device__ __forceinline__ void cp_async16(uint32_t smem, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem),
               "l"(__cvta_generic_to_global(global))
               : "memory");
}
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's most recent cp.async groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

// 1 / sqrt(mean(x^2) + eps) of one row of `hidden` floats in shared or global memory.
__device__ __forceinline__ float rms_inv(const float* x, int hidden, float eps, float* red, int tid,
                                         int n_threads) {
  float s = 0.0f;
  for (int j = tid; j < hidden; j += n_threads) s += x[j] * x[j];
  s = block_sum(s, red, tid, n_threads);
  return rsqrtf(s / float(hidden) + eps);
}
// The same for a row one warp holds (lanes stride it): per-head norms, a warp a head.
__device__ __forceinline__ float warp_rms_inv(const float* x, int hidden, float eps, int lane) {
  float s = 0.0f;
  for (int j = lane; j < hidden; j += 32) s += x[j] * x[j];
  return rsqrtf(warp_sum(s) / float(hidden) + eps);
}

// a / b and a % b for 0 <= a < 2^15, 1 <= b <= 2^10 (strip, warp, row, head and staged-vector
// counts): one reciprocal and a multiply instead of the ~25 dependent instructions of an integer
// division. Exact: (a + 0.5) / b is at least 0.5 / b away from an integer, more than the float
// error at these magnitudes (checked for every such a and b with the reciprocal off by up to
// 2 ulp and the product rounded).
struct SmallDiv {
  int q, r;
};
__device__ __forceinline__ SmallDiv small_divmod(int a, int b) {
  const int q = __float2int_rz(__fdividef(float(a) + 0.5f, float(b)));
  return {q, a - q * b};
}

}  // namespace amk::cuda
