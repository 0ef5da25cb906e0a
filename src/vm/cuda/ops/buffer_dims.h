// A buffer descriptor's row length, as plain C++ that the device ops (ops/*.cuh) and the loader's
// checks (gemv_tile_check.cpp) both read, so that they cannot disagree on it.
#pragma once

#include <cstdint>

#include "amk/abi.h"

namespace amk::cuda {

// The length of the last dimension; a rank-0 (scalar) buffer's is its element count. Forced
// inline on the device, as the ops' own helpers are: the megakernel is one function.
#if defined(__CUDACC__)
__host__ __device__ __forceinline__
#endif
constexpr int64_t last_dim(const amk_buffer_t& b) {
  return b.rank >= 1 ? b.shape[b.rank - 1] : b.numel;
}

}  // namespace amk::cuda
