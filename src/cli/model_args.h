// What the model commands (compile, run, oracle) share: opening a checkpoint folder, reading a
// ScheduleConfig file, and picking the device. Every failure prints one message naming the
// input to stderr and yields nullopt / false, and the command exits kExitBadInput.
#pragma once

#include <optional>
#include <string>

#include "amk/checkpoint.h"
#include "amk/cuda_vm.h"
#include "amk/ir.h"

namespace amk::cli {

std::optional<Checkpoint> open_checkpoint(const std::string& folder);

// A ScheduleConfig as its JSON object (the "config" of the program format). An empty path gives
// the defaults. Unknown fields are errors here: a knob the user wrote must not vanish.
std::optional<ScheduleConfig> load_schedule_config(const std::string& path);

// The dtype the checkpoint stores its embedding table in (F32, F16 or BF16), the WEIGHT dtype.
std::optional<DType> checkpoint_weight_dtype(const Checkpoint& checkpoint);

// Everything a model command starts from: the schedule, the checkpoint and its weight dtype.
struct ModelInputs {
  ScheduleConfig config;
  Checkpoint checkpoint;
  DType weight_dtype;
};
// The three loads above in order; the first failure has printed its message.
std::optional<ModelInputs> open_model_inputs(const std::string& folder,
                                             const std::string& config_path);

// "cpu" runs on the ReferenceVM. "cuda" is accepted only by a command that drives the CUDA VM
// (`runs_cuda`) and only where cuda_availability() says it is usable; otherwise the message says
// why (built without CUDA, no GPU, or the command has no CUDA path yet).
bool check_device(const std::string& device, bool runs_cuda = false);

// Prints a CUDA VM failure and returns the exit code: the loader refusing the program is the
// input's fault (2), a failed or timed-out launch is a failure (1).
int report_cuda_error(const CudaVmError& e);

// The built-in target of the GPU this process sees: the one with the device's SM count, the
// closest in memory among those (h100 and h200 both have 132 SMs). Throws std::runtime_error
// naming why when there is no usable GPU or no built-in target matches it.
std::string auto_target_name();

// A --gpu value: a built-in target name, or "auto" (auto_target_name()). Prints the reason and
// returns nullptr when it names nothing.
const GpuTarget* resolve_target(const std::string& name);

// A --weights value: "fp32" or "bf16" -> that WEIGHT dtype; "" -> `checkpoint_dtype` (the
// checkpoint's own). Prints the reason and returns nullopt for anything else.
std::optional<DType> resolve_weight_dtype(const std::string& weights, DType checkpoint_dtype);

}  // namespace amk::cli
