// Reading safetensors files (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON header, then the data section.
//
// The file is memory-mapped read-only and tensors are views into the mapping (no copies), so
// opening a 16 GB checkpoint costs its header. Nothing in the header is trusted: every length,
// offset, dtype and shape is checked against the file before any view exists, and every error
// names the file, the tensor and the problem.
//
// A mapping is only as stable as the file under it: truncating a file while it is mapped makes
// later reads fault (SIGBUS). Checkpoints are read-only inputs, so this is accepted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace amk {

// A malformed or unreadable safetensors file, or a read the tensor's dtype cannot serve.
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The dtypes safetensors defines that AMK reads. Distinct from amk::DType: checkpoints hold
// types the IR never computes in (F64, I64, I16) and lack the IR's packed I4.
enum class StDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2 };

std::string_view name_of(StDType t);                          // "BF16", "F8_E4M3", ...
std::optional<StDType> parse_st_dtype(std::string_view name);  // exact, case-sensitive
int64_t itemsize(StDType t);                                  // bytes per element

// Byte limit on the JSON header: the format's own reader refuses larger ones, and a header is
// parsed into memory, so an unbounded one would be a memory bomb.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// One tensor: a window on the file's bytes (little-endian, row-major). Cheap to copy; valid while
// the SafetensorsFile (or the buffer given to parse_safetensors) that produced it lives.
struct TensorView {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;  // exactly numel() * itemsize(dtype) bytes
  std::string file;                  // for error messages

  int64_t numel() const;  // product of shape (1 for a scalar); checked when the view was made
  // Element i (row-major flat index) widened to double / float. F64, F32, F16 and BF16 only.
  double float_at(int64_t i) const;
  std::vector<float> to_floats() const;
  // Element i as an integer. I64, I32, I16, I8, U8 and BOOL only.
  int64_t int_at(int64_t i) const;
  std::vector<int64_t> to_ints() const;
};

// The parsed contents of a safetensors file held in memory.
struct SafetensorsContents {
  std::vector<TensorView> tensors;                               // sorted by name
  std::vector<std::pair<std::string, std::string>> metadata;     // "__metadata__", sorted by key
  uint64_t header_bytes = 0;                                     // N
  uint64_t data_bytes = 0;                                       // size of the data section

  const TensorView* find(std::string_view name) const;  // nullptr if absent
};

// Parses and checks a whole safetensors file held in `file` (the header and the data section).
// The views point into `file`. `display_name` prefixes every error message. Throws
// SafetensorsError. This is the entry point the fuzzer drives.
SafetensorsContents parse_safetensors(std::span<const std::byte> file, std::string_view display_name);

// A safetensors file on disk, memory-mapped read-only. Movable, not copyable; moving keeps every
// TensorView valid (the mapping and the views live on the heap). A moved-from file may only be
// assigned to or destroyed.
class SafetensorsFile {
 public:
  // Throws SafetensorsError (unreadable, not a regular file, malformed).
  static SafetensorsFile open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::filesystem::path& path() const;
  const std::vector<TensorView>& tensors() const;  // sorted by name
  const std::vector<std::pair<std::string, std::string>>& metadata() const;
  uint64_t file_bytes() const;
  const TensorView* find(std::string_view name) const;  // nullptr if absent
  const TensorView& at(std::string_view name) const;    // throws "<file>: missing tensor 'x'"

 private:
  struct State;
  explicit SafetensorsFile(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace amk
