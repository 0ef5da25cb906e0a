#include "amk/safetensors_writer.h"

#include <nlohmann/json.hpp>

namespace amk {

int64_t StTensorDecl::nbytes() const {
  int64_t n = itemsize(dtype);
  for (int64_t d : shape) n *= d;
  return n;
}

std::string safetensors_header(const std::vector<StTensorDecl>& tensors,
                               const std::vector<std::pair<std::string, std::string>>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  int64_t offset = 0;
  for (const StTensorDecl& t : tensors) {
    const int64_t end = offset + t.nbytes();
    header[t.name] = {{"dtype", name_of(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text = header.dump();
  // The data section starts 8-byte aligned, as the format's writer leaves it.
  while (text.size() % 8 != 0) text += ' ';
  return text;
}

SafetensorsWriter::SafetensorsWriter(const std::filesystem::path& path,
                                     std::vector<StTensorDecl> tensors,
                                     const std::vector<std::pair<std::string, std::string>>& metadata)
    : path_(path), out_(path, std::ios::binary | std::ios::trunc) {
  if (!out_) throw SafetensorsError("cannot create " + path.string());
  const std::string header = safetensors_header(tensors, metadata);
  uint8_t len[8];
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  out_.write(reinterpret_cast<const char*>(len), 8);
  out_.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const StTensorDecl& t : tensors) expected_ += t.nbytes();
  if (!out_) throw SafetensorsError("cannot write " + path.string());
}

void SafetensorsWriter::append(std::span<const uint8_t> bytes) {
  if (written_ + static_cast<int64_t>(bytes.size()) > expected_)
    throw SafetensorsError(path_.string() + ": more tensor bytes than the header declares");
  out_.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out_) throw SafetensorsError("cannot write " + path_.string());
  written_ += static_cast<int64_t>(bytes.size());
}

void SafetensorsWriter::finish() {
  if (written_ != expected_)
    throw SafetensorsError(path_.string() + ": " + std::to_string(written_) + " of " +
                           std::to_string(expected_) + " declared tensor bytes written");
  out_.close();
  if (!out_) throw SafetensorsError("cannot close " + path_.string());
}

}  // namespace amk
