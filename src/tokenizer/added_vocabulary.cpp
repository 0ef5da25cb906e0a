#include "tokenizer/added_vocabulary.h"

#include <utf8proc.h>

#include <algorithm>

#include "tokenizer/normalizer.h"  // is_unicode_white_space
#include "tokenizer/utf8.h"

namespace amk::tokenizer_detail {

namespace {

// The code point ending just before `end` (text is valid UTF-8, end > 0), and its start.
std::pair<char32_t, size_t> char_before(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return {decode_utf8_at(text, start, end - start), start};
}

char32_t char_at(std::string_view text, size_t pos) {
  return decode_utf8_at(text, pos, utf8_char_length(text, pos));
}

// Letters, digits and '_' make words (single_word's notion of a word boundary).
bool is_word_char(char32_t c) {
  if (c == '_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

}  // namespace

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    AddedToken& t = tokens_[i];
    if (t.match.empty()) t.match = t.content;
    if (t.match.empty()) continue;
    Index& index = t.normalized ? normalized_ : raw_;
    index.by_first_byte[static_cast<unsigned char>(t.match[0])].push_back(i);
    index.any = true;
  }
  for (Index* index : {&raw_, &normalized_})
    for (auto& list : index->by_first_byte)
      std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) {
        return tokens_[a].match.size() > tokens_[b].match.size();
      });
}

std::vector<AddedVocabulary::Segment> AddedVocabulary::split(std::string_view text,
                                                             bool normalized_set) const {
  const Index& index = normalized_set ? normalized_ : raw_;
  std::vector<Segment> out;
  if (!index.any) {
    if (!text.empty()) out.push_back({text, -1});
    return out;
  }
  size_t emitted = 0;  // text before this is already in `out`
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* match = nullptr;
    for (const size_t i : index.by_first_byte[static_cast<unsigned char>(text[pos])]) {
      if (text.compare(pos, tokens_[i].match.size(), tokens_[i].match) == 0) {
        match = &tokens_[i];
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = pos + match->match.size();
    if (match->single_word) {
      const bool left_ok = begin == 0 || !is_word_char(char_before(text, begin).first);
      const bool right_ok = end == text.size() || !is_word_char(char_at(text, end));
      if (!(left_ok && right_ok)) {
        pos = end;
        continue;
      }
    }
    if (match->lstrip)
      while (begin > emitted) {
        const auto [c, start] = char_before(text, begin);
        if (!is_unicode_white_space(c)) break;
        begin = start;
      }
    if (match->rstrip)
      while (end < text.size() && is_unicode_white_space(char_at(text, end)))
        end += utf8_char_length(text, end);
    if (begin > emitted) out.push_back({text.substr(emitted, begin - emitted), -1});
    out.push_back({text.substr(begin, end - begin), match->id});
    emitted = pos = end;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted), -1});
  return out;
}

}  // namespace amk::tokenizer_detail
