// `amk chat MODEL [--system S] [-n N] [sampling options] [--ctx N] [--device ...]`: a conversation
// on the terminal (or a script on stdin): one user message per line, the reply streamed back.
// amk::Conversation keeps the KV cache between turns, so each turn reads only its new tokens.
// An empty line is skipped; /exit or the end of input ends the chat; Ctrl-C stops a reply (and at
// the prompt, ends the chat).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "amk/conversation.h"
#include "cli/commands.h"
#include "cli/text_model.h"

namespace amk::cli {

namespace {

struct ChatCommandOptions {
  std::string model, system, device = "auto";
  bool has_system = false;
  int64_t n = 512, context = 4096;
  SamplingParams sampling{.temperature = 0.8, .top_k = 40, .top_p = 0.95, .min_p = 0.05, .seed = 0};
  std::vector<std::string> stops;
};

int run_chat(const ChatCommandOptions& opt) {
  if (const std::string problem = sampling_params_problem(opt.sampling); !problem.empty()) {
    std::cerr << "amk: chat: " << problem << "\n";
    return kExitBadInput;
  }
  const auto device = resolve_text_device(opt.device);
  if (!device) return kExitBadInput;
  auto text = open_model_text(opt.model);
  if (!text) return kExitBadInput;
  if (!text->chat_template) {
    std::cerr << "amk: chat: '" << opt.model << "' has no chat template (tokenizer.chat_template, "
              << "tokenizer_config.json's \"chat_template\" or chat_template.jinja)\n";
    return kExitBadInput;
  }
  int64_t context = opt.context;
  auto model = open_text_model(opt.model, std::move(*text), *device, &context);
  if (!model) return kExitBadInput;

  std::atomic<bool>& interrupt = install_interrupt_flag();
  Generator generator(*model->decoder, model->text.tokenizer);
  Conversation conversation(generator, model->text,
                            opt.has_system ? std::optional<std::string>(opt.system) : std::nullopt);
  GenerationOptions options;
  options.max_new_tokens = opt.n;
  options.sampling = opt.sampling;
  options.stop_strings = opt.stops;
  options.eos_ids = model->eos_ids;
  const bool terminal = isatty(STDIN_FILENO) == 1;
  if (terminal)
    std::cerr << fmt::format("amk chat: {} on {}, context {} tokens. /exit or Ctrl-D ends; Ctrl-C stops a reply.\n",
                             opt.model, model->device.name(), context);
  for (;;) {
    if (terminal) std::cout << "> " << std::flush;
    std::string line;
    if (!std::getline(std::cin, line)) break;  // end of input, or Ctrl-C at the prompt
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/exit" || line == "/quit") break;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    interrupt.store(false);
    GenerationResult r;
    try {
      r = conversation.say(line, options, [](std::string_view piece) { std::cout << piece << std::flush; },
                           &interrupt);
    } catch (const std::invalid_argument& e) {  // the conversation outgrew the context
      std::cerr << "amk: chat: " << e.what() << "\n";
      return kExitFailed;
    } catch (const std::exception& e) {  // TemplateError, DecodeError, CudaVmError
      std::cerr << "amk: chat: " << e.what() << "\n";
      return kExitFailed;
    }
    std::cout << "\n" << std::flush;
    if (r.cache_reset)
      std::cerr << "amk: note: the conversation's tokens no longer start with those in the cache (the template "
                   "re-renders earlier turns differently); it was read again from the start\n";
    const double rate = r.decode_seconds > 0 && r.ids.size() > 1 ? (r.ids.size() - 1) / r.decode_seconds : 0.0;
    std::cerr << fmt::format("[{} tokens, {:.2f} tok/s, {} new prompt tokens ({} reused from the cache), {}]\n",
                             r.ids.size(), rate, r.prompt_ids.size() - static_cast<size_t>(r.reused_tokens),
                             r.reused_tokens, finish_reason_name(r.finish));
  }
  return kExitOk;
}

}  // namespace

void add_chat_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<ChatCommandOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "An interactive conversation through the model's chat template");
  cmd->add_option("model", opt->model, "Model: a .gguf file or a Hugging Face folder")->required();
  cmd->add_option("--system", opt->system, "A system message that starts the conversation");
  cmd->add_option("-n", opt->n, "Most tokens per reply")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--ctx", opt->context, "Context (KV cache) in tokens for the whole conversation (capped at the model's)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  cmd->add_option("--temp", opt->sampling.temperature, "Temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", opt->sampling.top_k, "Keep the K most likely tokens (0: off)")->capture_default_str();
  cmd->add_option("--top-p", opt->sampling.top_p, "Keep the most likely tokens up to this probability (1: off)")->capture_default_str();
  cmd->add_option("--min-p", opt->sampling.min_p, "Drop tokens below this fraction of the best one's probability (0: off)")->capture_default_str();
  cmd->add_option("--seed", opt->sampling.seed, "Seed of the draws")->capture_default_str();
  cmd->add_option("--stop", opt->stops, "End a reply when its text contains this string; repeatable");
  cmd->add_option("--device", opt->device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  cmd->callback([opt, cmd, &action] {
    opt->has_system = cmd->count("--system") > 0;
    action = [opt] { return run_chat(*opt); };
  });
}

}  // namespace amk::cli
