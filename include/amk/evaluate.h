// evaluate(model, config, target, device) -> Verdict: the one evaluation path of issue 13.
// `amk eval`, `amk loop`, `amk autoresearch` (through its worker process) and the GPU half of
// `amk bench` all run it. In order, each a gate for the next (PROGRAM.md §3):
//   1. the config's knobs against the knob space's ranges and the target's caps   -> REJECTED
//   2. lower() and validate() the whole program                                   -> REJECTED
//   3. correctness: the lowered program checked numerically against the reference -> FAIL
//      cpu / sim: the data mode. The schedule's lowering of the model (or of a reduced-depth
//        twin with the same per-layer shapes, for a model too big for the CPU) runs on the
//        reference VM at a few positions and is compared with the plain lowering (no fusion,
//        no tiles, linear pages) on the same VM, logit by logit;
//      cuda: the CUDA VM's logits against the reference VM's at the same positions;
//   4. latency, only after a PASS: sim predicts it (amk/timing_sim.h, `predicted`), cuda times
//      greedy decode on the GPU (`measured-gpu`); cpu gives none.
// A CUDA launch that times out is TIMEOUT, any other failure CRASH.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/ir.h"
#include "amk/step_trace.h"
#include "amk/verdict.h"

namespace amk::eval {

enum class EvalDevice { Cpu, Sim, Cuda };
std::string_view name_of(EvalDevice d);
// "cpu", "sim" or "cuda"; nullopt otherwise.
std::optional<EvalDevice> eval_device_from_name(std::string_view name);

// The evaluation cannot start at all (no GPU for --device cuda, a model that does not lower
// with any config): not a verdict, the command's error.
class EvalSetupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EvalOptions {
  EvalDevice device = EvalDevice::Sim;
  int64_t max_context = 512;  // the program's KV length (the check reaches position 300)
  std::vector<int64_t> check_positions{0, 1, 65, 300};
  // Layers of the data-mode check: 0 = the whole model when it has at most
  // kTwinParameterLimit parameters, else a twin of kTwinLayers layers.
  int64_t check_layers = 0;
  std::optional<DType> weight_dtype;  // WEIGHT dtype; nullopt: the checkpoint's (bf16 on cuda)
  // cuda only
  int tokens = 256, warmup = 32, tokens_per_launch = 64;
  double launch_timeout_s = 10.0;
  bool weight_ring = true;
  bool profile = true;  // a profiled launch gives the critical-path shares
  // Where the reference's logits are kept between workers and machine starts
  // (amk/reference_cache.h; a campaign's workdir/references); empty: computed by every worker.
  std::string reference_cache_dir;
};

inline constexpr int64_t kTwinParameterLimit = 60'000'000;
inline constexpr int64_t kTwinLayers = 2;

// TEST hooks (PROGRAM.md §4's failure modes on demand): a numeric fault perturbs the schedule's
// logits before the comparison, so the check must say FAIL; a structural fault makes the lowered
// program's first task wait on the last one's counter (a cycle), so validate() must reject it.
struct EvalFaults {
  bool perturb_logits = false;
  bool corrupt_program = false;
};

// The config a data-mode check compares against: no fusion, default tiles, no split-KV, linear
// pages, round-robin SMs, no prefetch; the simplest lowering of the model.
ScheduleConfig plain_schedule_config();

// Holds the checkpoint (loaded once), the reference logits (computed once) and a cache of
// correctness verdicts by schedule id, so a search evaluates each config at the cost of its own
// lowering and check only.
class Evaluator {
 public:
  // Throws EvalSetupError (no usable GPU for cuda, the reference cannot be lowered) or
  // std::invalid_argument for options out of range.
  Evaluator(Checkpoint checkpoint, std::string model_name, GpuTarget target, EvalOptions options);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // Never throws for a bad config: every failure is a verdict.
  Verdict evaluate(const ScheduleConfig& config, const EvalFaults& faults = {});

  // Computes the reference logits now (the plain lowering on the reference VM: minutes for an
  // 8B model on cuda), so the first evaluate() costs what every other one does. The worker calls
  // it before it says ready, outside the per-evaluation watchdog. Throws DecodeError.
  void prepare_reference();

  // The stamps of the last PASS evaluation (simulated or profiled; empty otherwise) and its
  // program, for the per-level table.
  const std::vector<TaskStamps>& last_stamps() const { return last_stamps_; }
  const std::optional<Program>& last_program() const { return last_program_; }
  double ceiling_gbs() const { return ceiling_gbs_; }

  const ModelConfig& model() const { return checkpoint_.config(); }
  const Checkpoint& checkpoint() const { return checkpoint_; }
  const std::string& model_name() const { return model_name_; }
  const GpuTarget& target() const { return target_; }
  const EvalOptions& options() const { return options_; }
  // default_schedule_config() for this model, target and context: the campaign's baseline.
  ScheduleConfig default_config() const;
  int64_t check_layers() const { return check_model_.num_hidden_layers; }

 private:
  std::optional<Verdict> check_data_mode(const ScheduleConfig& config, const EvalFaults& faults,
                                         Verdict& v);
  const std::vector<float>& reference_logits(size_t index, bool full_depth);

  Checkpoint checkpoint_;
  std::string model_name_;
  GpuTarget target_;
  EvalOptions options_;
  ModelConfig check_model_;  // the model, or its reduced-depth twin
  std::optional<DType> weight_dtype_;
  std::vector<std::vector<float>> reference_;  // per check position
  std::map<std::string, Verdict> data_cache_;  // schedule id -> the data-mode verdict
  std::vector<TaskStamps> last_stamps_;
  std::optional<Program> last_program_;
  double ceiling_gbs_ = 0;  // cuda: the measured read ceiling
};

}  // namespace amk::eval
