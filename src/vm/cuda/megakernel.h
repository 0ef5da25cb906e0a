// The host's handle on the persistent megakernel (src/vm/cuda/megakernel.cu): its shared-memory
// layout, occupancy and launch. Host-only C++ (no device code), included by the loader.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "amk/abi.h"
#include "vm/cuda/megakernel_layout.h"

namespace amk::cuda {

// Raises the kernel's dynamic shared-memory limit and returns how many CTAs of this layout fit
// on one SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor). The grid must be <= SMs x that.
// Limits (else cudaErrorInvalidValue, from prepare and launch alike): consumer_threads a multiple
// of 32 in [64, 512] (the kernel is built for <= 224 consumers, 255 registers; exactly 256,
// 232 registers by setmaxnreg; and <= 512, 96 registers); scratch_bytes and chunk_bytes
// multiples of 16, chunk_bytes in [16, 2^20 - 16] (an mbarrier's tx-count); ring_stages >= 0
// (0: every GEMV reads its weights from global memory).
// Each op's scratch need is in ops/scratch.h and the GEMV's in ops/gemv.cuh.
cudaError_t megakernel_prepare(const MegakernelLayout& layout, int* blocks_per_sm);

// Threads a CTA of this layout launches with: its consumers and the build's producer warp (or
// producer warpgroup, where the build reallocates registers).
int megakernel_cta_threads(const MegakernelLayout& layout);

// One cooperative launch of `grid` CTAs (grid == prog.n_sms) running prog.n_steps decode steps.
// `prog` is passed by value as a __grid_constant__ kernel parameter; every pointer in it is
// device memory.
// cluster_size > 1: the same launch in thread-block clusters of that many CTAs
// (cudaLaunchKernelEx, the cooperative attribute beside the cluster dimension).
cudaError_t megakernel_launch(const amk_program_t& prog, const MegakernelLayout& layout,
                              cudaStream_t stream, int cluster_size = 0);
// How many clusters of `cluster_size` CTAs of this layout stay resident at once
// (cudaOccupancyMaxActiveClusters); after megakernel_prepare.
cudaError_t megakernel_resident_clusters(const MegakernelLayout& layout, int cluster_size,
                                         int* clusters);

// The streaming-read ceiling: sums `bytes` of `src` with 16-byte loads across the whole GPU,
// writing one partial per CTA into `sink` (>= 4096 floats) so nothing is optimised away.
cudaError_t stream_read_launch(const void* src, int64_t bytes, float* sink, cudaStream_t stream);
// The same read through the megakernel's bulk-copy ring (one CTA per SM, `stages` x
// `chunk_bytes` of shared memory); *bytes_read is what it covers (whole chunks per CTA).
cudaError_t bulk_ring_read_launch(const void* src, int64_t bytes, int chunk_bytes, int stages,
                                  float* sink, cudaStream_t stream, int64_t* bytes_read);

}  // namespace amk::cuda
