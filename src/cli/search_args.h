// The options `amk eval`, `amk loop`, `amk autoresearch` and `amk propose` share (the model, the
// target, the device, the check), and their translation into amk/evaluate.h's EvalOptions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "amk/evaluate.h"

namespace CLI {
class App;
}

namespace amk::cli {

struct SearchArgs {
  std::string model, gpu = "h100", device = "sim", weights;
  int64_t context = 512;
  int64_t check_layers = 0;
  std::vector<int64_t> check_positions{0, 1, 65, 300};
  int tokens = 256, warmup = 32, tokens_per_launch = 64;
  double launch_timeout_s = 10;
  bool no_weight_ring = false;
  bool json = false;
};

// `devices`: the --device values the command takes ("cpu|sim|cuda" or "sim|cuda").
void add_search_options(CLI::App* cmd, SearchArgs& args, const std::string& devices);

// The model's name in results.tsv: the folder's (or .gguf file's) name.
std::string model_name_of(const std::string& path);

// Checks the options (prints why and returns nullopt): a known target, a device the command
// takes, a usable GPU for cuda, ranges.
std::optional<eval::EvalOptions> eval_options(const SearchArgs& args,
                                              const std::vector<std::string>& devices);

// The amk binary itself, for the evaluation worker.
std::string self_executable();

}  // namespace amk::cli
