// The bytes one decode step must move, as amk bench counts them for its floor, and as amk sim
// prints beside its prediction: every weight byte once, except a tensor only EMBED reads (one
// row per token); KV-cache rows read at a position, reported beside the floor, not in it.
#pragma once

#include <cstdint>

#include "amk/ir.h"

namespace amk {

struct TrafficEstimate {
  int64_t weight_bytes = 0;  // the floor: every weight byte a step must read once
  int64_t kv_bytes = 0;      // KV cache rows read at `position` (informational)
};

TrafficEstimate estimate_traffic(const Program& program, int64_t position);

}  // namespace amk
