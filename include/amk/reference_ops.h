// Reference semantics of every opcode (IR_SPEC §7), the numeric ground truth.
// Frozen conventions: weight [N_out, K_in]; GEMV/GEMM compute x @ W.T into
// out[..., n_off:n_off+N_tile]; accumulate in fp32, round once to the output dtype; RoPE is
// rotate-half; GQA repeats each KV head n_heads/n_kv_heads times (repeat_interleave); the default
// attention scale is 1/sqrt(head_dim). docs/OPCODES.md describes every input, output and param.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "amk/ir.h"
#include "amk/tensor.h"

namespace amk {

// Thrown when a task's tensors do not fit its op (wrong shape, dtype, out-of-range index).
struct OpError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Per-launch state the host sets between decode steps, beside the counters
// (docs/RUNTIME_POSITION.md). Only ops whose flags ask for it read it.
struct StepState {
  std::optional<int64_t> position;  // this step's token position
};

// Executes one task. `outputs` may alias `inputs` (KV_APPEND writes the cache it reads): an op
// reads everything it needs before it writes.
void run_reference_op(Op op, const Params& params, std::span<const Tensor* const> inputs,
                      std::span<Tensor* const> outputs);
// The same, for a task whose flags read the step state (KV_APPEND and ATTENTION_TILE runtime
// bits, amk/op_flags.h); such a task without a position is an OpError.
void run_reference_op(Op op, const Params& params, std::span<const Tensor* const> inputs,
                      std::span<Tensor* const> outputs, const StepState& step);

}  // namespace amk
