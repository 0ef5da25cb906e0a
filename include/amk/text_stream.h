// Generated token ids to text as they come, for a terminal or a client: what is printed is never
// taken back. Two things are held back until the next token decides them:
//   - an incomplete UTF-8 character: a token may end in the middle of one (byte-level BPE and
//     byte fallback split characters over tokens), and the decoded text then ends in U+FFFD;
//   - text that might be the beginning of a stop string.
// A stop string is found in the decoded text (special tokens left out), wherever tokens split
// it; the text ends before it and the stop string itself is never emitted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "amk/tokenizer.h"

namespace amk {

class TextStream {
 public:
  // `tokenizer` must outlive the stream. Empty stop strings are ignored.
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings);

  // Adds a generated token; returns the text that became final (possibly empty).
  std::string push(int64_t id);
  // True once a stop string has appeared: push() must not be called again.
  bool stopped() const { return stopped_; }
  // The generation ended: the text held back, if no stop string ended it (else "").
  std::string finish();
  // The text so far: everything emitted, then what is held back (cut before a stop string).
  const std::string& text() const { return text_; }
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  const Tokenizer& tokenizer_;
  std::vector<std::string> stops_;
  std::vector<int32_t> ids_;
  std::string text_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

}  // namespace amk
