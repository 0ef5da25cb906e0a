// `amk template SOURCE --messages FILE.json [--add-generation-prompt] [--var NAME=JSON]...`:
// renders a conversation through a chat template and prints the prompt text, so users can see
// exactly what a model will be given. SOURCE is a tokenizer_config.json (its "chat_template") or
// a template file.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "amk/chat_template.h"
#include "cli/commands.h"
#include "cli/input_files.h"

namespace amk::cli {

namespace {

// A tokenizer_config.json or a template is kilobytes; a conversation can be long.
constexpr uint64_t kMaxTemplateFileBytes = uint64_t{16} << 20;
constexpr uint64_t kMaxMessagesFileBytes = uint64_t{64} << 20;

struct TemplateOptions {
  std::string source;
  std::string messages;
  std::string name;
  bool add_generation_prompt = false;
  std::vector<std::string> vars;
};

// A file is a tokenizer config when it parses as a JSON object; anything else is a template.
std::string template_source(const std::string& text, const std::string& name) {
  nlohmann::json probe = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (probe.is_object()) return chat_template_from_tokenizer_config(text, name);
  return text;
}

int run_template(const TemplateOptions& opt) {
  std::string why;
  const auto source_text = read_input_text(opt.source, kMaxTemplateFileBytes, &why);
  if (!source_text) {
    std::cerr << fmt::format("amk: cannot load '{}': {}\n", opt.source, why);
    return kExitBadInput;
  }
  const auto messages_text = read_input_text(opt.messages, kMaxMessagesFileBytes, &why);
  if (!messages_text) {
    std::cerr << fmt::format("amk: cannot load '{}': {}\n", opt.messages, why);
    return kExitBadInput;
  }
  nlohmann::ordered_json messages;
  try {
    messages = nlohmann::ordered_json::parse(*messages_text);
  } catch (const std::exception& e) {
    std::cerr << fmt::format("amk: '{}' is not valid JSON: {}\n", opt.messages, e.what());
    return kExitBadInput;
  }
  if (!messages.is_array()) {
    std::cerr << fmt::format("amk: '{}' must hold a JSON array of messages\n", opt.messages);
    return kExitBadInput;
  }
  ChatOptions chat;
  chat.add_generation_prompt = opt.add_generation_prompt;
  for (const std::string& var : opt.vars) {
    const size_t eq = var.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << fmt::format("amk: --var takes NAME=JSON, got '{}'\n", var);
      return kExitBadInput;
    }
    const std::string name = var.substr(0, eq), value = var.substr(eq + 1);
    // A value that is not JSON is taken as a string: --var bos_token=<s>.
    nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(value, nullptr, false);
    if (parsed.is_discarded()) parsed = value;
    if (name == "bos_token" && parsed.is_string()) chat.bos_token = parsed.get<std::string>();
    else if (name == "eos_token" && parsed.is_string()) chat.eos_token = parsed.get<std::string>();
    else if (name == "tools") chat.tools = parsed;
    else chat.extra[name] = parsed;
  }
  try {
    std::cout << render_chat(template_source(*source_text, opt.name), messages, chat);
  } catch (const TemplateError& e) {
    std::cerr << fmt::format("amk: {}: {}\n", opt.source, e.what());
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

void add_template_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<TemplateOptions>();
  CLI::App* cmd = app.add_subcommand("template", "Render a conversation through a chat template");
  cmd->add_option("SOURCE", opt->source, "tokenizer_config.json (its chat_template) or a template file")->required();
  cmd->add_option("--messages", opt->messages, "JSON file with the messages array ('-': standard input)")->required();
  cmd->add_flag("--add-generation-prompt", opt->add_generation_prompt, "End with the assistant's turn header");
  cmd->add_option("--name", opt->name, "Which of a tokenizer_config.json's named templates (default: 'default')");
  cmd->add_option("--var", opt->vars,
                  "A template variable NAME=JSON (a non-JSON value is a string): bos_token=<s>, "
                  "enable_thinking=false, tools=[...]");
  cmd->callback([opt, &action] { action = [opt] { return run_template(*opt); }; });
}

}  // namespace amk::cli
