// `amk generate MODEL -p TEXT [--chat] [--system S] [-n N] [--temp T] [--top-k K] [--top-p P]
// [--min-p M] [--seed S] [--stop STR]... [--device auto|cpu|cuda|cuda:N] [--json]`: text in,
// text out. The text streams to stdout as it becomes final; the statistics go to stderr. --json
// prints one object instead, for programs. The work is amk::Generator's; this parses and prints.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "amk/conversation.h"
#include "amk/cuda_vm.h"
#include "amk/generator.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "cli/text_model.h"

namespace amk::cli {

namespace {

struct GenerateOptions {
  std::string model, prompt, system, device = "auto";
  bool chat = false, json = false, has_system = false;
  int64_t n = 256;
  SamplingParams sampling{.temperature = 0.8, .top_k = 40, .top_p = 0.95, .min_p = 0.05, .seed = 0};
  std::vector<std::string> stops;
};

int bad_input(const std::string& what) {
  std::cerr << "amk: " << what << "\n";
  return kExitBadInput;
}

nlohmann::json timings_json(const GenerationResult& r) {
  const double decoded = r.ids.size() > 1 ? static_cast<double>(r.ids.size() - 1) : 0.0;
  const int64_t prefilled = static_cast<int64_t>(r.prompt_ids.size()) - r.reused_tokens;
  return {{"prefill_s", r.prefill_seconds},
          {"first_token_s", r.first_token_seconds},
          {"decode_s", r.decode_seconds},
          {"total_s", r.total_seconds},
          {"prompt_tokens_per_s", r.prefill_seconds > 0 ? prefilled / r.prefill_seconds : 0.0},
          {"decode_tokens_per_s", r.decode_seconds > 0 ? decoded / r.decode_seconds : 0.0}};
}

int run_generate(const GenerateOptions& opt) {
  if (const std::string problem = sampling_params_problem(opt.sampling); !problem.empty())
    return bad_input("generate: " + problem);
  if (opt.prompt.empty()) return bad_input("generate: -p is empty: give the text to continue (or, with --chat, the message)");
  if (opt.has_system && !opt.chat) return bad_input("generate: --system needs --chat (it is a chat message)");
  const auto device = resolve_text_device(opt.device);
  if (!device) return kExitBadInput;
  auto text = open_model_text(opt.model);
  if (!text) return kExitBadInput;

  std::vector<int64_t> prompt;
  try {
    if (opt.chat) {
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (opt.has_system) messages.push_back({{"role", "system"}, {"content", opt.system}});
      messages.push_back({{"role", "user"}, {"content", opt.prompt}});
      prompt = conversation_ids(*text, messages, /*add_generation_prompt=*/true);
    } else {
      const std::vector<int32_t> ids = text->tokenizer.encode(opt.prompt, /*add_special=*/true);
      prompt.assign(ids.begin(), ids.end());
    }
  } catch (const std::exception& e) {  // TemplateError, TokenizerError
    return bad_input(fmt::format("generate: cannot build the prompt for '{}': {}", opt.model, e.what()));
  }
  if (prompt.empty()) return bad_input("generate: the prompt tokenizes to no tokens");

  int64_t context = static_cast<int64_t>(prompt.size()) + std::max<int64_t>(opt.n, 1);
  auto model = open_text_model(opt.model, std::move(*text), *device, &context);
  if (!model) return kExitBadInput;
  if (static_cast<int64_t>(prompt.size()) >= context)
    return bad_input(fmt::format("generate: the prompt has {} tokens; the model's context is {}", prompt.size(), context));

  std::atomic<bool>& interrupt = install_interrupt_flag();
  Generator generator(*model->decoder, model->text.tokenizer);
  GenerationOptions options;
  options.max_new_tokens = opt.n;
  options.sampling = opt.sampling;
  options.stop_strings = opt.stops;
  options.eos_ids = model->eos_ids;
  const auto on_text = [&](std::string_view piece) {
    if (opt.json) return;
    std::cout << piece << std::flush;
  };
  const auto on_prefill = [&](int64_t done, int64_t total) {
    progress(fmt::format("reading the prompt: {}/{} tokens", done, total));
    if (done == total) progress_done();
  };
  GenerationResult r;
  try {
    r = generator.generate(prompt, options, on_text, &interrupt, on_prefill);
  } catch (const DecodeError& e) {
    progress_done();
    std::cerr << "amk: " << e.what() << "\n";
    return kExitFailed;
  } catch (const CudaVmError& e) {
    progress_done();
    return report_cuda_error(e);
  }
  progress_done();
  if (opt.json) {
    nlohmann::json out = {{"prompt_ids", r.prompt_ids},
                          {"ids", r.ids},
                          {"text", r.text},
                          {"finish_reason", finish_reason_name(r.finish)},
                          {"device", model->device.name()},
                          {"timings", timings_json(r)}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << "\n" << std::flush;
  }
  const nlohmann::json t = timings_json(r);
  std::cerr << fmt::format("[{} tokens, {:.2f} tok/s, first token after {:.2f} s ({} prompt tokens), {}, {}{}]\n",
                           r.ids.size(), t["decode_tokens_per_s"].get<double>(), r.first_token_seconds,
                           r.prompt_ids.size(), finish_reason_name(r.finish), model->device.name(),
                           r.context_full ? ", context full" : "");
  return kExitOk;
}

}  // namespace

void add_generate_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (a .gguf file or a Hugging Face folder)");
  cmd->add_option("model", opt->model, "Model: a .gguf file or a Hugging Face folder")->required();
  cmd->add_option("-p,--prompt", opt->prompt, "The text to continue (with --chat: the user's message)")->required();
  cmd->add_flag("--chat", opt->chat, "Apply the model's chat template with the generation prompt");
  cmd->add_option("--system", opt->system, "With --chat: a system message");
  cmd->add_option("-n", opt->n, "Most tokens to generate")->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--temp", opt->sampling.temperature, "Temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", opt->sampling.top_k, "Keep the K most likely tokens (0: off)")->capture_default_str();
  cmd->add_option("--top-p", opt->sampling.top_p, "Keep the most likely tokens up to this probability (1: off)")->capture_default_str();
  cmd->add_option("--min-p", opt->sampling.min_p, "Drop tokens below this fraction of the best one's probability (0: off)")->capture_default_str();
  cmd->add_option("--seed", opt->sampling.seed, "Seed of the draws (same seed, same tokens)")->capture_default_str();
  cmd->add_option("--stop", opt->stops, "Stop when the text contains this string (not printed); repeatable");
  cmd->add_option("--device", opt->device, "auto (a GPU when usable, else the CPU), cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_flag("--json", opt->json, "Print one JSON object (prompt_ids, ids, text, finish_reason, timings) instead of streaming");
  cmd->callback([opt, cmd, &action] {
    opt->has_system = cmd->count("--system") > 0;
    action = [opt] { return run_generate(*opt); };
  });
}

}  // namespace amk::cli
