// Decoders: token strings back to text (tokenizers' "decoder" field). Each step rewrites the list
// of token strings; the text is their concatenation at the end.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace amk::tokenizer_detail {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode(std::vector<std::string>& tokens) const = 0;
};

// Byte-level characters back to bytes, the whole list at once (a character may be split across
// tokens), then U+FFFD for bytes that are not UTF-8.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override;
};

// Each occurrence of `pattern` in a token replaced by `content`.
class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode(std::vector<std::string>& tokens) const override;

 private:
  std::string pattern_, content_;
};

// Runs of <0xXX> tokens become the text of their bytes, or one U+FFFD per byte when those bytes
// are not UTF-8.
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override;
};

// All tokens joined into one.
class FuseDecoder final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override;
};

// Up to `start` leading and `stop` trailing copies of the character `content` removed per token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode(std::vector<std::string>& tokens) const override;

 private:
  std::string content_;
  size_t start_, stop_;
};

// `replacement` back to spaces, except in the first token, where tokenizers drops them all (the
// prepended one is among them).
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first_space)
      : replacement_(std::move(replacement)), strip_first_space_(strip_first_space) {}
  void decode(std::vector<std::string>& tokens) const override;

 private:
  std::string replacement_;
  bool strip_first_space_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode(std::vector<std::string>& tokens) const override;

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

// What a SentencePiece model decodes with: ▁ to space, byte pieces to bytes, the first leading
// space dropped when the normalizer added it.
std::unique_ptr<Decoder> make_sentencepiece_decoder(bool strip_dummy_prefix);

}  // namespace amk::tokenizer_detail
