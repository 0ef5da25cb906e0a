// The model step of a tokenizer: one pre-tokenized word (or, for SentencePiece, a whole
// normalized text) to token ids.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace amk::tokenizer_detail {

class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // Appends the ids of `word` (valid UTF-8, non-empty) to `ids`.
  virtual void encode_word(std::string_view word, std::vector<int32_t>& ids) const = 0;
};

}  // namespace amk::tokenizer_detail
