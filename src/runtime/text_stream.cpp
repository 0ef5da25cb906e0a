// TextStream (amk/text_stream.h). The whole generated sequence is decoded again after every
// token, because decoding is contextual (SentencePiece's first space, bytes completing a
// character): a token's text alone is not what it adds. That costs O(n^2) token lookups over a
// generation, far below the cost of the decode steps themselves.
#include "amk/text_stream.h"

#include <algorithm>

namespace amk {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD, what an incomplete character decodes to

}  // namespace

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings)
    : tokenizer_(tokenizer) {
  for (std::string& s : stop_strings)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string TextStream::push(int64_t id) {
  ids_.push_back(static_cast<int32_t>(id));
  text_ = tokenizer_.decode(ids_, /*skip_special=*/true);
  // A stop string can only start where nothing emitted could have completed it before: search
  // from the last emitted bytes that could begin one.
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t from = emitted_ >= s.size() ? emitted_ - s.size() + 1 : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    text_.resize(std::max(cut, emitted_));
    std::string out = text_.substr(emitted_);
    emitted_ = text_.size();
    return out;
  }
  size_t safe = text_.size();
  // An incomplete character at the end: wait for the bytes that complete it.
  while (safe >= kReplacement.size() && std::string_view(text_).substr(0, safe).ends_with(kReplacement))
    safe -= kReplacement.size();
  // The longest tail that begins a stop string waits too.
  size_t hold = 0;
  for (const std::string& s : stops_)
    for (size_t len = std::min(s.size() - 1, safe); len > hold; --len)
      if (std::string_view(text_).substr(safe - len, len) == std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
  safe -= hold;
  if (safe <= emitted_) return "";
  std::string out = text_.substr(emitted_, safe - emitted_);
  emitted_ = safe;
  return out;
}

std::string TextStream::finish() {
  if (stopped_ || emitted_ >= text_.size()) return "";
  std::string out = text_.substr(emitted_);
  emitted_ = text_.size();
  return out;
}

}  // namespace amk
