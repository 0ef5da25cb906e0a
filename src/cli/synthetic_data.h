// Deterministic stand-in data for `amk exec`, so any program can run without a checkpoint.
//
// Every value is a pure function of (seed, buffer id, element index), independent of binding
// order and platform:
//   * float WEIGHT/CONST: uniform in [-0.1, 0.1]; a norm weight (input 1 of RMSNORM/LAYERNORM)
//     is 1 + uniform [-0.1, 0.1] so activations keep their scale;
//   * integer WEIGHT/CONST: I8 in [-8, 7], I4/U8 the full unsigned range, I32/BOOL 0;
//   * float IO_INPUT: uniform in [-1, 1];
//   * integer IO_INPUT: token ids (input 0 of EMBED) are seed mod the smallest table's rows;
//     positions (input 1 of ROPE) are the program's KV_APPEND pos (0 without one), or, in a
//     program that reads the step position (meta.step_position names its buffer), the
//     `step_position` given, as is that buffer; anything else 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "amk/reference_vm.h"

namespace amk::cli {

// Binds every WEIGHT, CONST and IO_INPUT buffer of vm's program. Returns one note per integer
// IO_INPUT ("token = 3 (EMBED id, table rows 64)").
std::vector<std::string> bind_synthetic_data(ReferenceVM& vm, uint64_t seed,
                                             int64_t step_position = 0);

// The IO_INPUT that a program reading the step position names in meta.step_position (the
// lowering's "pos"), or nullptr for a program whose positions are its params.
const Buffer* step_position_buffer(const Program& program);

}  // namespace amk::cli
