// Program -> the ABI tables the megakernel walks (IR_SPEC §8): instructions, SM queues, the
// per-step counter increments of the epoch thresholds, the decode sink and the shared-memory
// layout. Plain C++ with no CUDA dependency, so every rule here is tested on the CPU
// (tests/test_marshal.cpp); the loader (cuda_vm.cu) only copies the result to the device.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "amk/abi.h"
#include "amk/ir.h"
#include "vm/cuda/megakernel_layout.h"

namespace amk::cuda {

// The program cannot run on the CUDA VM (an op or dtype it has no device code for, a task with
// no SM, a tile too large for shared memory). The message names the task / buffer.
class MarshalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where each buffer lives in device memory, decided by the loader from the PageAllocation.
struct BufferPlacement {
  enum class Where { Own, Arena };  // Own: its own allocation; Arena: scratch arena + offset
  Where where = Where::Own;
  int64_t arena_offset = 0;  // bytes, 256-aligned (Arena only)
  int64_t nbytes = 0;
};

struct MarshalledProgram {
  // Buffers in id order: the ABI indexes buffers by position, so instruction operands are the
  // positions of the buffers the tasks name (ids need not be dense in the IR).
  std::vector<amk_buffer_t> buffers;   // ptr = nullptr; the loader fills it
  std::vector<BufferPlacement> placement;  // parallel to buffers
  std::vector<int64_t> buffer_ids;     // position -> IR buffer id
  int64_t arena_bytes = 0;             // the scratch arena holding every Arena buffer
  std::vector<amk_instruction_t> instructions;  // task list order
  std::vector<int32_t> sm_queue_offset;         // n_sms + 1
  std::vector<int32_t> sm_queue;                // instruction indices, each SM's in list order
  std::vector<uint32_t> counter_step_increment; // producers per counter per step
  int32_t n_sms = 0;
  int32_t sink_instruction = -1;   // the SAMPLE_ARGMAX every task happens-before, else -1
  int32_t pos_buffer = -1;         // position of meta.step_position's buffer ("pos"), else -1
  int32_t token_buffer = -1;       // position of the "token" IO_INPUT, else -1
  int32_t next_token_buffer = -1;  // position of the sink's output, else -1
  MegakernelLayout layout;
};

struct MarshalLimits {
  int64_t smem_bytes_per_block_optin = 232448;  // the device's (cudaDevAttrMaxSharedMemoryPerBlockOptin)
  int64_t num_sms = 0;                           // the device's; 0 = do not check
};

// Throws MarshalError. `program` must have passed validate() (the loader checks first).
MarshalledProgram marshal(const Program& program, const MarshalLimits& limits);

// The task records (abi.h amk_task_record_t), in sm_queue order, of a marshalled program whose
// buffer table `table` (parallel to m.buffers) holds the device pointers. A GEMV-family task's
// operands are checked here (gemv_tile_check.h; MarshalError names the instruction and what is
// wrong) and its record says whether its rows stream through the weight ring.
std::vector<amk_task_record_t> task_records(const MarshalledProgram& m,
                                            const std::vector<amk_buffer_t>& table);

// The amk_params_t of one task's params (PARAM_FIELDS order; absent fields 0).
amk_params_t marshal_params(const Params& params);

}  // namespace amk::cuda
