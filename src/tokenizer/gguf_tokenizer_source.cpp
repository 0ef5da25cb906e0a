// A GGUF file's tokenizer: its tokenizer.ggml.* metadata read into a GgufVocab, which
// Tokenizer::from_gguf_vocab turns into a tokenizer. The GGUF reader has already checked every
// value's bytes; here each key's type is checked (a wrong type is a TokenizerError naming the key).
#include <fmt/format.h>

#include "amk/gguf.h"
#include "amk/tokenizer.h"

namespace amk {

namespace {

std::optional<int32_t> optional_id(const GgufContents& g, std::string_view key) {
  const std::optional<int64_t> v = g.opt_int(key);
  if (!v) return std::nullopt;
  if (*v < 0 || *v > INT32_MAX)
    throw TokenizerError(fmt::format("{}: metadata '{}' = {} is not a token id", g.display_name, key, *v));
  return static_cast<int32_t>(*v);
}

}  // namespace

GgufVocab gguf_vocab_from(const GgufContents& g) {
  try {
    GgufVocab v;
    v.model = std::string(g.get_string("tokenizer.ggml.model"));
    v.pre = std::string(g.opt_string("tokenizer.ggml.pre").value_or("default"));
    for (std::string_view t : g.get_strings("tokenizer.ggml.tokens")) v.tokens.emplace_back(t);
    if (g.find("tokenizer.ggml.scores") != nullptr)
      for (double s : g.get_floats("tokenizer.ggml.scores")) v.scores.push_back(static_cast<float>(s));
    if (g.find("tokenizer.ggml.token_type") != nullptr)
      for (int64_t t : g.get_ints("tokenizer.ggml.token_type")) {
        if (t < INT32_MIN || t > INT32_MAX)
          throw TokenizerError(fmt::format("{}: tokenizer.ggml.token_type holds {}", g.display_name, t));
        v.token_types.push_back(static_cast<int32_t>(t));
      }
    if (g.find("tokenizer.ggml.merges") != nullptr)
      for (std::string_view m : g.get_strings("tokenizer.ggml.merges")) v.merges.emplace_back(m);
    v.bos_id = optional_id(g, "tokenizer.ggml.bos_token_id");
    v.eos_id = optional_id(g, "tokenizer.ggml.eos_token_id");
    v.unk_id = optional_id(g, "tokenizer.ggml.unknown_token_id");
    // llama.cpp's defaults when a key is absent: SentencePiece vocabularies add BOS, BPE ones not.
    v.add_bos = g.opt_bool("tokenizer.ggml.add_bos_token").value_or(v.model == "llama");
    v.add_eos = g.opt_bool("tokenizer.ggml.add_eos_token").value_or(false);
    v.add_space_prefix = g.opt_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    return v;
  } catch (const GgufError& e) {  // absent key or wrong type: the message names the file and key
    throw TokenizerError(e.what());
  }
}

Tokenizer tokenizer_from_gguf(const std::filesystem::path& path) {
  try {
    const GgufFile file = GgufFile::open(path);
    return Tokenizer::from_gguf_vocab(gguf_vocab_from(file.contents()), path.string());
  } catch (const GgufError& e) {
    throw TokenizerError(e.what());
  }
}

}  // namespace amk
