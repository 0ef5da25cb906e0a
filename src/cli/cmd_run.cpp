// `amk run MODEL_DIR --device cpu|cpu-ref|cuda --prompt-ids 1,2,3 -n 32`: greedy generation, every
// token (prompt and generated) one decode step. `cpu` runs the fast CPU decoder
// (amk/cpu_decoder.h) straight from the checkpoint; `cpu-ref` and `cuda` lower the decode step
// once and run that program: on the ReferenceVM (the oracle), or on the CUDA VM, where the
// generated tokens come from multi-step launches with no host round trip inside one.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amk/cpu_decoder.h"
#include "amk/cuda_vm.h"
#include "amk/decoder.h"
#include "amk/lowering.h"
#include "cli/commands.h"
#include "cli/model_args.h"

namespace amk::cli {

namespace {

struct RunOptions {
  std::string model_dir, device = "cpu", prompt, config, gpu = "h100";
  int64_t n = 32;
};

std::optional<std::vector<int64_t>> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size()) return std::nullopt;
      ids.push_back(v);
    } catch (const std::exception&) {
      return std::nullopt;
    }
    start = end + 1;
  }
  return ids;
}

int run_run(const RunOptions& opt) {
  if (!check_device(opt.device, /*runs_cuda=*/true)) return kExitBadInput;
  const GpuTarget* target = resolve_target(opt.gpu);
  if (target == nullptr) return kExitBadInput;
  const auto prompt = parse_ids(opt.prompt);
  if (!prompt || prompt->empty()) {
    std::cerr << "amk: --prompt-ids must be comma-separated integers, got '" << opt.prompt << "'\n";
    return kExitBadInput;
  }
  const auto in = open_model_inputs(opt.model_dir, opt.config);
  if (!in) return kExitBadInput;
  const int64_t vocab = in->checkpoint.config().vocab_size;
  for (int64_t id : *prompt)
    if (id < 0 || id >= vocab) {
      std::cerr << "amk: --prompt-ids: token " << id << " is outside the vocabulary [0, " << vocab
                << ")\n";
      return kExitBadInput;
    }
  // The context (hence the KV cache) is sized and checked before anything is lowered or
  // allocated: a prompt or -n past the model's positions is a usage error.
  const int64_t max_context = int64_t(prompt->size()) + std::max<int64_t>(opt.n, 1);
  if (!check_positions(in->checkpoint.config(), max_context,
                       fmt::format("--prompt-ids ({} tokens) and -n {}", prompt->size(), opt.n)))
    return kExitBadInput;
  try {
    std::unique_ptr<Decoder> dec;
    if (opt.device == "cpu") {  // the fast CPU decoder runs the model itself: nothing to lower
      dec = make_cpu_decoder(in->checkpoint, max_context, CpuDecoderKind::Fast);
    } else {
      Program program =
          lower(in->checkpoint.config(), in->schedule(*target, max_context), *target, max_context,
                in->weight_dtype);
      if (opt.device == "cpu-ref")
        if (const std::string problem = host_memory_problem(program); !problem.empty()) {
          std::cerr << "amk: cannot run '" << opt.model_dir << "' with a context of "
                    << max_context << " tokens: " << problem << "\n";
          return kExitBadInput;
        }
      if (opt.device == "cuda")
        dec = std::make_unique<CudaDecoder>(in->checkpoint, std::move(program));
      else
        dec = std::make_unique<ReferenceDecoder>(in->checkpoint, std::move(program));
    }
    const std::vector<int64_t> out = dec->generate(*prompt, opt.n);
    std::string line;
    for (int64_t id : out) line += (line.empty() ? "" : ",") + std::to_string(id);
    std::cout << line << "\n";
  } catch (const DecodeError& e) {
    std::cerr << "amk: " << e.what() << "\n";
    return kExitFailed;
  } catch (const CudaVmError& e) {
    return report_cuda_error(e);
  } catch (const std::exception& e) {  // lowering or checkpoint problems: the input's fault
    std::cerr << "amk: cannot run '" << opt.model_dir << "': " << e.what() << "\n";
    return kExitBadInput;
  }
  return kExitOk;
}

}  // namespace

void add_run_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Greedy-generate tokens from a checkpoint");
  cmd->add_option("model_dir", opt->model_dir, "Checkpoint folder or .gguf file")->required();
  cmd->add_option("--device", opt->device,
                  "cpu (the fast CPU decoder), cpu-ref (the reference VM: the oracle) or cuda")->capture_default_str();
  cmd->add_option("--prompt-ids", opt->prompt, "Prompt token ids, e.g. 1,2,3")->required();
  cmd->add_option("-n", opt->n, "Tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--config", opt->config,
                  "ScheduleConfig JSON file (default: derived from the model and the target)");
  cmd->add_option("--gpu", opt->gpu, "Target to lower for (h100, h200, ..., or auto)")
      ->capture_default_str();
  cmd->callback([opt, &action] { action = [opt] { return run_run(*opt); }; });
}

}  // namespace amk::cli
