// The GEMV family's operand checks, made once by the loader when it builds a task's record
// (marshal.cpp task_records) instead of by every task on the device, where they were a chain of
// dependent shared-memory loads and branches: ~0.7 us a task, and on the layer's dependency chain
// wherever a tile's SM was still busy with the previous level (bench/RESULTS.md, thirty-fifth
// session). The device code (ops/gemv.cuh) trusts what passes here.
#pragma once

#include <string>

#include "amk/abi.h"
#include "vm/cuda/megakernel_layout.h"

namespace amk::cuda {

struct GemvTileCheck {
  std::string error;  // empty: the operands are what ops/gemv.cuh assumes
  bool ring = false;  // the tile's rows stream through the weight ring (AMK_RECORD_RING_TILE)
};

// `r` is a GEMV-family task's record with its descriptors' pointers filled in (alignment is
// part of the answer); `layout` the CTA's (scratch, ring stages and chunk size).
GemvTileCheck check_gemv_tile(const amk_task_record_t& r, const MegakernelLayout& layout);

}  // namespace amk::cuda
