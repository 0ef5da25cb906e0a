// What a Split pre-tokenizer (or llama.cpp's pre-tokenizer list) splits on: a regex run with
// PCRE2 in Unicode mode, or a literal string, and the five ways of keeping the matches.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace amk::tokenizer_detail {

class Pattern {
 public:
  // Throws TokenizerError naming the problem when PCRE2 refuses the pattern.
  static Pattern regex(std::string_view pattern);
  static Pattern literal(std::string text);

  // Non-overlapping, non-empty matches from left to right, as [begin, end) byte offsets. `text`
  // must be valid UTF-8. Throws TokenizerError if the regex exceeds its backtracking budget.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  struct Compiled;  // the PCRE2 code, shared between copies

 private:
  std::shared_ptr<const Compiled> regex_;
  std::string literal_;
};

// The `behavior` of a tokenizers Split.
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Splits `text` around the matches of `pattern` (around the non-matches when `invert`), keeping
// the matches as `behavior` says; empty pieces are dropped. The pieces are views into `text`.
std::vector<std::string_view> split_by(std::string_view text, const Pattern& pattern,
                                       SplitBehavior behavior, bool invert);

// `pattern` with \s and \S spelled out as Unicode White_Space, which is what Oniguruma (the
// engine `tokenizers` uses) means by them; PCRE2 also counts U+180E, which Unicode no longer does.
std::string with_unicode_white_space(std::string_view pattern);

}  // namespace amk::tokenizer_detail
