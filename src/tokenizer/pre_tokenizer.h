// Pre-tokenizers: split normalized text into the words the model encodes one by one
// (tokenizers' "pre_tokenizer" field, and llama.cpp's per-`pre` regex lists).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/pattern.h"

namespace amk::tokenizer_detail {

struct Piece {
  std::string text;
  bool at_input_start = false;  // begins the whole input (Metaspace's "first" scheme asks)
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their splits, in order.
  virtual void split(std::vector<Piece>& pieces) const = 0;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void split(std::vector<Piece>& pieces) const override;

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's split (optional) and then every byte written in the byte-level alphabet.
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex);
  void split(std::vector<Piece>& pieces) const override;

 private:
  bool add_prefix_space_;
  std::unique_ptr<SplitPreTokenizer> gpt2_split_;
};

// Numbers apart from the rest: each digit alone, or runs of digits together.
std::unique_ptr<PreTokenizer> make_digits_pre_tokenizer(bool individual_digits);

// SentencePiece-style: spaces become `replacement`, which is prepended (always, or only at the
// start of the input) and optionally starts a new word.
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  enum class Prepend { Always, First, Never };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split);
  void split(std::vector<Piece>& pieces) const override;

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void split(std::vector<Piece>& pieces) const override;

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

// GPT-2's word split, the one ByteLevel's use_regex applies.
inline constexpr std::string_view kGpt2SplitRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace amk::tokenizer_detail
