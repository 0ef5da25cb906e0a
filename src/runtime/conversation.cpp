// Conversation (amk/conversation.h).
#include "amk/conversation.h"

#include <fmt/format.h>

namespace amk {

std::string render_conversation(const ModelText& text, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt) {
  if (!text.chat_template)
    throw TemplateError(fmt::format("{} has no chat template (tokenizer.chat_template in a GGUF, "
                                    "\"chat_template\" in tokenizer_config.json, or chat_template.jinja)",
                                    text.source),
                        0);
  ChatOptions options;
  options.add_generation_prompt = add_generation_prompt;
  options.bos_token = text.bos_token;
  options.eos_token = text.eos_token;
  return render_chat(*text.chat_template, messages, options);
}

std::vector<int64_t> conversation_ids(const ModelText& text, const nlohmann::ordered_json& messages,
                                      bool add_generation_prompt) {
  const std::vector<int32_t> ids =
      text.tokenizer.encode(render_conversation(text, messages, add_generation_prompt), /*add_special=*/false);
  return {ids.begin(), ids.end()};
}

Conversation::Conversation(Generator& generator, const ModelText& text, std::optional<std::string> system)
    : generator_(generator), text_(text) {
  if (system) messages_.push_back({{"role", "system"}, {"content", *system}});
}

GenerationResult Conversation::say(const std::string& user_message, GenerationOptions options,
                                   const Generator::TextCallback& on_text, const std::atomic<bool>* interrupt) {
  nlohmann::ordered_json next = messages_;
  next.push_back({{"role", "user"}, {"content", user_message}});
  const std::vector<int64_t> prompt = conversation_ids(text_, next, /*add_generation_prompt=*/true);
  options.first_draw = draws_;
  GenerationResult result = generator_.generate(prompt, options, on_text, interrupt);
  draws_ += result.ids.size();
  next.push_back({{"role", "assistant"}, {"content", result.text}});
  messages_ = std::move(next);
  return result;
}

}  // namespace amk
