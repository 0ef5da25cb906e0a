// `amk perplexity MODEL -f FILE [--ctx N] [--device ...]`: perplexity over a text file as
// llama.cpp's perplexity tool reports it (amk/perplexity.h says exactly what is scored): the
// running estimate per chunk "[1]x,[2]y,..." and "Final estimate: PPL = p +/- e".
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>

#include "amk/perplexity.h"
#include "cli/commands.h"
#include "cli/input_files.h"
#include "cli/text_model.h"

namespace amk::cli {

namespace {

constexpr uint64_t kMaxTextBytes = uint64_t{256} << 20;

struct PerplexityOptions {
  std::string model, file, device = "auto";
  int64_t context = 512;
  bool json = false;
};

int run_perplexity(const PerplexityOptions& opt) {
  const auto device = resolve_text_device(opt.device);
  if (!device) return kExitBadInput;
  std::string why;
  const auto body = read_input_text(opt.file, kMaxTextBytes, &why);
  if (!body) {
    std::cerr << "amk: perplexity: cannot read '" << opt.file << "': " << why << "\n";
    return kExitBadInput;
  }
  auto text = open_model_text(opt.model);
  if (!text) return kExitBadInput;
  // As llama.cpp: the whole text tokenized with what the tokenizer adds (its BOS), and each
  // chunk's first token replaced by that BOS.
  std::vector<int64_t> tokens;
  std::optional<int64_t> bos;
  try {
    const std::vector<int32_t> ids = text->tokenizer.encode(*body, /*add_special=*/true);
    tokens.assign(ids.begin(), ids.end());
    if (const std::vector<int32_t> added = text->tokenizer.encode("", true); !added.empty()) bos = added.front();
  } catch (const std::exception& e) {
    std::cerr << "amk: perplexity: cannot tokenize '" << opt.file << "': " << e.what() << "\n";
    return kExitBadInput;
  }
  int64_t context = opt.context;
  auto model = open_text_model(opt.model, std::move(*text), *device, &context);
  if (!model) return kExitBadInput;
  if (static_cast<int64_t>(tokens.size()) < context) {
    std::cerr << fmt::format("amk: perplexity: '{}' has {} tokens, fewer than one chunk of --ctx {}\n", opt.file,
                             tokens.size(), context);
    return kExitBadInput;
  }
  std::atomic<bool>& interrupt = install_interrupt_flag();
  const int64_t chunks = static_cast<int64_t>(tokens.size()) / context;
  std::cerr << fmt::format("perplexity: {} tokens, {} chunks of {} (the second half of each scored), {}\n",
                           tokens.size(), chunks, context, model->device.name());
  PerplexityResult r;
  try {
    r = perplexity(*model->decoder, tokens, context, bos,
                   [&](int64_t done, int64_t, double running) {
                     std::cout << (done > 1 ? "," : "") << fmt::format("[{}]{:.4f}", done, running) << std::flush;
                   },
                   &interrupt);
  } catch (const std::exception& e) {
    std::cerr << "\namk: perplexity: " << e.what() << "\n";
    return kExitFailed;
  }
  std::cout << "\n";
  if (r.chunks == 0) {
    std::cerr << "amk: perplexity: interrupted before the first chunk ended\n";
    return kExitFailed;
  }
  std::cout << fmt::format("Final estimate: PPL = {:.4f} +/- {:.5f}\n", r.perplexity, r.error);
  std::cerr << fmt::format("[{} tokens scored in {} chunks{}]\n", r.scored_tokens, r.chunks,
                           r.interrupted ? ", interrupted" : "");
  return kExitOk;
}

}  // namespace

void add_perplexity_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<PerplexityOptions>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity of a model over a text file (llama.cpp's method)");
  cmd->add_option("model", opt->model, "Model: a .gguf file or a Hugging Face folder")->required();
  cmd->add_option("-f,--file", opt->file, "The text file (- for stdin)")->required();
  cmd->add_option("--ctx", opt->context, "Tokens per chunk")->capture_default_str()->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  cmd->add_option("--device", opt->device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  cmd->callback([opt, &action] { action = [opt] { return run_perplexity(*opt); }; });
}

}  // namespace amk::cli
