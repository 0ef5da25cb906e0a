#include "tokenizer/sentencepiece_bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <queue>
#include <unordered_map>

#include "tokenizer/utf8.h"

namespace amk::tokenizer_detail {

using Kind = SentencePieceEntry::Kind;

SentencePieceBpe::SentencePieceBpe(const std::vector<SentencePieceEntry>& pieces,
                                   std::optional<int32_t> unk_id, bool byte_fallback,
                                   bool match_user_defined)
    : unk_id_(unk_id), byte_fallback_(byte_fallback) {
  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  scores_.resize(pieces.size());
  unused_.resize(pieces.size());
  user_defined_by_first_byte_.resize(256);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const SentencePieceEntry& e = pieces[i];
    const auto id = static_cast<int32_t>(i);
    scores_[i] = e.score;
    unused_[i] = e.kind == Kind::Unused;
    if (e.kind == Kind::Byte) {
      // "<0xAB>": the byte the piece stands for.
      unsigned value = 0;
      if (e.piece.size() == 6 && e.piece.starts_with("<0x") && e.piece.ends_with(">") &&
          std::sscanf(e.piece.c_str() + 3, "%2x", &value) == 1 && std::isxdigit(static_cast<unsigned char>(e.piece[3])) &&
          std::isxdigit(static_cast<unsigned char>(e.piece[4])) && byte_ids_[value] < 0)
        byte_ids_[value] = id;
      continue;
    }
    if (e.piece.empty()) continue;
    if (e.kind == Kind::Normal || e.kind == Kind::UserDefined || e.kind == Kind::Unused)
      mergeable_.try_emplace(e.piece, id);  // the first listing of a piece is the one used
    if (e.kind == Kind::UserDefined && match_user_defined)
      user_defined_by_first_byte_[static_cast<unsigned char>(e.piece[0])].push_back(e.piece);
  }
  for (auto& list : user_defined_by_first_byte_)
    std::stable_sort(list.begin(), list.end(),
                     [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
}

size_t SentencePieceBpe::user_defined_prefix(std::string_view text, size_t pos) const {
  for (const std::string& p : user_defined_by_first_byte_[static_cast<unsigned char>(text[pos])])
    if (text.compare(pos, p.size(), p) == 0) return p.size();
  return 0;
}

void SentencePieceBpe::emit(std::string_view symbol, std::vector<int32_t>& ids) const {
  if (const auto it = mergeable_.find(symbol); it != mergeable_.end()) {
    ids.push_back(it->second);
    return;
  }
  if (byte_fallback_) {
    bool all = true;
    for (const char c : symbol) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
    if (all) {
      for (const char c : symbol) ids.push_back(byte_ids_[static_cast<unsigned char>(c)]);
      return;
    }
  }
  if (unk_id_) ids.push_back(*unk_id_);
}

void SentencePieceBpe::encode_word(std::string_view text, std::vector<int32_t>& ids) const {
  struct Symbol {
    size_t begin, size;
    int prev, next;
    bool frozen;
  };
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < text.size();) {
    const size_t user = user_defined_prefix(text, i);
    const size_t n = user > 0 ? user : utf8_char_length(text, i);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({i, n, index - 1, index + 1, user > 0});
    i += n;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    float score;
    int left, right;
    size_t size;  // of the joined piece: a stale candidate no longer adds up to it
  };
  const auto worse = [](const Candidate& a, const Candidate& b) {
    return a.score != b.score ? a.score < b.score : a.left > b.left;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> agenda(worse);
  // A merged piece that is "unused" is split again when output, into what it was merged from.
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> unused_parts;
  const auto consider = [&](int left, int right) {
    if (left < 0 || right < 0 || symbols[left].frozen || symbols[right].frozen) return;
    const std::string_view joined = text.substr(symbols[left].begin, symbols[left].size + symbols[right].size);
    const auto it = mergeable_.find(joined);
    if (it == mergeable_.end()) return;
    agenda.push({scores_[it->second], left, right, joined.size()});
    if (unused_[it->second])
      unused_parts[joined] = {text.substr(symbols[left].begin, symbols[left].size),
                              text.substr(symbols[right].begin, symbols[right].size)};
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i, i + 1);
  while (!agenda.empty()) {
    const Candidate c = agenda.top();
    agenda.pop();
    Symbol& l = symbols[c.left];
    Symbol& r = symbols[c.right];
    if (l.size == 0 || r.size == 0 || l.size + r.size != c.size || l.next != c.right) continue;
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = c.left;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }
  // Output, splitting unused pieces back into their parts (left first). An explicit stack: a
  // hostile model could chain unused pieces deep enough to overflow the call stack.
  std::vector<std::string_view> pending;
  for (int i = 0; i >= 0; i = symbols[i].next) {
    pending.push_back(text.substr(symbols[i].begin, symbols[i].size));
    while (!pending.empty()) {
      const std::string_view piece = pending.back();
      pending.pop_back();
      const auto it = unused_parts.find(piece);
      if (it == unused_parts.end()) {
        emit(piece, ids);
        continue;
      }
      pending.push_back(it->second.second);
      pending.push_back(it->second.first);
    }
  }
}

}  // namespace amk::tokenizer_detail
