#include "cli/model_args.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "amk/cuda_vm.h"
#include "amk/json.h"
#include "amk/model_config.h"
#include "amk/safetensors.h"
#include "cli/commands.h"

namespace amk::cli {

std::optional<Checkpoint> open_checkpoint(const std::string& folder) {
  try {
    return Checkpoint::open(folder);
  } catch (const std::exception& e) {  // CheckpointError, SafetensorsError, ModelConfigError
    std::cerr << "amk: cannot open checkpoint '" << folder << "': " << e.what() << "\n";
    return std::nullopt;
  }
}

std::optional<ScheduleConfig> load_schedule_config(const std::string& path) {
  if (path.empty()) return ScheduleConfig{};
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "amk: cannot read config '" << path << "'\n";
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  // The program loader owns the config's JSON decoding; a program holding only the config
  // reuses it exactly.
  const LoadResult r = program_from_json("{\"config\": " + text.str() + "\n}");
  if (!r) {
    std::cerr << "amk: invalid config '" << path << "': " << r.error << "\n";
    return std::nullopt;
  }
  if (!r.warnings.empty()) {
    std::cerr << "amk: invalid config '" << path << "': " << r.warnings.front() << "\n";
    return std::nullopt;
  }
  if (!r.program->config) {
    std::cerr << "amk: invalid config '" << path << "': expected a JSON object\n";
    return std::nullopt;
  }
  return *r.program->config;
}

std::optional<DType> checkpoint_weight_dtype(const Checkpoint& ck) {
  const TensorView* t = ck.find("model.embed_tokens.weight");
  if (t == nullptr) {
    std::cerr << "amk: " << ck.folder().string()
              << ": missing tensor 'model.embed_tokens.weight'\n";
    return std::nullopt;
  }
  switch (t->dtype) {
    case StDType::F32:
      return DType::F32;
    case StDType::F16:
      return DType::F16;
    case StDType::BF16:
      return DType::BF16;
    default:
      std::cerr << "amk: " << ck.folder().string() << ": weights of dtype " << name_of(t->dtype)
                << " are not supported (F32, F16, BF16)\n";
      return std::nullopt;
  }
}

bool check_device(const std::string& device, bool runs_cuda) {
  if (device == "cpu") return true;
  if (device != "cuda") {
    std::cerr << "amk: unknown --device '" << device << "' (cpu or cuda)\n";
    return false;
  }
  if (!runs_cuda) {
    std::cerr << "amk: --device cuda: this command does not drive the CUDA VM yet; use --device "
                 "cpu (the reference VM)\n";
    return false;
  }
  const CudaAvailability a = cuda_availability();
  if (!a.usable) {
    std::cerr << "amk: --device cuda: " << a.message << "\n";
    return false;
  }
  return true;
}

std::string auto_target_name() {
  const CudaAvailability a = cuda_availability();
  if (!a.usable) throw std::runtime_error("--gpu auto needs a usable GPU: " + a.message);
  const GpuTarget* best = nullptr;
  auto distance = [&](const GpuTarget& t) {
    return std::llabs(static_cast<long long>(t.hbm_bytes - a.global_mem_bytes));
  };
  for (const GpuTarget& t : builtin_targets()) {
    if (t.num_sms != a.sm_count) continue;
    // The SM count alone cannot tell an H100 (80 GB) from an H200 (141 GB): the memory can.
    if (best == nullptr || distance(t) < distance(*best)) best = &t;
  }
  if (best == nullptr) {
    std::string names;
    for (const GpuTarget& t : builtin_targets())
      names += (names.empty() ? "" : ", ") + t.name + " (" + std::to_string(t.num_sms) + " SMs)";
    throw std::runtime_error("--gpu auto: no built-in target has the " +
                             std::to_string(a.sm_count) + " SMs of " + a.device_name +
                             "; name one with --gpu (" + names + ")");
  }
  return best->name;
}

const GpuTarget* resolve_target(const std::string& name) {
  std::string resolved = name;
  if (name == "auto") {
    try {
      resolved = auto_target_name();
    } catch (const std::exception& e) {
      std::cerr << "amk: " << e.what() << "\n";
      return nullptr;
    }
  }
  const GpuTarget* target = find_target(resolved);
  if (target == nullptr) {
    std::string names;
    for (const GpuTarget& t : builtin_targets()) names += (names.empty() ? "" : ", ") + t.name;
    std::cerr << "amk: unknown --gpu '" << name << "' (built-in: " << names << ", or auto)\n";
  }
  return target;
}

std::optional<DType> resolve_weight_dtype(const std::string& weights, DType checkpoint_dtype) {
  if (weights.empty()) return checkpoint_dtype;
  if (weights == "fp32") return DType::F32;
  if (weights == "bf16") return DType::BF16;
  std::cerr << "amk: unknown --weights '" << weights << "' (fp32 or bf16)\n";
  return std::nullopt;
}

std::optional<ModelInputs> open_model_inputs(const std::string& folder,
                                             const std::string& config_path) {
  auto config = load_schedule_config(config_path);
  if (!config) return std::nullopt;
  auto checkpoint = open_checkpoint(folder);
  if (!checkpoint) return std::nullopt;
  const auto dtype = checkpoint_weight_dtype(*checkpoint);
  if (!dtype) return std::nullopt;
  return ModelInputs{std::move(*config), std::move(*checkpoint), *dtype};
}

int report_cuda_error(const CudaVmError& e) {
  std::cerr << "amk: --device cuda: " << name_of(e.status()) << ": " << e.what() << "\n";
  return e.status() == CudaStatus::Rejected ? kExitBadInput : kExitFailed;
}

}  // namespace amk::cli
