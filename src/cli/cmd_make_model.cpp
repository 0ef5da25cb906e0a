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
#include "cli/model_args.h"
#include "cli/options.h"
#include "cli/table.h"

namespace amk::cli {

namespace {

struct MakeModelOptions {
  std::string preset, dtype = "bf16", output;
  uint64_t seed = 0;
  bool seed_given = false;  // else a random seed, printed
  bool force = false;       // write into a non-empty folder
};

int run_make_model(const MakeModelOptions& options) {
  MakeModelOptions opt = options;
  if (!opt.seed_given) opt.seed = random_seed();
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
  // Never over an existing checkpoint (or anything else) unless asked to.
  if (const std::string problem = output_folder_problem(opt.output); !problem.empty()) {
    if (!opt.force || problem.find("not empty") == std::string::npos) {
      std::cerr << "amk: -o '" << opt.output << "' " << problem
                << (problem.find("not empty") != std::string::npos
                        ? "; pass --force to write into it anyway"
                        : "")
                << "\n";
      return kExitBadInput;
    }
  }
  try {
    write_random_checkpoint(opt.output, opt.preset, dt->second, opt.seed);
  } catch (const std::exception& e) {
    std::cerr << "amk: cannot write '" << opt.output << "': " << e.what() << "\n";
    return kExitFailed;
  }
  const int64_t bytes = weight_bytes(m, dt->second);
  std::cout << fmt::format("wrote     {} ({} {}, {} layers, {} parameters, {} of weights, seed {}{})\n",
                           opt.output, opt.preset, name_of(dt->second), m.num_hidden_layers,
                           parameter_count(m), format_bytes(bytes), opt.seed,
                           opt.seed_given ? "" : ", random: --seed " + std::to_string(opt.seed) +
                                                     " repeats it");
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
  CLI::Option* seed = cmd->add_option(
      "--seed", opt->seed, "Random seed (same seed, same bytes); default: a random one, printed");
  seed->check(seed_number());
  cmd->add_option("-o,--output", opt->output, "Checkpoint folder to write (new or empty)")
      ->required();
  cmd->add_flag("--force", opt->force, "Write into a folder that is not empty (files are replaced)");
  cmd->callback([opt, seed, &action] {
    opt->seed_given = seed->count() > 0;
    action = [opt] { return run_make_model(*opt); };
  });
}

}  // namespace amk::cli
