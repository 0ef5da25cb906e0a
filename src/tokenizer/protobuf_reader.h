// A minimal reader of the protobuf wire format, for SentencePiece's ModelProto. Every length is
// checked against the bytes that remain; a malformed message throws TokenizerError.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "amk/tokenizer.h"

namespace amk::tokenizer_detail {

class ProtobufReader {
 public:
  enum WireType : uint32_t { Varint = 0, Fixed64 = 1, LengthDelimited = 2, Fixed32 = 5 };
  struct Field {
    uint32_t number = 0;
    WireType type = Varint;
    uint64_t varint = 0;       // Varint, Fixed64 and Fixed32 values
    std::string_view bytes;    // LengthDelimited contents
  };

  explicit ProtobufReader(std::string_view message) : rest_(message) {}

  // The next field, or false at the end of the message.
  bool next(Field& f) {
    if (rest_.empty()) return false;
    const uint64_t key = read_varint();
    if (key >> 32 != 0 || (key >> 3) == 0) throw TokenizerError("protobuf: bad field key");
    f.number = static_cast<uint32_t>(key >> 3);
    f.type = static_cast<WireType>(key & 7);
    f.bytes = {};
    switch (f.type) {
      case Varint: f.varint = read_varint(); break;
      case Fixed64: f.varint = read_fixed(8); break;
      case Fixed32: f.varint = read_fixed(4); break;
      case LengthDelimited: {
        const uint64_t n = read_varint();
        if (n > rest_.size()) throw TokenizerError("protobuf: a field runs past the end of its message");
        f.bytes = rest_.substr(0, n);
        rest_.remove_prefix(n);
        break;
      }
      default: throw TokenizerError("protobuf: unsupported wire type (groups or garbage)");
    }
    return true;
  }

  static float as_float(const Field& f) {
    const auto bits = static_cast<uint32_t>(f.varint);
    float v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }

 private:
  uint64_t read_varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (rest_.empty()) throw TokenizerError("protobuf: a varint runs past the end");
      const auto b = static_cast<unsigned char>(rest_[0]);
      rest_.remove_prefix(1);
      v |= uint64_t(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
    throw TokenizerError("protobuf: a varint is longer than 10 bytes");
  }
  uint64_t read_fixed(size_t n) {
    if (rest_.size() < n) throw TokenizerError("protobuf: a fixed-size field runs past the end");
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t(static_cast<unsigned char>(rest_[i])) << (8 * i);
    rest_.remove_prefix(n);
    return v;
  }
  std::string_view rest_;
};

}  // namespace amk::tokenizer_detail
