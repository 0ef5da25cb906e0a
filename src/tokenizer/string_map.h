// A string-keyed hash map that can be searched with a string_view (no temporary std::string per
// lookup: the BPE loops look up millions of substrings).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace amk::tokenizer_detail {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

}  // namespace amk::tokenizer_detail
