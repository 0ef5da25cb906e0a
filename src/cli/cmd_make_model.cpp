// `amk make-model --preset NAME --dtype bf16|f16|f32 [--seed N] -o DIR`: a randomly initialised
// checkpoint at a published shape, because real weights cannot be downloaded here.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "amk/model_presets.h"
#include "amk/random_checkpoint.h"
#include "cli/commands.h"
#include "cli/table.h"

namespace amk::cli {

namespace {

struct MakeModelOptions {
  std::string preset, dtype = "bf16", output;
  uint64_t seed = 0;
};

int run_make_model(const MakeModelOptions& opt) {
  static const std::map<std::string, DType> dtypes = {
      {"bf16", DType::BF16}, {"f16", DType::F16}, {"f32", DType::F32}};
  const auto dt = dtypes.find(opt.dtype);
  if (dt == dtypes.end()) {
    std::cerr << "amk: unknown --dtype '" << opt.dtype << "' (bf16, f16 or f32)\n";
    return kExitBadInput;
  }
  std::string config_text;
  try {
    config_text = model_preset_config(opt.preset, "bfloat16");
  } catch (const std::invalid_argument& e) {
    std::cerr << "amk: " << e.what() << "\n";
    return kExitBadInput;
  }
  const ModelConfig m = parse_model_config(config_text);
  try {
    write_random_checkpoint(opt.output, opt.preset, dt->second, opt.seed);
  } catch (const std::exception& e) {
    std::cerr << "amk: cannot write '" << opt.output << "': " << e.what() << "\n";
    return kExitFailed;
  }
  const int64_t bytes = weight_bytes(m, dt->second);
  std::cout << fmt::format("wrote     {} ({} {}, {} layers, {} parameters, {} of weights, seed {})\n",
                           opt.output, opt.preset, name_of(dt->second), m.num_hidden_layers,
                           parameter_count(m), format_bytes(bytes), opt.seed);
  return kExitOk;
}

}  // namespace

void add_make_model_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<MakeModelOptions>();
  CLI::App* cmd = app.add_subcommand(
      "make-model", "Write a randomly initialised checkpoint at a published model shape");
  std::string names;
  for (std::string_view n : model_preset_names()) names += (names.empty() ? "" : ", ") + std::string(n);
  cmd->add_option("--preset", opt->preset, "Model shape: " + names)->required();
  cmd->add_option("--dtype", opt->dtype, "Weight dtype: bf16, f16 or f32")->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Random seed (same seed, same bytes)")->capture_default_str();
  cmd->add_option("-o,--output", opt->output, "Checkpoint folder to write")->required();
  cmd->callback([opt, &action] { action = [opt] { return run_make_model(*opt); }; });
}

}  // namespace amk::cli
