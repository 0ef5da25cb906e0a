// What the model commands (compile, run, oracle) share: opening a checkpoint folder, reading a
// ScheduleConfig file, and picking the device. Every failure prints one message naming the
// input to stderr and yields nullopt / false, and the command exits kExitBadInput.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/cpu_decoder.h"
#include "amk/cuda_vm.h"
#include "amk/ir.h"

namespace amk::cli {

std::optional<Checkpoint> open_checkpoint(const std::string& folder);

// The CPU decoder a --device value names ("cpu" or "cpu-ref"; check_device() has accepted it).
CpuDecoderKind cpu_decoder_kind(const std::string& device);

// A ScheduleConfig as its JSON object (the "config" of the program format), from a regular file
// or "-" (standard input). An empty path, or a file holding {}, gives the defaults. An unknown
// field is a warning on stderr ("amk: warning: config ...: unknown field ..."), as in programs:
// the rest of the config is used.
std::optional<ScheduleConfig> load_schedule_config(const std::string& path);

// The dtype the checkpoint stores its embedding table in (F32, F16 or BF16), the WEIGHT dtype.
std::optional<DType> checkpoint_weight_dtype(const Checkpoint& checkpoint);

// Everything a model command starts from: the schedule, the checkpoint and its weight dtype.
struct ModelInputs {
  ScheduleConfig config;
  Checkpoint checkpoint;
  DType weight_dtype;
  bool config_given = false;  // --config named a file; else schedule() derives one
  // The config to lower with: the --config file's, or default_schedule_config() for this
  // model, target and context (amk/lowering.h).
  ScheduleConfig schedule(const GpuTarget& target, int64_t max_context) const;
};
// The three loads above in order; the first failure has printed its message.
std::optional<ModelInputs> open_model_inputs(const std::string& folder,
                                             const std::string& config_path);

// --tp CLUSTERS,SIZE,ATTENTION (amk sim, amk bench): the derived config of a tensor-parallel
// step, tensor_parallel_schedule_config (amk/lowering.h). nullopt, after printing why, for a
// malformed value or one given beside --config (`command` names the caller).
struct TensorParallelShape {
  int64_t clusters = 0, size = 0, attention = 0;
};
std::optional<TensorParallelShape> parse_tp_option(const std::string& value, bool config_given,
                                                   const std::string& command);

// A context of `positions` tokens (what a command is about to lower for): refused, with a message
// naming `what` (the options that asked for it) and the limit, when it exceeds the model's
// max_position_embeddings. Checked before anything is lowered or allocated.
bool check_positions(const ModelConfig& model, int64_t positions, const std::string& what);

// The host memory a ReferenceVM (or ReferenceDecoder) would hold for `program`'s buffers (KV
// cache included): "" when it fits, else a message naming the bytes and the limit (the VM's
// caps, and the machine's physical memory). Computed from the declarations, nothing allocated.
std::string host_memory_problem(const Program& program);

// Why `output` must not be written: it is one of `inputs` (files or folders, compared after
// resolving symlinks, and as the same file for hard links), an existing file inside an input
// folder, or a new file there that a checkpoint reader would read (config.json, *.safetensors,
// ...). "" when it is safe. The message names the input.
std::string overwrite_problem(const std::string& output, const std::vector<std::string>& inputs);

// Why a command that creates a model folder must not write into `dir`: it is a file, or a folder
// that is not empty ("is not empty (3 entries)"). "" for a new or empty folder.
std::string output_folder_problem(const std::string& dir);

// "cpu" runs the fast CPU decoder (amk/cpu_decoder.h), "cpu-ref" the ReferenceVM over the lowered
// program (the oracle: slow, op by op in double). "cuda" is accepted only by a command that drives the CUDA VM
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
