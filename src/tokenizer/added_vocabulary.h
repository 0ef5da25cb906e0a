// Added tokens (special or not): strings that are cut out of the text as whole tokens before the
// model sees it. Matching follows tokenizers' AddedVocabulary: the leftmost match wins, the
// longest among those starting there; lstrip/rstrip swallow white space beside a match;
// single_word refuses a match inside a word. Tokens flagged `normalized` are matched in the
// normalized text, the others in the raw text.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace amk::tokenizer_detail {

struct AddedToken {
  std::string content;
  // What is searched for: `content`, or for a `normalized` token its normalized form (the text it
  // is searched in is normalized too). Empty: `content`.
  std::string match;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false;
};

class AddedVocabulary {
 public:
  explicit AddedVocabulary(std::vector<AddedToken> tokens = {});

  struct Segment {
    std::string_view text;  // the text between matches (id < 0), or the matched span
    int32_t id = -1;        // the added token matched, or -1
  };
  // Cuts `text` by the tokens matched in raw text (normalized_set false) or in normalized text.
  std::vector<Segment> split(std::string_view text, bool normalized_set) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }

 private:
  struct Index {
    std::array<std::vector<size_t>, 256> by_first_byte;  // into tokens_, longest first
    bool any = false;
  };
  std::vector<AddedToken> tokens_;
  Index raw_, normalized_;
};

}  // namespace amk::tokenizer_detail
