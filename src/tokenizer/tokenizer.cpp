// amk::Tokenizer: the encode and decode pipelines, and the front door for every source.
#include "amk/tokenizer.h"

#include <fmt/format.h>

#include "tokenizer/pipeline.h"
#include "tokenizer/utf8.h"

namespace amk {

namespace tokenizer_detail {

void index_vocabulary(Pipeline& p, const std::vector<std::pair<std::string, int32_t>>& model_vocab) {
  int64_t max_id = -1;
  for (const auto& [_, id] : model_vocab) max_id = std::max<int64_t>(max_id, id);
  for (const AddedToken& t : p.added.tokens()) max_id = std::max<int64_t>(max_id, t.id);
  if (max_id >= static_cast<int64_t>(kMaxVocabSize))
    throw TokenizerError(fmt::format("token id {} is beyond the {} supported", max_id, kMaxVocabSize));
  p.id_to_token.assign(static_cast<size_t>(max_id + 1), std::string());
  p.special.assign(static_cast<size_t>(max_id + 1), false);
  p.token_to_id.reserve(model_vocab.size() + p.added.tokens().size());
  std::vector<bool> assigned(static_cast<size_t>(max_id + 1), false);
  const auto assign = [&](const std::string& text, int32_t id) {
    if (id < 0) throw TokenizerError(fmt::format("negative token id {}", id));
    if (assigned[id] && p.id_to_token[id] != text)
      throw TokenizerError(fmt::format("token id {} is given two different strings", id));
    assigned[id] = true;
    p.id_to_token[id] = text;
    p.token_to_id.try_emplace(text, id);
  };
  for (const auto& [text, id] : model_vocab) assign(text, id);
  for (const AddedToken& t : p.added.tokens()) {
    assign(t.content, t.id);
    p.token_to_id[t.content] = t.id;  // an added token's string names the added id
    // tokenizers gives a normalized token's id its normalized text (decoding included).
    p.id_to_token[t.id] = t.match;
    if (t.special) p.special[t.id] = true;
  }
}

void Pipeline::encode_text(std::string_view text, bool at_input_start, std::vector<int32_t>& ids) const {
  const std::string normalized = normalizer ? normalizer->normalize(text) : std::string(text);
  bool first = true;
  for (const AddedVocabulary::Segment& s : added.split(normalized, /*normalized_set=*/true)) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else {
      std::vector<Piece> pieces{{std::string(s.text), at_input_start && first && s.text.data() == normalized.data()}};
      if (pre_tokenizer) pre_tokenizer->split(pieces);
      for (const Piece& piece : pieces)
        if (!piece.text.empty()) model->encode_word(piece.text, ids);
    }
    first = false;
  }
}

std::vector<int32_t> Pipeline::encode(std::string_view raw, bool add_special) const {
  // Everything downstream (regexes, normalization) works on UTF-8; bytes that are not UTF-8
  // become U+FFFD, as Python's "replace" error handler would make them before `tokenizers`.
  std::string repaired;
  std::string_view text = raw;
  if (!is_valid_utf8(raw)) {
    repaired = utf8_lossy(raw);
    text = repaired;
  }
  std::vector<int32_t> ids;
  if (add_special) ids = prefix_ids;
  for (const AddedVocabulary::Segment& s : added.split(text, /*normalized_set=*/false)) {
    if (s.id >= 0)
      ids.push_back(s.id);
    else
      encode_text(s.text, s.text.data() == text.data(), ids);
  }
  if (add_special) ids.insert(ids.end(), suffix_ids.begin(), suffix_ids.end());
  return ids;
}

std::string Pipeline::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token.size() || id_to_token[id].empty())
      throw TokenizerError(fmt::format("token id {} is not in the vocabulary (size {})", id,
                                       id_to_token.size()));
    if (skip_special && special[id]) continue;
    tokens.push_back(id_to_token[id]);
  }
  if (!decoder) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
    return joined;
  }
  decoder->decode(tokens);
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

}  // namespace tokenizer_detail

Tokenizer::Tokenizer(std::shared_ptr<const tokenizer_detail::Pipeline> p) : pipeline_(std::move(p)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(const Tokenizer&) = default;
Tokenizer& Tokenizer::operator=(const Tokenizer&) = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  return pipeline_->encode(text, add_special);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  return pipeline_->decode(ids, skip_special);
}

const std::string& Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw TokenizerError(fmt::format("token id {} is not in the vocabulary (size {})", id, vocab_size()));
  return pipeline_->id_to_token[id];
}

std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  const auto it = pipeline_->token_to_id.find(text);
  if (it == pipeline_->token_to_id.end()) return std::nullopt;
  return it->second;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(pipeline_->id_to_token.size()); }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && pipeline_->special[id];
}

const std::string& Tokenizer::description() const { return pipeline_->description; }

}  // namespace amk
