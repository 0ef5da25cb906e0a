// A randomly initialised Hugging Face checkpoint folder at a preset's shape (`amk make-model`):
// config.json, generation_config.json and the weights, one file or sharded with
// model.safetensors.index.json as transformers shards them. Weights are written tensor by
// tensor in bounded chunks, so an 8B model never has to fit in memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "amk/ir.h"
#include "amk/model_config.h"

namespace amk {

// Shards stay at most this size (a tensor larger than it gets a shard of its own).
inline constexpr int64_t kMaxShardBytes = 4'000'000'000;

struct CheckpointShard {
  std::string file;  // "model.safetensors", or "model-00001-of-00004.safetensors"
  std::vector<WeightSpec> tensors;
  int64_t bytes = 0;
};

// expected_weights(config) in order, packed greedily into shards of at most max_shard_bytes.
std::vector<CheckpointShard> plan_shards(const ModelConfig& config, DType dtype,
                                         int64_t max_shard_bytes = kMaxShardBytes);
// model.safetensors.index.json for a sharded plan: total_size and the weight_map.
std::string shard_index_json(const std::vector<CheckpointShard>& shards);

// Writes preset `preset` (amk/model_presets.h) stored as `dtype` (F32, F16 or BF16) into `dir`
// (created if absent). Weights ~ N(0, 0.02), norm weights 1 + N(0, 0.02), from a generator seeded
// with `seed`: the same arguments write the same bytes. Throws std::invalid_argument for an
// unknown preset or dtype, std::runtime_error when a file cannot be written.
void write_random_checkpoint(const std::filesystem::path& dir, std::string_view preset, DType dtype,
                             uint64_t seed, int64_t max_shard_bytes = kMaxShardBytes);
// The same for any shape: `config_json` is a config.json's text (parse_model_config must accept
// it; `what` names it in errors) and `generation_config_json` is written beside it.
void write_random_checkpoint_for(const std::filesystem::path& dir, const std::string& config_json,
                                 const std::string& generation_config_json, std::string_view what,
                                 DType dtype, uint64_t seed,
                                 int64_t max_shard_bytes = kMaxShardBytes);

}  // namespace amk
