// Normalizers: text rewrites applied before pre-tokenization (tokenizers' "normalizer" field, and
// SentencePiece's whitespace handling).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pattern.h"

namespace amk::tokenizer_detail {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8 and so is the result.
  virtual std::string normalize(std::string_view text) const = 0;
};

enum class UnicodeForm { NFC, NFD, NFKC, NFKD };

// Unicode normalization forms (utf8proc).
class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : form_(form) {}
  std::string normalize(std::string_view text) const override;

 private:
  UnicodeForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override;
};

// Prepends `prefix` to non-empty text.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string_view text) const override;

 private:
  std::string prefix_;
};

// Every match of the pattern replaced by `content`.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string normalize(std::string_view text) const override;

 private:
  Pattern pattern_;
  std::string content_;
};

// Leading and/or trailing Unicode white space removed.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view text) const override;

 private:
  bool left_, right_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  std::string normalize(std::string_view text) const override;

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// SentencePiece's whitespace handling (the identity normalization rule, which is all that the
// models AMK reads use): optionally collapse runs of spaces and trim, then prefix one space to
// non-empty text, then write spaces as U+2581 "▁".
class SentencePieceNormalizer final : public Normalizer {
 public:
  SentencePieceNormalizer(bool add_dummy_prefix, bool remove_extra_whitespaces, bool escape_whitespaces)
      : add_dummy_prefix_(add_dummy_prefix),
        remove_extra_whitespaces_(remove_extra_whitespaces),
        escape_whitespaces_(escape_whitespaces) {}
  std::string normalize(std::string_view text) const override;

 private:
  bool add_dummy_prefix_, remove_extra_whitespaces_, escape_whitespaces_;
};

inline constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Unicode White_Space (Rust's char::is_whitespace).
bool is_unicode_white_space(char32_t c);

}  // namespace amk::tokenizer_detail
