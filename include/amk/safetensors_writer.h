// Writing safetensors files, streamed: the header (every tensor's name, dtype, shape and offsets)
// is written first from the declared tensors, then their bytes are appended in declaration
// order, so a 16 GB checkpoint never has to be in memory. The layout is the format's own
// writer's: tensors back to back, the header JSON padded with spaces to a multiple of 8 bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "amk/safetensors.h"

namespace amk {

struct StTensorDecl {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  int64_t nbytes() const;  // numel * itemsize
};

// The header text (padded) for tensors packed in this order, with optional __metadata__.
std::string safetensors_header(const std::vector<StTensorDecl>& tensors,
                               const std::vector<std::pair<std::string, std::string>>& metadata = {});

class SafetensorsWriter {
 public:
  // Creates (truncates) `path` and writes the length and header. Throws SafetensorsError.
  SafetensorsWriter(const std::filesystem::path& path, std::vector<StTensorDecl> tensors,
                    const std::vector<std::pair<std::string, std::string>>& metadata = {});
  // The next bytes of the data section (any split across calls). Writing past the declared
  // total throws.
  void append(std::span<const uint8_t> bytes);
  // Checks that exactly the declared bytes were written and closes the file. Throws.
  void finish();

 private:
  std::filesystem::path path_;
  std::ofstream out_;
  int64_t expected_ = 0, written_ = 0;
};

}  // namespace amk
