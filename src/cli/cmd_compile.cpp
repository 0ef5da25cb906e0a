// `amk compile MODEL_DIR --gpu h100 [--config cfg.json] [--max-context N] -o prog.json`: lower a
// checkpoint's decode step for a target and a ScheduleConfig, and say what came out and how fast
// it could possibly run (the weights streamed once per token at the target's bandwidth).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "amk/decoder.h"
#include "amk/json.h"
#include "amk/lowering.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "cli/table.h"

namespace amk::cli {

namespace {

// Long enough for real prompts, short enough that a 128k-context model's KV declaration stays
// sane; --max-context overrides it.
constexpr int64_t kDefaultMaxContext = 4096;

struct CompileOptions {
  std::string model_dir, gpu = "h100", config, output;
  int64_t max_context = 0;
};

int run_compile(const CompileOptions& opt) {
  // Never over an input: `-o M/config.json` would destroy the checkpoint it reads.
  if (const std::string problem = overwrite_problem(opt.output, {opt.model_dir, opt.config});
      !problem.empty()) {
    std::cerr << "amk: refusing to write -o '" << opt.output << "': it " << problem << "\n";
    return kExitBadInput;
  }
  const GpuTarget* target = resolve_target(opt.gpu);  // prints why not
  if (target == nullptr) return kExitBadInput;
  const auto in = open_model_inputs(opt.model_dir, opt.config);
  if (!in) return kExitBadInput;
  const ModelConfig& m = in->checkpoint.config();
  const int64_t max_context =
      opt.max_context > 0
          ? opt.max_context
          : std::min(kDefaultMaxContext, m.max_position_embeddings > 0 ? m.max_position_embeddings
                                                                       : kDefaultMaxContext);
  Program p;
  try {
    p = lower(m, in->schedule(*target, max_context), *target, max_context, in->weight_dtype);
  } catch (const std::exception& e) {  // LoweringError, UnsupportedModelError
    std::cerr << "amk: cannot lower '" << opt.model_dir << "': " << e.what() << "\n";
    return kExitBadInput;
  }
  // The program is only as good as the checkpoint it will be bound to: every WEIGHT buffer's
  // tensor must be there with the buffer's shape, or nothing is written.
  try {
    for (const Buffer& b : p.buffers)
      if (b.kind == BufferKind::WEIGHT && b.source) (void)weight_tensor(b, in->checkpoint);
  } catch (const std::exception& e) {  // CheckpointError, DecodeError: missing, misshapen, a box outside
    std::cerr << "amk: cannot compile '" << opt.model_dir << "': " << e.what() << "\n";
    return kExitBadInput;
  }
  p.set_meta_string("model", std::filesystem::path(opt.model_dir).filename().string());
  if (std::string error; !save_program(p, opt.output, &error)) {
    std::cerr << "amk: cannot write '" << opt.output << "': " << error << "\n";
    return kExitFailed;
  }

  std::map<int, int64_t> by_op;
  for (const Task& t : p.tasks) ++by_op[static_cast<int>(t.op)];
  const int64_t wbytes = p.total_weight_bytes();
  std::cout << fmt::format("compiled  {} ({} {}, {} layers) for {}, max_context {}\n",
                           opt.model_dir, m.model_type, name_of(in->weight_dtype),
                           m.num_hidden_layers, target->name, max_context);
  std::cout << fmt::format("tasks     {}\n", p.tasks.size());
  for (const auto& [op, n] : by_op)
    std::cout << fmt::format("  {:<22} {:>6}\n", name_of(static_cast<Op>(op)), n);
  std::cout << fmt::format("counters  {}\n", p.counters.size());
  std::cout << fmt::format("buffers   {}\n", p.buffers.size());
  if (p.pages)
    std::cout << fmt::format("pages     {} ({}, {} bytes of scratch)\n", p.pages->pages.size(),
                             p.config->page_allocation, p.pages->total_scratch_bytes());
  else
    std::cout << "pages     none\n";
  std::cout << fmt::format("weights   {} bytes ({})\n", wbytes, format_bytes(wbytes));
  std::cout << fmt::format("floor     {:.3f} µs at {:.0f} GB/s (spec)",
                           target->bandwidth_bound_us(wbytes), target->hbm_bandwidth_gbs);
  if (target->measured_bw_gbs > 0)
    std::cout << fmt::format(", {:.3f} µs at {:.0f} GB/s (measured)",
                             target->measured_bandwidth_bound_us(wbytes), target->measured_bw_gbs);
  std::cout << "\nwrote     " << opt.output << "\n";
  return kExitOk;
}

}  // namespace

void add_compile_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<CompileOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compile", "Lower a Hugging Face checkpoint's decode step to a validated program");
  cmd->add_option("model_dir", opt->model_dir, "Checkpoint folder (config.json + safetensors) or .gguf file")
      ->required();
  cmd->add_option("--gpu", opt->gpu,
                  "Built-in target (h100, h200, b200, a100, rtx5090) or auto (this process's GPU)")
      ->capture_default_str();
  cmd->add_option("--config", opt->config, "ScheduleConfig JSON file (default: derived from the model and the target)");
  cmd->add_option("--max-context", opt->max_context,
                  "KV cache length (default: min(max_position_embeddings, 4096))")
      ->check(CLI::Range(int64_t{1}, int64_t{2147483647}));
  cmd->add_option("-o,--output", opt->output, "Program JSON to write")->required();
  cmd->callback([opt, &action] { action = [opt] { return run_compile(*opt); }; });
}

}  // namespace amk::cli
