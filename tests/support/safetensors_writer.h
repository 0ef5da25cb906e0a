// A minimal safetensors writer for tests: valid files laid out the way the format's own writer
// lays them out, plus raw building blocks for deliberately corrupt ones. Independent of the
// reader under test (own JSON, own float encodings) so that a shared bug cannot hide.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace amk::testing {

struct StTensor {
  std::string name;
  std::string dtype;  // as the file spells it: "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// 8-byte little-endian length, the header text, the data.
inline std::vector<uint8_t> raw_safetensors(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8 + header.size() + data.size());
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
  return out;
}

// Tensors packed back to back in the given order; the header padded with spaces to a multiple of
// 8 bytes, as the reference writer does.
inline std::vector<uint8_t> safetensors_bytes(
    const std::vector<StTensor>& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  std::vector<uint8_t> data;
  for (const StTensor& t : tensors) {
    const uint64_t begin = data.size();
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  return raw_safetensors(text, data);
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

template <class T>
std::vector<uint8_t> le_bytes(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) { return le_bytes(v); }

inline std::vector<uint8_t> u16_bytes(const std::vector<uint16_t>& v) { return le_bytes(v); }

// Only for values bf16 holds exactly (the low 16 bits of the float are zero).
inline uint16_t bf16_exact(float v) {
  const auto bits = std::bit_cast<uint32_t>(v);
  if ((bits & 0xffffu) != 0) throw std::logic_error("value not exact in bf16");
  return static_cast<uint16_t>(bits >> 16);
}

// Only for values f16 holds exactly (normals, subnormals, zeros, infinities).
inline uint16_t f16_exact(float v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const float a = std::fabs(v);
  if (std::isinf(a)) return sign | 0x7c00;
  if (a == 0.0f) return sign;
  int e = 0;
  std::frexp(a, &e);
  const int unbiased = e - 1;  // a = 1.m * 2^unbiased
  double mant;
  uint16_t exp_field;
  if (unbiased >= -14) {
    if (unbiased > 15) throw std::logic_error("value too large for f16");
    mant = (std::ldexp(static_cast<double>(a), -unbiased) - 1.0) * 1024.0;
    exp_field = static_cast<uint16_t>(unbiased + 15);
  } else {
    mant = std::ldexp(static_cast<double>(a), 24);
    exp_field = 0;
  }
  if (mant != std::floor(mant) || mant >= 1024.0) throw std::logic_error("value not exact in f16");
  return static_cast<uint16_t>(sign | (exp_field << 10) | static_cast<uint16_t>(mant));
}

}  // namespace amk::testing
