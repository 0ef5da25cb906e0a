// A multi-turn chat through a model's chat template, keeping the KV cache between turns: each
// turn renders the whole conversation with the generation prompt, tokenizes it, and hands it to
// the Generator, which feeds only the tokens beyond those its decoder already holds (and resets
// when the cached tokens are not a prefix of the new prompt: GenerationResult::cache_reset).
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "amk/chat_template.h"
#include "amk/generator.h"
#include "amk/model_text.h"

namespace amk {

// The prompt text for `messages` (a JSON array of {"role", "content"}) through the model's
// template, with the bos/eos strings passed as transformers passes them. Throws TemplateError,
// naming the model, when it has no template.
std::string render_conversation(const ModelText& text, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt);

// The ids of that text, tokenized as transformers' apply_chat_template does (nothing added: the
// template writes the special tokens itself).
std::vector<int64_t> conversation_ids(const ModelText& text, const nlohmann::ordered_json& messages,
                                      bool add_generation_prompt);

class Conversation {
 public:
  // `generator` and `text` must outlive the Conversation. A system message, when given, starts it.
  Conversation(Generator& generator, const ModelText& text, std::optional<std::string> system = std::nullopt);

  // Adds the user's message, generates the reply (streamed to on_text) and adds it to the
  // conversation (its text, cut where generation stopped). Throws TemplateError, DecodeError, or
  // std::invalid_argument when the conversation no longer fits the decoder's context.
  GenerationResult say(const std::string& user_message, GenerationOptions options,
                       const Generator::TextCallback& on_text = {}, const std::atomic<bool>* interrupt = nullptr);

  const nlohmann::ordered_json& messages() const { return messages_; }

 private:
  Generator& generator_;
  const ModelText& text_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  uint64_t draws_ = 0;  // draws used by earlier turns: each turn continues the sampler's count
};

}  // namespace amk
