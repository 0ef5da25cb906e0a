// The bytes one decode step must move: the numerator of every bandwidth floor AMK reports.
#pragma once

#include <cstdint>

#include "amk/ir.h"

namespace amk::eval {

struct TrafficEstimate {
  int64_t weight_bytes = 0;  // the floor: every weight byte a step must read once
  int64_t kv_bytes = 0;      // KV cache rows read at the given mean position (informational)
};

// A weight read only by EMBED costs one row per token (the token's embedding); any other reader
// (a GEMV, or an lm_head tied to the embedding) streams the whole tensor.
TrafficEstimate estimate_traffic(const Program& program, int64_t mean_position);

}  // namespace amk::eval
