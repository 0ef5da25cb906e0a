// The GPU half of an evaluation, shared by `amk bench` and `amk eval/loop/autoresearch --device
// cuda`: check the CUDA VM's logits against a reference at a few positions, and only when every
// step passes, time greedy decode in launches of several tokens (PROGRAM.md §7: no latency
// without a PASS).
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/cuda_vm.h"
#include "amk/ir.h"
#include "amk/logit_check.h"

namespace amk::eval {

struct GpuRunOptions {
  // Positions compared with the reference, ascending: a position not reached by stepping is
  // seek()ed to with the same seeded KV cache on both sides (the reference callback's job too).
  std::vector<int64_t> check_positions{0, 1, 65, 300};
  int tokens_per_launch = 64;
  int warm_launches = 1;
  int timed_launches = 4;
  // The position the warm-up launch starts at: 0 from an empty cache; > 0 seek()s there first
  // (a seeded KV cache below it), so a long context's decode can be timed without decoding up
  // to it.
  int64_t start_position = 0;
  CudaVmOptions vm;
  int profile_steps = 0;  // > 0: one more launch of this many steps with per-task stamps
  // At the first check step that fails: replay the checks so far on the ReferenceVM (the same
  // program) and log each layer's K and V rows at that position against the GPU's
  // (amk/kv_row_check.h: where the error entered). Minutes on a big model, so opt-in.
  bool diagnose_failed_check = false;
};

struct GpuRun {
  std::vector<StepCheck> checks;
  bool pass = false;
  std::vector<double> us_per_token;  // one per timed launch; empty unless pass
  int64_t tokens = 0;
  std::vector<CudaVM::TaskTiming> profile;  // the last step of the profiled launch
  double check_seconds = 0;
};

// The reference's logits for the step at `position` on `token`.
using ReferenceLogits = std::function<std::vector<float>(int64_t position, int64_t token)>;

// One line per check step and one for the timing go to `log`. Throws CudaVmError (no GPU, a
// rejected program, a launch that failed or timed out) or DecodeError.
GpuRun check_and_time_on_gpu(const Checkpoint& checkpoint, const Program& program,
                             const GpuRunOptions& options, const ReferenceLogits& reference,
                             std::ostream& log);

double median(std::vector<double> v);

}  // namespace amk::eval
