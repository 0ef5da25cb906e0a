// The public face of the interpreter (amk/chat_template.h): parse once, render with variables,
// and the chat conventions transformers uses when it calls a template.
#include "amk/chat_template.h"

#include <fmt/format.h>

#include "model/strict_json.h"
#include "template/evaluator.h"
#include "template/parser.h"

namespace amk {

TemplateError::TemplateError(const std::string& message, int line)
    : std::runtime_error(line > 0 ? fmt::format("line {}: {}", line, message) : message),
      line_(line),
      detail_(message) {}

struct ChatTemplate::Parsed {
  tmpl::Template tree;
};

ChatTemplate::ChatTemplate(std::string_view source, TemplateLimits limits)
    : parsed_(std::make_unique<Parsed>(Parsed{tmpl::parse_template(source, limits.max_nesting)})),
      limits_(limits) {
  tmpl::check_names(parsed_->tree);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  return tmpl::render_template(parsed_->tree, variables, limits_);
}

std::string render_chat(std::string_view template_source, const nlohmann::ordered_json& messages,
                        const ChatOptions& options) {
  if (!messages.is_array()) throw std::invalid_argument("the messages must be a JSON array");
  if (!options.extra.is_object()) throw std::invalid_argument("ChatOptions::extra must be a JSON object");
  // What transformers' apply_chat_template passes: messages, tools, documents and
  // add_generation_prompt, then the special tokens, then the caller's extra variables.
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  variables["messages"] = messages;
  variables["tools"] = options.tools;
  variables["documents"] = nullptr;
  variables["add_generation_prompt"] = options.add_generation_prompt;
  if (options.bos_token) variables["bos_token"] = *options.bos_token;
  if (options.eos_token) variables["eos_token"] = *options.eos_token;
  for (const auto& [key, value] : options.extra.items()) variables[key] = value;
  return ChatTemplate(template_source).render(variables);
}

std::string chat_template_from_tokenizer_config(std::string_view json_text, std::string_view name,
                                                bool want_tools) {
  nlohmann::json config;
  try {
    config = model_detail::parse_untrusted_json(json_text);
  } catch (const std::exception& e) {
    throw TemplateError(fmt::format("tokenizer_config.json: {}", e.what()), 0);
  }
  if (!config.is_object()) throw TemplateError("tokenizer_config.json: not a JSON object", 0);
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null())
    throw TemplateError("tokenizer_config.json has no \"chat_template\" (the model may not be a chat model)", 0);
  if (it->is_string()) {
    if (!name.empty() && name != "default")
      throw TemplateError(fmt::format("tokenizer_config.json has one chat template, not one named {}",
                                      model_detail::quote_name(name)), 0);
    return it->get<std::string>();
  }
  if (!it->is_array())
    throw TemplateError(fmt::format("tokenizer_config.json: \"chat_template\" is {}, expected a string or "
                                    "a list of {{\"name\", \"template\"}}", model_detail::json_type_word(*it)), 0);
  std::string wanted(name);
  std::string names;
  bool has_tool_use = false;
  for (const auto& entry : *it) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !entry.contains("template") || !entry["template"].is_string())
      throw TemplateError("tokenizer_config.json: each \"chat_template\" entry must be {\"name\": string, "
                          "\"template\": string}", 0);
    has_tool_use |= entry["name"] == "tool_use";
    names += (names.empty() ? "" : ", ") + model_detail::quote_name(entry["name"].get<std::string>());
  }
  if (wanted.empty()) wanted = want_tools && has_tool_use ? "tool_use" : "default";
  for (const auto& entry : *it)
    if (entry["name"] == wanted) return entry["template"].get<std::string>();
  throw TemplateError(fmt::format("tokenizer_config.json has no chat template named {} (it has {})",
                                  model_detail::quote_name(wanted), names.empty() ? "none" : names), 0);
}

}  // namespace amk
