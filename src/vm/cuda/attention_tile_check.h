// The attention tiles' operand checks (ATTENTION_TILE, ROPE_KV_ATTENTION_TILE), made once by the
// loader when it builds a task's record (marshal.cpp task_records) instead of by every task on the
// device, as the GEMV family's are (gemv_tile_check.h): there they ran before the task's gate on
// an SM that runs the attention's code once a layer, ~2.1 us at any context, on the layer's chain
// wherever the task's SM was still busy (bench/RESULTS.md, forty-third session). The device code
// (ops/attention.cuh) trusts what passes here; what only the step's position decides (the
// appended row inside the cache, the RoPE table's values) it still checks itself.
#pragma once

#include <string>

#include "amk/abi.h"
#include "vm/cuda/megakernel_layout.h"

namespace amk::cuda {

// Empty when `r` (an attention task's record, descriptors filled in) is what ops/attention.cuh
// assumes with `layout`'s op scratch; otherwise what is wrong, in words.
std::string check_attention_tile(const amk_task_record_t& r, const MegakernelLayout& layout);

}  // namespace amk::cuda
