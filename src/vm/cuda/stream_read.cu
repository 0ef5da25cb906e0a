// The streaming-read ceiling of `amk bench` (cuda_stream_read_gbs): the fastest this GPU reads
// a large buffer once, measured with the same access pattern the megakernel's weight stream
// hopes to approach. 16-byte non-coherent loads that skip L1, grid-stride, several independent
// loads in flight per thread; the data is folded (XOR, no FP pipeline) into one value per CTA
// and written to `sink`, so the compiler cannot drop the loads.
#include <cuda_runtime.h>

#include <cstdint>

#include "vm/cuda/megakernel.h"
#include "vm/cuda/primitives.cuh"

namespace amk::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int kCtasPerSm = 4;
constexpr int kMaxCtas = 4096;  // sink holds >= 4096 partials
constexpr int kInFlight = 4;    // independent 16-byte loads per thread per iteration

__device__ __forceinline__ uint32_t fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

__global__ void __launch_bounds__(kThreads) amk_stream_read(const uint4* __restrict__ src,
                                                            int64_t n_vec,
                                                            const uint8_t* __restrict__ tail,
                                                            int tail_bytes, float* sink) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  for (; i + (kInFlight - 1) * stride < n_vec; i += kInFlight * stride) {
    uint4 v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) v[u] = load_stream16(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) acc ^= fold(v[u]);
  }
  for (; i < n_vec; i += stride) acc ^= fold(load_stream16(src + i));
  if (blockIdx.x == 0 && int(threadIdx.x) < tail_bytes) acc ^= tail[threadIdx.x];  // < 16 bytes

  // One partial per CTA: warp fold, then warp 0 folds the warps' values.
  __shared__ uint32_t warp_acc[kThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) warp_acc[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < kThreads / 32 ? warp_acc[threadIdx.x] : 0u;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    if (threadIdx.x == 0) sink[blockIdx.x] = float(acc);
  }
}

}  // namespace

cudaError_t stream_read_launch(const void* src, int64_t bytes, float* sink, cudaStream_t stream) {
  if (bytes < 0 || sink == nullptr || (bytes > 0 && src == nullptr) ||
      reinterpret_cast<uintptr_t>(src) % 16 != 0)
    return cudaErrorInvalidValue;
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return e;
  int ctas = sms * kCtasPerSm;
  if (ctas > kMaxCtas) ctas = kMaxCtas;
  if (ctas < 1) ctas = 1;
  const int64_t n_vec = bytes / 16;
  const auto* base = static_cast<const uint8_t*>(src);
  amk_stream_read<<<ctas, kThreads, 0, stream>>>(reinterpret_cast<const uint4*>(base), n_vec,
                                                 base + n_vec * 16, int(bytes % 16), sink);
  return cudaGetLastError();
}

}  // namespace amk::cuda
