// SentencePiece's BPE encoding: the normalized text starts as its characters (user-defined pieces
// matched whole, longest first, and never merged further); then the adjacent pair whose joined
// string is the vocabulary piece with the highest score is merged, leftmost first among equal
// scores, until no joined pair is a piece. A symbol that is not a piece becomes its <0xXX> byte
// pieces (byte fallback) or the unknown piece.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/string_map.h"
#include "tokenizer/token_model.h"

namespace amk::tokenizer_detail {

struct SentencePieceEntry {
  std::string piece;
  float score = 0;
  enum class Kind { Normal, Unknown, Control, UserDefined, Unused, Byte } kind = Kind::Normal;
};

class SentencePieceBpe final : public TokenModel {
 public:
  // match_user_defined: find user-defined pieces inside the text (what the sentencepiece
  // library does); off when an added-token pass has already split them out.
  SentencePieceBpe(const std::vector<SentencePieceEntry>& pieces, std::optional<int32_t> unk_id,
                   bool byte_fallback, bool match_user_defined);
  void encode_word(std::string_view text, std::vector<int32_t>& ids) const override;

 private:
  size_t user_defined_prefix(std::string_view text, size_t pos) const;
  void emit(std::string_view symbol, std::vector<int32_t>& ids) const;

  StringMap<int32_t> mergeable_;  // normal, user-defined and unused pieces
  std::vector<float> scores_;
  std::vector<bool> unused_;
  std::vector<std::vector<std::string>> user_defined_by_first_byte_;  // longest first
  std::optional<int32_t> unk_id_;
  bool byte_fallback_;
  int32_t byte_ids_[256];
};

}  // namespace amk::tokenizer_detail
