#include "tokenizer/bpe_model.h"

#include <fmt/format.h>

#include <queue>

#include "amk/tokenizer.h"
#include "model/strict_json.h"  // quote_name
#include "tokenizer/utf8.h"

namespace amk::tokenizer_detail {

using model_detail::quote_name;

BpeModel::BpeModel(StringMap<int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  merges_.reserve(merges.size());
  std::string joined;  // reused: hundreds of thousands of merges
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    joined.assign(a).append(b);
    const auto ia = vocab_.find(a), ib = vocab_.find(b), ij = vocab_.find(joined);
    if (ia == vocab_.end() || ib == vocab_.end() || ij == vocab_.end()) {
      const std::string& missing = ia == vocab_.end() ? a : ib == vocab_.end() ? b : joined;
      throw TokenizerError(fmt::format("merge {} of {} + {}: {} is not in the vocabulary", rank,
                                       quote_name(a), quote_name(b), quote_name(missing)));
    }
    // A pair listed twice keeps its later rank, as in tokenizers (whose map the later one
    // overwrites).
    merges_.insert_or_assign(pair_key(ia->second, ib->second), Merge{int32_t(rank), ij->second});
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& ids) const {
  if (options_.ignore_merges) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (const auto it = cache_.find(word); it != cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = ids.size();
  merge_word(word, ids);
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheMaxEntries) cache_.clear();
    cache_.try_emplace(std::string(word), ids.begin() + static_cast<ptrdiff_t>(first), ids.end());
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& ids) const {
  struct Symbol {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto push = [&](int32_t id) {
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  };
  bool previous_unk = false;
  std::string piece;
  for (size_t i = 0; i < word.size();) {
    const size_t n = utf8_char_length(word, i);
    piece.assign(word.substr(i, n));
    if (i > 0) piece.insert(0, options_.continuing_subword_prefix);
    if (i + n == word.size()) piece += options_.end_of_word_suffix;
    if (const auto it = vocab_.find(piece); it != vocab_.end()) {
      push(it->second);
      previous_unk = false;
    } else if (options_.byte_fallback && [&] {
                 for (size_t k = i; k < i + n; ++k)
                   if (byte_ids_[static_cast<unsigned char>(word[k])] < 0) return false;
                 return true;
               }()) {
      for (size_t k = i; k < i + n; ++k) push(byte_ids_[static_cast<unsigned char>(word[k])]);
      previous_unk = false;
    } else if (options_.unk_id) {
      if (!(options_.fuse_unk && previous_unk)) push(*options_.unk_id);
      previous_unk = true;
    }
    // No unk token: the character is dropped, as `tokenizers` does.
    i += n;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  // Candidate merges, best rank first and leftmost among equals. An entry goes stale when either
  // side has been merged since; it is then recognised and skipped on the way out.
  struct Candidate {
    int32_t rank;
    int left;
    int32_t result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto consider = [&](int left) {
    if (left < 0) return;
    const int right = symbols[left].next;
    if (right < 0) return;
    const auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.result});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    if (!left.alive || left.next < 0) continue;
    const auto it = merges_.find(pair_key(left.id, symbols[left.next].id));
    if (it == merges_.end() || it->second.result != c.result || it->second.rank != c.rank) continue;
    Symbol& right = symbols[left.next];
    left.id = c.result;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace amk::tokenizer_detail
