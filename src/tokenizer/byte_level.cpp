#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace amk::tokenizer_detail {

namespace {

bool stands_for_itself(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Alphabet {
  std::array<char32_t, 256> char_of_byte{};
  std::array<std::string, 256> utf8_of_byte;
  // Inverse over the code points used (all below U+0144): -1 where none.
  std::array<int, 0x144> byte_of_char{};

  Alphabet() {
    byte_of_char.fill(-1);
    char32_t next = 0x100;
    for (unsigned b = 0; b < 256; ++b) {
      const char32_t c = stands_for_itself(b) ? char32_t(b) : next++;
      char_of_byte[b] = c;
      append_utf8(utf8_of_byte[b], c);
      byte_of_char[c] = static_cast<int>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += a.utf8_of_byte[static_cast<unsigned char>(c)];
  return out;
}

bool byte_level_decode_append(std::string_view token, std::string& out) {
  const Alphabet& a = alphabet();
  std::string bytes;
  bytes.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const size_t n = utf8_sequence_length(token, i);
    const char32_t c = n == 0 ? 0x110000 : decode_utf8_at(token, i, n);
    if (c >= a.byte_of_char.size() || a.byte_of_char[c] < 0) {
      out.append(token);
      return false;
    }
    bytes.push_back(static_cast<char>(a.byte_of_char[c]));
    i += n;
  }
  out += bytes;
  return true;
}

}  // namespace amk::tokenizer_detail
