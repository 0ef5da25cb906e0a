// libFuzzer target for the tokenizer.json reader (amk/tokenizer.h) and the tokenizer it builds.
//
// Input: a tokenizer.json, optionally followed by a NUL byte and a text to encode (without one,
// the JSON itself is also the text). Properties, for any bytes: Tokenizer::from_hf_json() returns
// or throws TokenizerError with a message, nothing else; with a tokenizer it returns, encode()
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
  const size_t nul = input.find('\0');
  const std::string_view doc = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? input : input.substr(nul + 1);
  std::optional<amk::Tokenizer> tok;
  try {
    tok = amk::Tokenizer::from_hf_json(doc, "fuzz.json");
  } catch (const amk::TokenizerError& e) {
    if (*e.what() == '\0') die("a TokenizerError without a message", input);
    return 0;
  }
  try {
    for (const bool add_special : {false, true}) {
      const std::vector<int32_t> ids = tok->encode(text, add_special);
      for (const int32_t id : ids)
        if (id < 0 || id >= tok->vocab_size()) die("encode gave an id outside the vocabulary", input);
      if (tok->encode(text, add_special) != ids) die("encoding the same text twice differed", input);
      (void)tok->decode(ids, false);
      (void)tok->decode(ids, true);
    }
  } catch (const amk::TokenizerError& e) {
    // A regex from the file may exceed its backtracking budget on this text: a refusal, not a bug.
    if (std::string_view(e.what()).find("regex matching failed") == std::string_view::npos)
      die("encode/decode threw on a tokenizer the reader accepted", input);
  }
  return 0;
}
