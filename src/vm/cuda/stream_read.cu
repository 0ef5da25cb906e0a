// The streaming-read ceiling of `amk bench` (cuda_stream_read_gbs): the fastest this GPU reads
// a large buffer once, measured with the same access pattern the megakernel's weight stream
// hopes to approach. 16-byte non-coherent loads that skip L1, grid-stride, several independent
// loads in flight per thread; the data is folded (XOR, no FP pipeline) into one value per CTA
// and written to `sink`, so the compiler cannot drop the loads.
#include <cuda_runtime.h>

#include <cstdint>

#include "vm/cuda/megakernel.h"
#include "vm/cuda/primitives.cuh"
#include "vm/cuda/weight_ring.cuh"

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

// The megakernel's weight-stream mechanism alone: one CTA per SM, each reading its own
// contiguous share of the buffer through a ring of `stages` x `chunk` bytes filled by one
// producer thread with cp.async.bulk (weight_ring.cuh's mbarrier protocol) and drained by 8
// consumer warps that touch one vector per lane and release the stage. What it reaches against
// the 16-byte-load ceiling says how much of the bandwidth the ring itself can deliver.
constexpr int kRingConsumerWarps = 8;

__global__ void __launch_bounds__(32 * (kRingConsumerWarps + 1), 1)
    amk_bulk_ring_read(const uint8_t* __restrict__ src, int64_t bytes_per_cta, int chunk,
                       int stages, float* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + int64_t(stages) * chunk);
  const uint32_t stage0 = smem_address(smem), bar0 = smem_address(bars);
  auto full = [&](int i) { return bar0 + 8u * uint32_t(i); };
  auto empty = [&](int i) { return bar0 + 8u * uint32_t(stages + i); };
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) {
      mbar_init(full(i), 1u);
      mbar_init(empty(i), uint32_t(kRingConsumerWarps));
    }
    mbar_init_fence();
  }
  __syncthreads();
  const uint8_t* base = src + int64_t(blockIdx.x) * bytes_per_cta;
  const int64_t n_chunks = bytes_per_cta / chunk;
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  if (warp == kRingConsumerWarps) {
    if (lane != 0) return;
    RingCursor cur{0, 0u};
    for (int64_t k = 0; k < n_chunks; ++k) {
      while (!mbar_try_wait(empty(cur.stage), cur.phase ^ 1u)) {
      }
      mbar_arrive_expect_tx(full(cur.stage), uint32_t(chunk));
      bulk_copy_g2s(stage0 + uint32_t(cur.stage) * uint32_t(chunk), base + k * chunk,
                    uint32_t(chunk), full(cur.stage), evict_first_policy());
      cur.advance(stages);
    }
    return;  // the consumers wait for every fill before the CTA can exit
  }
  RingCursor cur{0, 0u};
  uint32_t acc = 0;
  for (int64_t k = 0; k < n_chunks; ++k) {
    while (!__all_sync(0xffffffffu, mbar_try_wait(full(cur.stage), cur.phase))) {
    }
    const uint4* stage = reinterpret_cast<const uint4*>(smem + int64_t(cur.stage) * chunk);
    acc ^= fold(stage[(warp * 32 + lane) % (chunk / 16)]);
    __syncwarp();
    if (lane == 0) mbar_arrive(empty(cur.stage));
    cur.advance(stages);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) sink[blockIdx.x * kRingConsumerWarps + warp] = float(acc);
}

// The current device's multiprocessor count.
cudaError_t current_sm_count(int* sms) {
  int device = 0;
  const cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  return cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device);
}

}  // namespace

cudaError_t bulk_ring_read_launch(const void* src, int64_t bytes, int chunk_bytes, int stages,
                                  float* sink, cudaStream_t stream, int64_t* bytes_read) {
  if (bytes < 0 || sink == nullptr || src == nullptr || reinterpret_cast<uintptr_t>(src) % 16 != 0 ||
      chunk_bytes < 16 || chunk_bytes % 16 != 0 || stages < 1 || bytes_read == nullptr)
    return cudaErrorInvalidValue;
  int sms = 0;
  cudaError_t e = current_sm_count(&sms);
  if (e != cudaSuccess) return e;
  sms = sms < kMaxCtas / kRingConsumerWarps ? sms : kMaxCtas / kRingConsumerWarps;
  const int64_t per_cta = bytes / sms / chunk_bytes * chunk_bytes;
  if (per_cta < chunk_bytes) return cudaErrorInvalidValue;
  const int smem = stages * chunk_bytes + 16 * stages;
  e = cudaFuncSetAttribute(amk_bulk_ring_read, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  amk_bulk_ring_read<<<sms, 32 * (kRingConsumerWarps + 1), size_t(smem), stream>>>(
      static_cast<const uint8_t*>(src), per_cta, chunk_bytes, stages, sink);
  *bytes_read = per_cta * sms;
  return cudaGetLastError();
}

cudaError_t stream_read_launch(const void* src, int64_t bytes, float* sink, cudaStream_t stream) {
  if (bytes < 0 || sink == nullptr || (bytes > 0 && src == nullptr) ||
      reinterpret_cast<uintptr_t>(src) % 16 != 0)
    return cudaErrorInvalidValue;
  int sms = 0;
  const cudaError_t e = current_sm_count(&sms);
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
