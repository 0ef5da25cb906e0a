// Compiles the shared ABI header under nvcc for the device, so host and device agree on every
// size and offset (the static asserts in abi.h run in both compilers).
#include "amk/abi.h"

namespace amk::cuda {

static_assert(sizeof(amk_instruction_t) == 240, "device sees the host's instruction layout");

// A device function that touches every ABI struct keeps the header honest under nvcc.
__global__ void abi_layout_probe(const amk_program_t program, int64_t* out) {
  const amk_instruction_t& inst = program.instructions[0];
  out[0] = sizeof(amk_program_t) + inst.params.K + program.buffers[0].shape[0];
}

}  // namespace amk::cuda
