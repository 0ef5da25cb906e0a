#include "support/byte_tokenizer.h"

#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/byte_level.h"

namespace amk::testing {

const Tokenizer& byte_tokenizer() {
  static const Tokenizer tok = [] {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[tokenizer_detail::byte_level_encode(std::string(1, char(b)))] = b;
    const nlohmann::json doc = {
        {"added_tokens", {{{"id", kByteEos}, {"content", "<eos>"}, {"special", true}, {"lstrip", false},
                           {"rstrip", false}, {"single_word", false}, {"normalized", false}}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}};
    return Tokenizer::from_hf_json(doc.dump());
  }();
  return tok;
}

std::vector<int64_t> bytes_of(std::string_view s) {
  std::vector<int64_t> ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

}  // namespace amk::testing
