// What turns a model's token ids into text and back, found beside its weights: the tokenizer,
// the chat template, the special-token strings a template is given, and the tokenizer side's
// end-of-sequence ids.
//   - a Hugging Face folder: tokenizer.json (else tokenizer.model); the template from
//     chat_template.jinja when present (what transformers >= 4.43 saves), else
//     tokenizer_config.json's "chat_template"; bos_token / eos_token from tokenizer_config.json
//     (a string or an added-token object {"content": ...}, passed as strings as transformers does).
//   - a .gguf file: its tokenizer.ggml.* vocabulary, tokenizer.chat_template, and the bos/eos
//     strings are the vocabulary entries of tokenizer.ggml.bos_token_id / eos_token_id (as
//     llama.cpp passes them).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "amk/tokenizer.h"

namespace amk {

struct ModelText {
  Tokenizer tokenizer;
  std::optional<std::string> chat_template;  // absent: the model has none
  std::optional<std::string> bos_token, eos_token;
  // The ids that end a generation according to the tokenizer side: tokenizer_config.json's
  // eos_token, GGUF's eos and eot ids. (The checkpoint's generation_config.json list is added by
  // the caller: Checkpoint::eos_token_ids.)
  std::vector<int64_t> eos_ids;
  std::string source;  // where the template came from, for messages
};

// Throws TokenizerError (the tokenizer, or tokenizer_config.json, cannot be read) or
// TemplateError (a malformed "chat_template" entry).
ModelText load_model_text(const std::filesystem::path& model);

}  // namespace amk
