// Generators of realistic programs for tests and benchmarks (tiled GEMVs joined by all-join
// counters, the shape the lowering emits).
#pragma once
#include <cstdint>
#include "amk/ir.h"
namespace amk::testing {
// A decoder-like chain of `layers` stages, each a tiled GEMV of `tiles` tasks writing one buffer
// under one shared counter, joined by the next stage's all-join wait; ~layers*tiles tasks.
Program make_tiled_chain(int64_t layers, int64_t tiles);
}  // namespace amk::testing
