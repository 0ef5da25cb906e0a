// Tokenizers: text to token ids and back, for the model families AMK runs.
//
// Three sources build the same Tokenizer:
//   - a Hugging Face tokenizer.json (byte-level BPE as in Llama 3 and Qwen, or BPE with byte
//     fallback as in Llama 2 and Mistral): normalizer, pre-tokenizer, BPE model, added tokens,
//     post-processor and decoder are read from the file and applied the way `tokenizers` does;
//   - a SentencePiece .model file (BPE with byte fallback, as Mistral ships), encoded the way the
//     `sentencepiece` library does;
//   - the vocabulary a GGUF file holds in its tokenizer.ggml.* metadata (GgufVocab), with the
//     pre-tokenizer regexes llama.cpp uses for each `tokenizer.ggml.pre` name.
//
// Nothing in a file is trusted: every loader refuses malformed input with a TokenizerError whose
// message names the source and the problem, and sizes are capped before anything is allocated.
// A Tokenizer is immutable after construction and safe to use from several threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace amk {

namespace tokenizer_detail {
struct Pipeline;
}

// A malformed or unsupported tokenizer file, or a bad argument (an id out of range).
class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The pieces of a GGUF file's tokenizer metadata, as the GGUF reader finds them. Arrays are
// indexed by token id; `scores` and `token_types` may be empty (then 0.0 and "normal").
struct GgufVocab {
  std::string model;                 // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE)
  std::string pre;                   // tokenizer.ggml.pre: "smollm", "llama-bpe", "qwen2", "default", ...
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<float> scores;         // tokenizer.ggml.scores
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::vector<std::string> merges;   // tokenizer.ggml.merges: "a b" (gpt2 only)
  std::optional<int32_t> bos_id, eos_id, unk_id;
  bool add_bos = false;              // tokenizer.ggml.add_bos_token
  bool add_eos = false;              // tokenizer.ggml.add_eos_token
  bool add_space_prefix = true;      // tokenizer.ggml.add_space_prefix (llama only)
};

// The GGUF token types (llama.cpp's numbering).
enum class GgufTokenType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

class Tokenizer {
 public:
  // A tokenizer.json's text; `name` is used in error messages.
  static Tokenizer from_hf_json(std::string_view json_text, std::string_view name = "tokenizer.json");
  // The bytes of a SentencePiece ModelProto (.model file).
  static Tokenizer from_sentencepiece(std::span<const std::byte> model_bytes,
                                      std::string_view name = "tokenizer.model");
  static Tokenizer from_gguf_vocab(const GgufVocab& vocab, std::string_view name = "GGUF vocabulary");
  // A model folder (its tokenizer.json, else tokenizer.model), a tokenizer.json, a .model file,
  // or a .gguf file (its tokenizer.ggml.* metadata, through tokenizer_from_gguf).
  static Tokenizer from_path(const std::filesystem::path& path);

  // Token ids of `text`. Added and special tokens written in the text are matched as tokens.
  // add_special: what the source adds around a sequence (BOS for Llama 3, SentencePiece and GGUF
  // files that ask for it; nothing for Qwen).
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
  // Text of `ids`; skip_special leaves out special tokens. Bytes that do not form UTF-8 come out
  // as U+FFFD, as in `tokenizers`. Throws TokenizerError for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The vocabulary entry of `id` as stored (byte-level "Ġhello", SentencePiece "▁hello").
  const std::string& token_text(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view token_text) const;
  // One past the largest id (added tokens included).
  int32_t vocab_size() const;
  bool is_special(int32_t id) const;
  // What kind of source this came from, for people: "byte-level BPE", "SentencePiece BPE", ...
  const std::string& description() const;

  ~Tokenizer();
  Tokenizer(const Tokenizer&);
  Tokenizer& operator=(const Tokenizer&);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

 private:
  explicit Tokenizer(std::shared_ptr<const tokenizer_detail::Pipeline> p);
  std::shared_ptr<const tokenizer_detail::Pipeline> pipeline_;
};

struct GgufContents;

// The tokenizer.ggml.* metadata of a parsed GGUF file. Throws TokenizerError naming the file and
// the key that is absent (tokenizer.ggml.model, .tokens) or of the wrong type.
GgufVocab gguf_vocab_from(const GgufContents& gguf);
// The tokenizer a .gguf file holds: GgufFile::open, gguf_vocab_from, from_gguf_vocab. Throws
// TokenizerError (a malformed file included).
Tokenizer tokenizer_from_gguf(const std::filesystem::path& path);

}  // namespace amk
