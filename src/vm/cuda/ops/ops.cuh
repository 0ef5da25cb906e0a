// Every device instruction, one implementation each (IR_SPEC §8.1 Layer 1). Each takes the
// OpContext of one task and runs on the consumer threads; none touches a counter or a buffer
// the task does not name. Semantics are docs/OPCODES.md / src/vm/reference/ops/*.cpp exactly.
#pragma once

#include "vm/cuda/ops/argmax.cuh"
#include "vm/cuda/ops/attention.cuh"
#include "vm/cuda/ops/elementwise.cuh"
#include "vm/cuda/ops/embed.cuh"
#include "vm/cuda/ops/gemv.cuh"
#include "vm/cuda/ops/kv_append.cuh"
#include "vm/cuda/ops/norm.cuh"
#include "vm/cuda/ops/rope.cuh"
