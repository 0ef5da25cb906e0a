// The assembled tokenizer behind amk::Tokenizer: the steps every loader fills in.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/string_map.h"
#include "tokenizer/token_model.h"

namespace amk::tokenizer_detail {

// Ids from this on are refused: the largest real vocabularies hold ~260k, and ids index tables
// (a hostile id of 2^31 would otherwise cost gigabytes).
inline constexpr size_t kMaxVocabSize = size_t{1} << 20;

struct Pipeline {
  std::string description;
  std::unique_ptr<Normalizer> normalizer;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null: the text is one word
  std::unique_ptr<TokenModel> model;
  AddedVocabulary added;
  std::unique_ptr<Decoder> decoder;  // null: tokens are joined with spaces, as tokenizers does

  // Every id's token text ("" where an id is unassigned) and the reverse map.
  std::vector<std::string> id_to_token;
  StringMap<int32_t> token_to_id;
  std::vector<bool> special;

  // What add_special puts around the ids: a list of fixed ids and one place for the sequence.
  std::vector<int32_t> prefix_ids, suffix_ids;

  std::vector<int32_t> encode(std::string_view text, bool add_special) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;
  void encode_text(std::string_view text, bool at_input_start, std::vector<int32_t>& ids) const;
};

// Fills id_to_token, token_to_id and special from the model's vocabulary and the added tokens.
// Throws TokenizerError on an id out of range or one id given two different strings.
void index_vocabulary(Pipeline& p, const std::vector<std::pair<std::string, int32_t>>& model_vocab);

}  // namespace amk::tokenizer_detail
