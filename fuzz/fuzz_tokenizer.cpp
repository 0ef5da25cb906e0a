// libFuzzer target for the tokenizer readers (amk/tokenizer.h) and the tokenizers they build.
//
// Input: a tokenizer.json, optionally followed by a NUL byte and a text to encode (without one,
// the JSON itself is also the text); or, when the first byte is 0x0A (how every SentencePiece
// ModelProto starts: field 1, a piece), a .model file, encoded with a fixed text and with its own
// bytes. Properties, for any bytes: the reader returns or throws TokenizerError with a message,
// nothing else; with a tokenizer it returns, encode()
// (with and without the added specials) gives ids inside the vocabulary, decode() takes those ids
// (with and without specials) without throwing, and encoding the same text twice gives the same
// ids (the BPE cache must not change answers).
//
// Build and run: README "Benchmarks and fuzzing"; results in docs/FUZZING.md.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "amk/tokenizer.h"

namespace {

[[noreturn]] void die(const char* what, std::string_view input) {
  std::fprintf(stderr, "fuzz_tokenizer: %s\n%.*s\n", what, static_cast<int>(std::min<size_t>(input.size(), 4000)),
               input.data());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const bool sentencepiece = size > 0 && data[0] == 0x0A;
  const size_t nul = sentencepiece ? std::string_view::npos : input.find('\0');
  const std::string_view doc = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? input : input.substr(nul + 1);
  std::optional<amk::Tokenizer> tok;
  try {
    tok = sentencepiece ? amk::Tokenizer::from_sentencepiece(std::as_bytes(std::span(data, size)), "fuzz.model")
                        : amk::Tokenizer::from_hf_json(doc, "fuzz.json");
  } catch (const amk::TokenizerError& e) {
    if (*e.what() == '\0') die("a TokenizerError without a message", input);
    return 0;
  }
  // The input's text, and a fixed one that reaches the merges of a mutated vocabulary.
  const std::string_view texts[] = {text, "Hello  w\xC3\xB6rld\t 12 [U]ab \xF0\x9F\x91\x8D \xFF"};
  try {
    for (const bool add_special : {false, true}) {
      for (const std::string_view t : texts) {
        const std::vector<int32_t> ids = tok->encode(t, add_special);
        for (const int32_t id : ids)
          if (id < 0 || id >= tok->vocab_size()) die("encode gave an id outside the vocabulary", input);
        if (tok->encode(t, add_special) != ids) die("encoding the same text twice differed", input);
        (void)tok->decode(ids, false);
        (void)tok->decode(ids, true);
      }
    }
  } catch (const amk::TokenizerError& e) {
    // A regex from the file may exceed its backtracking budget on this text: a refusal, not a bug.
    if (std::string_view(e.what()).find("regex matching failed") == std::string_view::npos)
      die("encode/decode threw on a tokenizer the reader accepted", input);
  }
  return 0;
}
