// Hugging Face's BPE model: a word starts as its characters (or the byte tokens <0xXX> of a
// character missing from the vocabulary, with byte_fallback), then the adjacent pair with the
// lowest merge rank is merged until no listed merge applies. Results are cached per word.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/string_map.h"
#include "tokenizer/token_model.h"

namespace amk::tokenizer_detail {

struct BpeOptions {
  std::optional<int32_t> unk_id;  // what an unknown character becomes (nothing when unset)
  bool fuse_unk = false;          // consecutive unknowns become one unk
  bool byte_fallback = false;     // unknown characters become their <0xXX> byte tokens
  bool ignore_merges = false;     // a word that is itself in the vocabulary is taken whole
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};

class BpeModel final : public TokenModel {
 public:
  // merges: (left, right) token strings in rank order; each side and the joined string must be
  // in `vocab` (throws TokenizerError naming the merge otherwise).
  BpeModel(StringMap<int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options);
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const override;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }
  void merge_word(std::string_view word, std::vector<int32_t>& ids) const;

  StringMap<int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  int32_t byte_ids_[256];  // -1 where the vocabulary has no <0xXX>

  // Words seen before: most text repeats its words, so this is most of the speed.
  static constexpr size_t kCacheMaxEntries = 200'000;
  static constexpr size_t kCacheMaxWordBytes = 256;
  mutable std::mutex cache_mutex_;
  mutable StringMap<std::vector<int32_t>> cache_;
};

}  // namespace amk::tokenizer_detail
