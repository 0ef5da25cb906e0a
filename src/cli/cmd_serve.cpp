// `amk serve MODEL [--host H] [--port P] [--device auto|cpu|cuda|cuda:N] [--api-key KEY]
// [--max-queue N] [--alias NAME] [--ctx N] [--max-tokens N]`: an OpenAI-compatible HTTP server
// (amk/server.h, docs/SERVER.md). This parses the options and hands run_server a loader that
// opens the model the way `amk generate` does.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "amk/server.h"
#include "cli/commands.h"
#include "cli/text_model.h"

namespace amk::cli {

namespace {

struct ServeCommandOptions {
  std::string model, device = "auto";
  int64_t context = 4096;
  bool quiet = false;
  ServerOptions server;
};

int run_serve(ServeCommandOptions opt) {
  const auto device = resolve_text_device(opt.device);
  if (!device) return kExitBadInput;
  std::error_code ec;
  if (!std::filesystem::exists(opt.model, ec)) {
    std::cerr << "amk: serve: '" << opt.model << "' does not exist\n";
    return kExitBadInput;
  }
  if (opt.server.alias.empty()) opt.server.alias = std::filesystem::path(opt.model).filename().replace_extension().string();
  if (opt.server.alias.empty()) opt.server.alias = opt.model;
  opt.server.log_requests = !opt.quiet;
  const ModelLoader load = [&]() -> std::optional<ServedModel> {
    auto text = open_model_text(opt.model);
    if (!text) return std::nullopt;
    int64_t context = opt.context;
    auto model = open_text_model(opt.model, std::move(*text), *device, &context);
    if (!model) return std::nullopt;
    auto owned = std::make_shared<TextModel>(std::move(*model));
    ServedModel served;
    served.text = &owned->text;
    served.decoder = owned->decoder.get();
    served.eos_ids = owned->eos_ids;
    served.device = owned->device.name();
    served.owner = std::move(owned);
    return served;
  };
  const int code = run_server(opt.server, load);
  return code == 2 ? kExitBadInput : code;
}

}  // namespace

void add_serve_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<ServeCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "An OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, /v1/models, /health, /metrics)");
  cmd->add_option("model", opt->model, "Model: a .gguf file or a Hugging Face folder")->required();
  cmd->add_option("--host", opt->server.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", opt->server.port, "Port (0: any free port, printed)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--device", opt->device, "auto (a GPU when usable, else the CPU), cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--api-key", opt->server.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/* (default: no key; /health and /metrics stay open)");
  cmd->add_option("--max-queue", opt->server.max_queue,
                  "Requests that may wait while one runs; more get 503 with Retry-After")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{4096}));
  cmd->add_option("--alias", opt->server.alias, "The model id clients see (default: the file or folder name)");
  cmd->add_option("--ctx", opt->context, "Context (KV cache) in tokens, prompt plus completion (capped at the model's)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  cmd->add_option("--max-tokens", opt->server.default_max_tokens,
                  "Tokens to generate when a request gives no max_tokens (capped at what the context leaves)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_flag("--quiet", opt->quiet, "No line per request on stderr");
  cmd->footer(
      "Request defaults (OpenAI's): temperature 1, top_p 1, top_k 0 (off), min_p 0 (off), a random seed, no stop "
      "strings, stream false.\nSIGTERM or SIGINT: stop accepting, cancel the running request, exit 0.");
  cmd->callback([opt, &action] { action = [opt] { return run_serve(*opt); }; });
}

}  // namespace amk::cli
