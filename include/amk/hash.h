// Counter-based randomness and content hashes that must give the same bits on every platform
// (seeded checkpoints, synthetic inputs, seeded KV states, schedule ids): one definition each.
#pragma once

#include <cstdint>
#include <string_view>

namespace amk {

// splitmix64's output function of state x (Vigna): a pure function, so value n of a stream is
// splitmix64(seed + n * kSplitmixGamma) with no generator state and no draw order.
inline constexpr uint64_t kSplitmixGamma = 0x9e3779b97f4a7c15ull;
constexpr uint64_t splitmix64(uint64_t x) {
  x += kSplitmixGamma;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// 64-bit FNV-1a of the bytes of `s`.
constexpr uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace amk
