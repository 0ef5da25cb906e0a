// Reading GGUF files (llama.cpp's single-file model format, versions 2 and 3, little-endian):
// the magic "GGUF", a version, the tensor and metadata counts, the typed metadata key/values, the
// tensor infos, padding to general.alignment, then the data section.
//
// The file is memory-mapped read-only and nothing in it is trusted: every count, length, type,
// dimension, offset and size is checked against the bytes that remain, with overflow-safe
// arithmetic, before anything is sized by it; counts are capped so that a hostile header cannot
// make the reader allocate gigabytes (metadata values are views into the mapping, decoded on
// demand, so parsing allocates per key and per tensor only). Every error is a GgufError that names
// the file and the problem.
//
// Dequantising the tensors is amk/gguf_dequant.h; turning a Llama-family GGUF into a checkpoint
// is amk/gguf_model.h.
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
#include <vector>

namespace amk {

// A malformed or unreadable GGUF file, or a metadata read of the wrong type.
class GgufError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Metadata value types, numbered as in the file.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
std::string_view name_of(GgufType t);  // "uint8", ..., "string", "array"

// Tensor types (ggml's), numbered as in the file. The reader knows the block layout of all of
// these, so it can check every tensor's size; gguf_dequant.h converts the ones AMK supports.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9, Q2_K = 10,
  Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18,
  IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26,
  I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};
std::string_view name_of(GgmlType t);                        // "Q4_K", "BF16", ...
std::optional<GgmlType> ggml_type_from_id(uint32_t id);     // nullopt for ids the reader lacks
int64_t ggml_block_elements(GgmlType t);                    // weights per block (1 for F32)
int64_t ggml_block_bytes(GgmlType t);                       // bytes per block

// Caps on what a header may declare, far above every published model (the largest have a few
// thousand tensors, a few dozen metadata keys, vocabularies of ~260k entries and chat templates
// of tens of kilobytes), so that a hostile header is refused before it is believed.
inline constexpr uint64_t kMaxGgufTensors = 1 << 16;
inline constexpr uint64_t kMaxGgufMetadata = 1 << 16;
inline constexpr uint64_t kMaxGgufStringBytes = 64ull << 20;   // one string
inline constexpr uint64_t kMaxGgufKeyBytes = 65535;            // the spec's limit on keys
inline constexpr uint64_t kMaxGgufTensorNameBytes = 1024;      // ggml itself stops at 63
inline constexpr uint32_t kMaxGgufDims = 4;                    // GGML_MAX_DIMS
inline constexpr int kMaxGgufArrayDepth = 8;                   // arrays of arrays of ...
inline constexpr uint64_t kGgufDefaultAlignment = 32;

// One metadata value: a window on the mapped file, checked when the file was parsed. Cheap to
// copy; valid while the GgufFile (or the buffer given to parse_gguf) lives. The as_* reads give
// nullopt when the value is of another type.
class GgufValue {
 public:
  GgufType type() const { return type_; }
  // "uint32", "string", "array of string", "array of array of int32", ...
  std::string type_text() const;

  // Any integer type (and nullopt for a uint64 beyond int64's range).
  std::optional<int64_t> as_int() const;
  // float32 or float64.
  std::optional<double> as_float() const;
  std::optional<bool> as_bool() const;
  std::optional<std::string_view> as_string() const;

  // Arrays: the element type and count; elements() decodes them (nested arrays included). For a
  // value that is not an array, element_type() is its own type, size() 0, elements() empty.
  GgufType element_type() const { return type_ == GgufType::ARRAY ? element_type_ : type_; }
  uint64_t size() const { return type_ == GgufType::ARRAY ? count_ : 0; }
  std::vector<GgufValue> elements() const;

 private:
  friend struct GgufParser;
  GgufType type_ = GgufType::U8;
  GgufType element_type_ = GgufType::U8;  // arrays
  uint64_t count_ = 0;                    // arrays
  // Scalars: the value's bytes; strings: the characters (after the length); arrays: the
  // elements' encoding (after the element type and count).
  std::span<const std::byte> bytes_;
};

struct GgufKv {
  std::string_view key;
  GgufValue value;
};

// One tensor, as the file describes it. `dims` are in GGUF (ggml) order: dims[0] is the
// innermost, contiguous one, so a PyTorch weight of shape [out, in] has dims {in, out}.
struct GgufTensor {
  std::string_view name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> dims;
  uint64_t offset = 0;               // from the start of the data section (aligned)
  std::span<const std::byte> data;   // exactly numel() / block * block bytes
  int64_t numel() const;             // product of dims; checked when parsed
};

// The parsed contents of a GGUF file held in memory. Views point into the buffer parsed.
struct GgufContents {
  std::string display_name;  // prefixes every message
  uint32_t version = 0;
  uint64_t alignment = kGgufDefaultAlignment;
  uint64_t data_offset = 0;  // where the data section starts in the file
  std::vector<GgufKv> metadata;      // in file order
  std::vector<GgufTensor> tensors;   // in file order

  const GgufValue* find(std::string_view key) const;       // nullptr if absent
  const GgufTensor* find_tensor(std::string_view name) const;  // nullptr if absent

  // Typed reads. get_* throw GgufError "<file>: metadata 'k' is absent" or "... is a uint32, not
  // a string"; opt_* give nullopt when the key is absent and throw on the wrong type.
  std::string_view get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;     // any integer type
  double get_float(std::string_view key) const;    // float32 / float64
  bool get_bool(std::string_view key) const;
  std::optional<std::string_view> opt_string(std::string_view key) const;
  std::optional<int64_t> opt_int(std::string_view key) const;
  std::optional<double> opt_float(std::string_view key) const;
  std::optional<bool> opt_bool(std::string_view key) const;
  // Arrays: of strings (tokenizer.ggml.tokens / .merges), of any integer type (.token_type), of
  // float32 / float64 (.scores).
  std::vector<std::string_view> get_strings(std::string_view key) const;
  std::vector<int64_t> get_ints(std::string_view key) const;
  std::vector<double> get_floats(std::string_view key) const;

  // Sorted indexes for the lookups (filled by parse_gguf).
  std::vector<uint32_t> metadata_by_key;
  std::vector<uint32_t> tensors_by_name;
};

// Parses and checks a whole GGUF file held in `file`. `display_name` prefixes every message.
// Throws GgufError. This is the entry point the fuzzer drives.
GgufContents parse_gguf(std::span<const std::byte> file, std::string_view display_name);

// A GGUF file on disk, memory-mapped read-only. Movable, not copyable; moving keeps every view
// valid (the mapping lives on the heap). As with safetensors, truncating the file while it is
// mapped makes later reads fault; model files are read-only inputs.
class GgufFile {
 public:
  // Throws GgufError (unreadable, not a regular file, malformed).
  static GgufFile open(const std::filesystem::path& path);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile();

  const GgufContents& contents() const;
  const GgufContents* operator->() const { return &contents(); }

 private:
  struct State;
  explicit GgufFile(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// Whether `path` starts with the GGUF magic (a regular file of at least 4 bytes); no error.
bool looks_like_gguf(const std::filesystem::path& path);

}  // namespace amk
