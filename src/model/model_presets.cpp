// The published config.json of every preset (Hugging Face hub, classic format). Only the fields
// the models' configs carry are written, in their order, so a preset reads like the real file.
#include "amk/model_presets.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace amk {

namespace {

using json = nlohmann::ordered_json;

json llama3_scaling(double factor) {
  return {{"factor", factor},
          {"high_freq_factor", 4.0},
          {"low_freq_factor", 1.0},
          {"original_max_position_embeddings", 8192},
          {"rope_type", "llama3"}};
}

json llama(int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim,
           int64_t ffn, int64_t vocab, bool tied, double scaling_factor, int64_t max_pos,
           int64_t bos, int64_t eos) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"bos_token_id", bos},
          {"eos_token_id", eos},
          {"head_dim", head_dim},
          {"hidden_act", "silu"},
          {"hidden_size", hidden},
          {"initializer_range", 0.02},
          {"intermediate_size", ffn},
          {"max_position_embeddings", max_pos},
          {"mlp_bias", false},
          {"model_type", "llama"},
          {"num_attention_heads", heads},
          {"num_hidden_layers", layers},
          {"num_key_value_heads", kv_heads},
          {"pretraining_tp", 1},
          {"rms_norm_eps", 1e-05},
          {"rope_scaling", llama3_scaling(scaling_factor)},
          {"rope_theta", 500000.0},
          {"tie_word_embeddings", tied},
          {"torch_dtype", "bfloat16"},
          {"transformers_version", "4.45.0"},
          {"use_cache", true},
          {"vocab_size", vocab}};
}

json qwen3(int64_t hidden, int64_t layers, int64_t heads, int64_t ffn, bool tied) {
  return {{"architectures", {"Qwen3ForCausalLM"}},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"bos_token_id", 151643},
          {"eos_token_id", 151645},
          {"head_dim", 128},
          {"hidden_act", "silu"},
          {"hidden_size", hidden},
          {"initializer_range", 0.02},
          {"intermediate_size", ffn},
          {"max_position_embeddings", 40960},
          {"max_window_layers", layers},
          {"model_type", "qwen3"},
          {"num_attention_heads", heads},
          {"num_hidden_layers", layers},
          {"num_key_value_heads", 8},
          {"rms_norm_eps", 1e-06},
          {"rope_scaling", nullptr},
          {"rope_theta", 1000000},
          {"sliding_window", nullptr},
          {"tie_word_embeddings", tied},
          {"torch_dtype", "bfloat16"},
          {"transformers_version", "4.51.0"},
          {"use_cache", true},
          {"use_sliding_window", false},
          {"vocab_size", 151936}};
}

json qwen25_05b() {
  return {{"architectures", {"Qwen2ForCausalLM"}},
          {"attention_dropout", 0.0},
          {"bos_token_id", 151643},
          {"eos_token_id", 151643},
          {"hidden_act", "silu"},
          {"hidden_size", 896},
          {"initializer_range", 0.02},
          {"intermediate_size", 4864},
          {"max_position_embeddings", 32768},
          {"max_window_layers", 24},
          {"model_type", "qwen2"},
          {"num_attention_heads", 14},
          {"num_hidden_layers", 24},
          {"num_key_value_heads", 2},
          {"rms_norm_eps", 1e-06},
          {"rope_theta", 1000000.0},
          {"sliding_window", 32768},
          {"tie_word_embeddings", true},
          {"torch_dtype", "bfloat16"},
          {"transformers_version", "4.40.1"},
          {"use_cache", true},
          {"use_sliding_window", false},
          {"vocab_size", 151936}};
}

// HuggingFaceTB/SmolLM2-135M-Instruct: a Llama with 9 query and 3 KV heads of 64, a tied 49152
// vocabulary, no RoPE scaling (theta 1e5), bos 1 / eos 2.
json smollm2_135m() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"head_dim", 64},
          {"hidden_act", "silu"},
          {"hidden_size", 576},
          {"initializer_range", 0.041666666666666664},
          {"intermediate_size", 1536},
          {"is_llama_config", true},
          {"max_position_embeddings", 8192},
          {"mlp_bias", false},
          {"model_type", "llama"},
          {"num_attention_heads", 9},
          {"num_hidden_layers", 30},
          {"num_key_value_heads", 3},
          {"pad_token_id", 2},
          {"pretraining_tp", 1},
          {"rms_norm_eps", 1e-05},
          {"rope_interleaved", false},
          {"rope_scaling", nullptr},
          {"rope_theta", 100000},
          {"tie_word_embeddings", true},
          {"torch_dtype", "bfloat16"},
          {"transformers_version", "4.42.3"},
          {"use_cache", true},
          {"vocab_size", 49152}};
}

json preset(std::string_view name) {
  if (name == "llama-3.2-1b")
    return llama(2048, 16, 32, 8, 64, 8192, 128256, true, 32.0, 131072, 128000, 128001);
  if (name == "llama-3.1-8b") {
    json c = llama(4096, 32, 32, 8, 128, 14336, 128256, false, 8.0, 131072, 128000, 128001);
    c.erase("head_dim");  // Llama 3.1's published config predates the field (4096 / 32 = 128)
    return c;
  }
  if (name == "qwen3-0.6b") return qwen3(1024, 28, 16, 3072, true);
  if (name == "qwen3-1.7b") return qwen3(2048, 28, 16, 6144, true);
  if (name == "qwen3-8b") return qwen3(4096, 36, 32, 12288, false);
  if (name == "qwen2.5-0.5b") return qwen25_05b();
  if (name == "smollm2-135m") return smollm2_135m();
  // A Llama 3.2 in miniature, scaled RoPE included so that the README's main command runs
  // ROPE_FREQ; a short context keeps the CPU reference quick.
  if (name == "tiny") return llama(64, 2, 4, 2, 16, 128, 256, true, 32.0, 2048, 1, 2);
  std::string known;
  for (std::string_view n : model_preset_names()) known += (known.empty() ? "" : ", ") + std::string(n);
  throw std::invalid_argument("unknown preset '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace

const std::vector<std::string_view>& model_preset_names() {
  static const std::vector<std::string_view> names = {
      "llama-3.2-1b", "llama-3.1-8b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-8b", "qwen2.5-0.5b",
      "smollm2-135m", "tiny"};
  return names;
}

std::string model_preset_config(std::string_view name, std::string_view torch_dtype) {
  json c = preset(name);
  c["torch_dtype"] = torch_dtype;
  return c.dump(2) + "\n";
}

std::string model_preset_generation_config(std::string_view name) {
  const json c = preset(name);
  const json g = {{"bos_token_id", c["bos_token_id"]},
                  {"do_sample", false},
                  {"eos_token_id", c["eos_token_id"]},
                  {"transformers_version", c["transformers_version"]}};
  return g.dump(2) + "\n";
}

}  // namespace amk
