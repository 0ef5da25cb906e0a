#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <new>

#include "amk/tokenizer.h"
#include "tokenizer/utf8.h"

namespace amk::tokenizer_detail {

bool is_unicode_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string UnicodeNormalizer::normalize(std::string_view text) const {
  if (text.empty()) return {};
  int options = UTF8PROC_STABLE;
  switch (form_) {
    case UnicodeForm::NFC: options |= UTF8PROC_COMPOSE; break;
    case UnicodeForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case UnicodeForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case UnicodeForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out, static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    if (n == UTF8PROC_ERROR_NOMEM) throw std::bad_alloc();
    throw TokenizerError(std::string("Unicode normalization failed: ") + utf8proc_errmsg(n));
  }
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

std::string LowercaseNormalizer::normalize(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_char_length(text, i);
    const char32_t c = decode_utf8_at(text, i, n);
    // Character by character, as tokenizers does (so no final-sigma rule). U+0130 İ is the one
    // character whose full lowercase (i + combining dot, what Rust gives) is not its simple one.
    if (c == 0x130)
      out += "i\xCC\x87";
    else
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    i += n;
  }
  return out;
}

std::string PrependNormalizer::normalize(std::string_view text) const {
  return text.empty() ? std::string() : prefix_ + std::string(text);
}

std::string ReplaceNormalizer::normalize(std::string_view text) const {
  std::string out;
  size_t last = 0;
  for (const auto& [b, e] : pattern_.find_all(text)) {
    out.append(text.substr(last, b - last));
    out += content_;
    last = e;
  }
  out.append(text.substr(last));
  return out;
}

std::string StripNormalizer::normalize(std::string_view text) const {
  size_t begin = 0, end = text.size();
  if (left_) {
    while (begin < end) {
      const size_t n = utf8_char_length(text, begin);
      if (!is_unicode_white_space(decode_utf8_at(text, begin, n))) break;
      begin += n;
    }
  }
  if (right_) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      if (!is_unicode_white_space(decode_utf8_at(text, start, end - start))) break;
      end = start;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

std::string SequenceNormalizer::normalize(std::string_view text) const {
  std::string current(text);
  for (const auto& step : steps_) current = step->normalize(current);
  return current;
}

std::string SentencePieceNormalizer::normalize(std::string_view text) const {
  std::string spaced;
  if (remove_extra_whitespaces_) {
    // Leading and trailing spaces dropped, inner runs made one space.
    bool pending_space = false;
    for (const char c : text) {
      if (c == ' ') {
        pending_space = !spaced.empty();
        continue;
      }
      if (pending_space) spaced += ' ';
      pending_space = false;
      spaced += c;
    }
  } else {
    spaced.assign(text);
  }
  if (spaced.empty()) return {};
  if (add_dummy_prefix_) spaced.insert(0, 1, ' ');
  if (!escape_whitespaces_) return spaced;
  std::string out;
  out.reserve(spaced.size() + spaced.size() / 2);
  for (const char c : spaced) {
    if (c == ' ')
      out += kMetaspace;
    else
      out += c;
  }
  return out;
}

}  // namespace amk::tokenizer_detail
