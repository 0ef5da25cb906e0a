#include "tokenizer/pre_tokenizer.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"  // kMetaspace

namespace amk::tokenizer_detail {

void SplitPreTokenizer::split(std::vector<Piece>& pieces) const {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (const Piece& p : pieces) {
    bool first = true;
    for (const std::string_view s : split_by(p.text, pattern_, behavior_, invert_)) {
      out.push_back({std::string(s), p.at_input_start && first && s.data() == p.text.data()});
      first = false;
    }
  }
  pieces = std::move(out);
}

ByteLevelPreTokenizer::ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
    : add_prefix_space_(add_prefix_space) {
  if (use_regex)
    gpt2_split_ = std::make_unique<SplitPreTokenizer>(Pattern::regex(kGpt2SplitRegex),
                                                      SplitBehavior::Isolated, false);
}

void ByteLevelPreTokenizer::split(std::vector<Piece>& pieces) const {
  if (add_prefix_space_)
    for (Piece& p : pieces)
      if (!p.text.starts_with(' ')) p.text.insert(0, 1, ' ');
  if (gpt2_split_) gpt2_split_->split(pieces);
  for (Piece& p : pieces) p.text = byte_level_encode(p.text);
}

std::unique_ptr<PreTokenizer> make_digits_pre_tokenizer(bool individual_digits) {
  return std::make_unique<SplitPreTokenizer>(Pattern::regex(individual_digits ? R"(\p{N})" : R"(\p{N}+)"),
                                             SplitBehavior::Isolated, false);
}

MetaspacePreTokenizer::MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
    : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}

void MetaspacePreTokenizer::split(std::vector<Piece>& pieces) const {
  std::vector<Piece> out;
  for (const Piece& p : pieces) {
    std::string text;
    for (const char c : p.text) {
      if (c == ' ')
        text += replacement_;
      else
        text += c;
    }
    const bool prepend = prepend_ == Prepend::Always || (prepend_ == Prepend::First && p.at_input_start);
    if (prepend && !text.starts_with(replacement_)) text.insert(0, replacement_);
    if (!split_ || replacement_.empty()) {
      if (!text.empty()) out.push_back({std::move(text), p.at_input_start});
      continue;
    }
    // Each replacement begins a new word (MergedWithNext on the replacement).
    size_t begin = 0;
    bool first = true;
    for (size_t at = text.find(replacement_, 1); ; at = text.find(replacement_, at + replacement_.size())) {
      const size_t end = at == std::string::npos ? text.size() : at;
      if (end > begin) {
        out.push_back({text.substr(begin, end - begin), p.at_input_start && first});
        first = false;
      }
      if (at == std::string::npos) break;
      begin = at;
    }
  }
  pieces = std::move(out);
}

void SequencePreTokenizer::split(std::vector<Piece>& pieces) const {
  for (const auto& step : steps_) step->split(pieces);
}

}  // namespace amk::tokenizer_detail
