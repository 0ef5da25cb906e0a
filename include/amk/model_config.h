// A Hugging Face decoder's config.json, as the facts AMK compiles from.
//
// Two config formats are in use and both are read: the classic one (`rope_theta`, `rope_scaling`,
// `torch_dtype`) and the one transformers 5 writes (`rope_parameters`, `dtype`). Fields a config
// leaves out take the defaults of the model_type's transformers config class.
//
// Supported: model_type llama (Llama 1/2/3/3.1/3.2), mistral, qwen2 (Qwen2/2.5), qwen3 (dense).
// Parsing refuses, with a message naming the feature, anything AMK would compute wrongly:
// mixture-of-experts, non-SiLU MLPs, rope types other than default/linear/llama3, partial
// rotary embeddings, quantized checkpoints, heads not divisible by kv heads, other model types.
// A sliding window depends on how long a context is wanted, so it is checked separately by
// check_max_context().
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "amk/ir.h"

namespace amk {

// config.json is unreadable or malformed (missing field, wrong type, impossible value).
class ModelConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// config.json is well formed but describes a model AMK does not support; the message names the
// feature ("mixture-of-experts (model_type 'mixtral')").
class UnsupportedModelError : public ModelConfigError {
 public:
  using ModelConfigError::ModelConfigError;
};

enum class ModelFamily { Llama, Mistral, Qwen2, Qwen3 };
std::string_view name_of(ModelFamily f);  // the model_type: "llama", "mistral", "qwen2", "qwen3"

enum class RopeType { Default, Linear, Llama3 };

struct RopeConfig {
  double theta = 10000.0;
  RopeType type = RopeType::Default;
  double factor = 1.0;                          // linear and llama3
  double low_freq_factor = 1.0;                 // llama3
  double high_freq_factor = 4.0;                // llama3
  int64_t original_max_position_embeddings = 0; // llama3
  bool operator==(const RopeConfig&) const = default;
};

struct ModelConfig {
  std::string architecture;  // architectures[0], e.g. "LlamaForCausalLM"; "" when absent
  std::string model_type;    // as written
  ModelFamily family = ModelFamily::Llama;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
  int64_t head_dim = 0;             // defaults to hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  int64_t max_position_embeddings = 0;

  bool tie_word_embeddings = false;
  // Which projections carry a bias. These are what the model's modules build, not the raw
  // `attention_bias` field: Qwen2 always has q/k/v biases and never an o_proj bias.
  bool attention_qkv_bias = false;
  bool attention_out_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;  // per-head RMSNorm on q and k before RoPE (Qwen3)
  std::string hidden_act = "silu";

  // Sliding-window attention as configured. `layer_types` always has num_hidden_layers entries,
  // "full_attention" or "sliding_attention" (from the config, or derived the way transformers
  // derives it); `sliding_window` is the window those sliding layers use.
  std::optional<int64_t> sliding_window;
  bool use_sliding_window = false;
  std::vector<std::string> layer_types;

  std::vector<int64_t> bos_token_ids;  // int, list or null in the file: empty when null/absent
  std::vector<int64_t> eos_token_ids;
  std::string torch_dtype;  // "bfloat16", "float16", "float32", ...; "" when absent
  bool new_format = false;  // read from `rope_parameters` rather than `rope_theta`/`rope_scaling`

  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  // The window that some layer attends within, or nullopt when every layer attends fully.
  std::optional<int64_t> effective_sliding_window() const;
};

// Parses config.json text; `source` (a file name) prefixes every message. Throws
// ModelConfigError, or UnsupportedModelError for a well-formed config AMK refuses.
ModelConfig parse_model_config(std::string_view json_text, std::string_view source = "config.json");
ModelConfig load_model_config(const std::filesystem::path& config_json);

// Refuses (UnsupportedModelError) a context of `max_context` tokens that some layer would attend
// to through a sliding window shorter than the context; AMK implements full attention only, which
// equals sliding attention exactly when the context fits in the window.
void check_max_context(const ModelConfig& config, int64_t max_context);

// ---- derived facts ----------------------------------------------------------------------------

// A weight the model's modules hold, under its Hugging Face state-dict name.
struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;
};
// Every weight in module order: embeddings, each layer, final norm, lm_head (absent when tied).
std::vector<WeightSpec> expected_weights(const ModelConfig& config);
// Parameters, counting a tied lm_head once (it is the embedding table).
int64_t parameter_count(const ModelConfig& config);
// Bytes of all weights stored as `dtype` (packed sub-byte types round up per tensor).
int64_t weight_bytes(const ModelConfig& config, DType dtype);

// RoPE inverse frequencies, head_dim / 2 of them: theta^(-2i/head_dim), then the configured
// scaling (linear: divided by factor; llama3: transformers' _compute_llama3_parameters, which
// leaves high frequencies alone, divides low ones by factor and blends in between). Computed
// in double; transformers computes the same formula in float32.
std::vector<double> rope_inv_freq(const ModelConfig& config);

}  // namespace amk
