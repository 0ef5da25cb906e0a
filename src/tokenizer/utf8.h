// UTF-8 helpers for text that may not be valid UTF-8 (user input, decoded byte tokens).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace amk::tokenizer_detail {

// Length in bytes of the well-formed UTF-8 sequence starting at s[pos], or 0 when the bytes there
// are not one (stray continuation, overlong form, surrogate, past U+10FFFF, truncated).
size_t utf8_sequence_length(std::string_view s, size_t pos);

// Length of the character at s[pos] for splitting purposes: a well-formed sequence's length, else
// 1 (a bad byte counts as one character of its own).
inline size_t utf8_char_length(std::string_view s, size_t pos) {
  const size_t n = utf8_sequence_length(s, pos);
  return n == 0 ? 1 : n;
}

bool is_valid_utf8(std::string_view s);

// `bytes` as UTF-8 with each maximal ill-formed subsequence replaced by U+FFFD, the rule Rust's
// String::from_utf8_lossy (and so `tokenizers`) follows.
std::string utf8_lossy(std::string_view bytes);

void append_utf8(std::string& out, char32_t cp);

// The code point of the well-formed sequence at s[pos] (which must be one).
char32_t decode_utf8_at(std::string_view s, size_t pos, size_t len);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace amk::tokenizer_detail
