// What the model commands (compile, run, oracle) share: opening a checkpoint folder, reading a
// ScheduleConfig file, and picking the device. Every failure prints one message naming the
// input to stderr and yields nullopt / false, and the command exits kExitBadInput.
#pragma once

#include <optional>
#include <string>

#include "amk/checkpoint.h"
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

// "cpu" runs on the ReferenceVM; "cuda" is refused until the CUDA VM exists.
bool check_device(const std::string& device);

}  // namespace amk::cli
