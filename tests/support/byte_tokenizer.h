// A byte-level tokenizer for tests that write every expectation out by hand: id b is byte b
// (no merges), and "<eos>" (kByteEos) is a special token.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "amk/tokenizer.h"

namespace amk::testing {

inline constexpr int64_t kByteEos = 256;

const Tokenizer& byte_tokenizer();
std::vector<int64_t> bytes_of(std::string_view s);  // the ids of the bytes of s

}  // namespace amk::testing
