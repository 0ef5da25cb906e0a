// A regular file mapped read-only, as the safetensors and GGUF readers hold their inputs: opened
// without blocking (a FIFO is refused as not a regular file instead of waiting for a writer),
// mapped whole, unmapped when the last owner goes. Errors come back as text ("cannot open: ...",
// "not a regular file", ...) for the reader to wrap in its own exception with the file's name.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

namespace amk::model_detail {

class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  ~MappedFile();

  // Maps `path`; on failure returns an empty MappedFile and sets *error (never empty then).
  static MappedFile map(const std::filesystem::path& path, std::string* error);

  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(addr_), size_};
  }
  size_t size() const { return size_; }

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace amk::model_detail
