#include "cli/model_args.h"

#include <fstream>
#include <iostream>
#include <sstream>

#include "amk/json.h"
#include "amk/model_config.h"
#include "amk/safetensors.h"

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

bool check_device(const std::string& device) {
  if (device == "cpu") return true;
  if (device == "cuda")
    std::cerr << "amk: CUDA VM not built yet; use --device cpu (the reference VM)\n";
  else
    std::cerr << "amk: unknown --device '" << device << "' (cpu or cuda)\n";
  return false;
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

}  // namespace amk::cli
