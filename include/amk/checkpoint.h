// A Hugging Face checkpoint folder: config.json, an optional generation_config.json, and the
// weights in model.safetensors or in shards listed by model.safetensors.index.json.
//
// Weights stay memory-mapped: a tensor is a view into its shard. Opening checks the folder as a
// whole (every shard opened once, shard names confined to the folder, no tensor in two shards,
// every tensor the index lists present in the shard it names, and config.json's sizes against the
// tensors: num_hidden_layers against the model.layers.N names, vocab/hidden/heads x head_dim/kv
// heads/intermediate against the tensors that carry them, each mismatch a ModelConfigError naming
// the field) so that a later lookup can only fail for a tensor that is truly absent or misshapen.
//
// A single GGUF file (llama.cpp's format, amk/gguf.h) opens too: its metadata becomes the config,
// its tensors are dequantised once into buffers the Checkpoint owns, under their Hugging Face
// names and shapes, with llama.cpp's q/k row permutation undone (amk/gguf_model.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "amk/model_config.h"
#include "amk/safetensors.h"

namespace amk {

// The folder is inconsistent (bad index, missing shard, escaping path, duplicated or missing
// tensor, wrong shape). Malformed files raise SafetensorsError / ModelConfigError instead; all
// derive from std::runtime_error and name the file.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The fields of generation_config.json AMK uses; token ids are lists (the file allows an int,
// a list or null).
struct GenerationConfig {
  std::vector<int64_t> bos_token_ids;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;
};

struct GgufTensorStore;  // the dequantised tensors of a GGUF checkpoint

// A GGUF checkpoint's tensors are stored as f32 unless that would take more than this many
// bytes; then as bf16 (rounded to nearest even), half the memory. Dequantised weights are exact
// in f32; a model that large would not fit the reference VM in f32 anyway.
inline constexpr int64_t kGgufMaxF32Bytes = int64_t{4} << 30;

class Checkpoint {
 public:
  // A checkpoint folder, or a .gguf file (by extension or magic: open_gguf). Throws
  // CheckpointError, SafetensorsError, GgufError, ModelConfigError or UnsupportedModelError.
  static Checkpoint open(const std::filesystem::path& folder);
  // A GGUF file of architecture llama, mistral, qwen2 or qwen3 whose tensors are all of a type
  // amk/gguf_dequant.h converts. The generation config's bos/eos/pad come from
  // tokenizer.ggml.{bos,eos,padding}_token_id. Every weight the config implies must be present
  // with its shape, and every tensor must be one of them.
  static Checkpoint open_gguf(const std::filesystem::path& file);

  // The folder, or the .gguf file.
  const std::filesystem::path& folder() const { return folder_; }
  bool is_gguf() const { return gguf_ != nullptr; }
  const ModelConfig& config() const { return config_; }
  const std::optional<GenerationConfig>& generation_config() const { return generation_; }
  // The ids that end generation: generation_config.json's when it names any, else config.json's.
  std::vector<int64_t> eos_token_ids() const;

  bool sharded() const { return sharded_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }  // sorted by file name

  size_t num_tensors() const { return index_.size(); }
  std::vector<std::string> tensor_names() const;  // sorted
  const TensorView* find(std::string_view name) const;  // nullptr if absent
  // Throws CheckpointError "<folder>: missing tensor 'x'".
  const TensorView& tensor(std::string_view name) const;
  // Also requires the shape; throws CheckpointError naming the tensor, the expected shape and the
  // actual one.
  const TensorView& tensor(std::string_view name, std::span<const int64_t> expected_shape) const;
  const TensorView& tensor(std::string_view name, const std::vector<int64_t>& expected_shape) const {
    return tensor(name, std::span<const int64_t>(expected_shape));
  }

 private:
  Checkpoint() = default;

  std::filesystem::path folder_;
  ModelConfig config_;
  std::optional<GenerationConfig> generation_;
  bool sharded_ = false;
  std::vector<SafetensorsFile> files_;
  // Every tensor of every file, sorted by name. The views live inside files_' heap state, so
  // they survive moves of the Checkpoint.
  std::vector<const TensorView*> index_;
  // A GGUF checkpoint's tensors (views and their buffers); null for a folder.
  std::shared_ptr<const GgufTensorStore> gguf_;
};

}  // namespace amk
