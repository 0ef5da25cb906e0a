// GGUF metadata -> ModelConfig, GGUF tensor names -> Hugging Face names, and the q/k row
// permutation llama.cpp's converter applies to the Llama family.
#include "amk/gguf_model.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/strict_json.h"

namespace amk {
namespace {

using model_detail::quote_name;

struct Arch {
  std::string_view gguf;        // general.architecture
  ModelFamily family;
  std::string_view hf_class;    // config.json's architectures[0]
};
constexpr Arch kArchs[] = {
    {"llama", ModelFamily::Llama, "LlamaForCausalLM"},
    {"mistral", ModelFamily::Mistral, "MistralForCausalLM"},
    {"qwen2", ModelFamily::Qwen2, "Qwen2ForCausalLM"},
    {"qwen3", ModelFamily::Qwen3, "Qwen3ForCausalLM"},
};

[[noreturn]] void refuse(const GgufContents& g, std::string_view what) {
  throw UnsupportedModelError(fmt::format("{}: unsupported: {}", g.display_name, what));
}

// Sizes travel to the device as int32; parse_model_config applies the tighter per-field bounds.
constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();

int64_t required_int(const GgufContents& g, const std::string& key) {
  const auto v = g.opt_int(key);
  if (!v) throw ModelConfigError(fmt::format("{}: GGUF metadata {} is required", g.display_name,
                                             quote_name(key)));
  if (*v < 1 || *v > kMaxDim)
    throw ModelConfigError(fmt::format("{}: GGUF metadata {} is {}, must be in [1, {}]",
                                       g.display_name, quote_name(key), *v, kMaxDim));
  return *v;
}

std::optional<int64_t> optional_int(const GgufContents& g, const std::string& key) {
  if (!g.find(key)) return std::nullopt;
  return required_int(g, key);
}

std::optional<double> optional_positive(const GgufContents& g, const std::string& key) {
  const auto v = g.opt_float(key);
  if (v && !(std::isfinite(*v) && *v > 0))
    throw ModelConfigError(fmt::format("{}: GGUF metadata {} is {}, must be positive and finite",
                                       g.display_name, quote_name(key), *v));
  return v;
}

// A token id key (tokenizer.ggml.*_token_id), if present.
std::optional<int64_t> token_id(const GgufContents& g, const std::string& key) {
  const auto v = g.opt_int(key);
  if (v && (*v < 0 || *v > kMaxDim))
    throw ModelConfigError(fmt::format("{}: GGUF metadata {} is {}, not a token id",
                                       g.display_name, quote_name(key), *v));
  return v;
}

}  // namespace

ModelConfig gguf_model_config(const GgufContents& g) {
  const auto arch_name = g.opt_string("general.architecture");
  if (!arch_name)
    throw ModelConfigError(
        fmt::format("{}: GGUF metadata 'general.architecture' is required", g.display_name));
  const Arch* arch = nullptr;
  for (const Arch& a : kArchs)
    if (a.gguf == *arch_name) arch = &a;
  if (!arch)
    refuse(g, fmt::format("GGUF architecture {}; AMK supports llama, mistral, qwen2 and qwen3",
                          quote_name(*arch_name)));
  const std::string p = std::string(*arch_name) + ".";

  // Mixtral is written as architecture llama with experts.
  if (const auto experts = g.opt_int(p + "expert_count"); experts && *experts > 0)
    refuse(g, fmt::format("mixture-of-experts ({}expert_count {})", p, *experts));

  nlohmann::json c;
  c["model_type"] = arch->family == ModelFamily::Llama ? "llama" : std::string(arch->gguf);
  c["architectures"] = {std::string(arch->hf_class)};
  const int64_t hidden = required_int(g, p + "embedding_length");
  const int64_t heads = required_int(g, p + "attention.head_count");
  c["hidden_size"] = hidden;
  c["num_hidden_layers"] = required_int(g, p + "block_count");
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = optional_int(g, p + "attention.head_count_kv").value_or(heads);
  c["intermediate_size"] = required_int(g, p + "feed_forward_length");
  c["max_position_embeddings"] = required_int(g, p + "context_length");

  // head_dim: attention.key_length, else hidden / heads as llama.cpp derives it. Written out
  // explicitly, because config.json's default for qwen3 would be 128.
  int64_t head_dim = 0;
  if (const auto k = optional_int(g, p + "attention.key_length")) {
    head_dim = *k;
  } else {
    if (hidden % heads != 0)
      throw ModelConfigError(fmt::format("{}: GGUF metadata {}embedding_length {} is not divisible "
                                         "by {}attention.head_count {} and no {}attention.key_length "
                                         "is given",
                                         g.display_name, p, hidden, p, heads, p));
    head_dim = hidden / heads;
  }
  c["head_dim"] = head_dim;
  if (const auto v = optional_int(g, p + "attention.value_length"); v && *v != head_dim)
    refuse(g, fmt::format("value heads of size {} ({}attention.value_length) unlike key heads of "
                          "size {}",
                          *v, p, head_dim));
  if (const auto r = optional_int(g, p + "rope.dimension_count"); r && *r != head_dim)
    refuse(g, fmt::format("partial rotary embeddings ({}rope.dimension_count {} of head size {})",
                          p, *r, head_dim));

  c["rms_norm_eps"] = optional_positive(g, p + "attention.layer_norm_rms_epsilon").value_or(1e-5);
  c["rope_theta"] = optional_positive(g, p + "rope.freq_base").value_or(10000.0);
  // Rope scaling as llama.cpp reads it: the type defaults to linear, the factor to 1 (none).
  const std::string type(g.opt_string(p + "rope.scaling.type").value_or("linear"));
  std::optional<double> factor = optional_positive(g, p + "rope.scaling.factor");
  if (!factor) factor = optional_positive(g, p + "rope.scale_linear");
  if (type == "linear") {
    if (factor && *factor != 1.0) c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", *factor}};
  } else if (type != "none") {
    refuse(g, fmt::format("rope scaling type {} ({}rope.scaling.type); AMK implements none and "
                          "linear for GGUF files",
                          quote_name(type), p));
  }

  // What the tensors say: tied embeddings, biases.
  const auto has = [&](std::string_view name) { return g.find_tensor(name) != nullptr; };
  c["tie_word_embeddings"] = !has("output.weight");
  c["attention_bias"] = has("blk.0.attn_q.bias") || has("blk.0.attn_output.bias");
  c["mlp_bias"] = has("blk.0.ffn_gate.bias");
  // The window of a Mistral or Qwen2 is not in GGUF metadata, and llama.cpp attends fully.
  c["sliding_window"] = nullptr;
  c["use_sliding_window"] = false;
  c["torch_dtype"] = "float32";

  // The vocabulary: the tokenizer's token list, else the embedding table's rows.
  if (const GgufValue* tokens = g.find("tokenizer.ggml.tokens")) {
    if (tokens->type() != GgufType::ARRAY || tokens->element_type() != GgufType::STRING)
      throw GgufError(fmt::format("{}: metadata 'tokenizer.ggml.tokens' has type {}, not an array "
                                  "of string",
                                  g.display_name, tokens->type_text()));
    c["vocab_size"] = tokens->size();
  } else if (const GgufTensor* embd = g.find_tensor("token_embd.weight");
             embd && embd->dims.size() == 2) {
    c["vocab_size"] = embd->dims[1];
  } else {
    throw ModelConfigError(fmt::format("{}: no tokenizer.ggml.tokens and no 2-D token_embd.weight "
                                       "to give the vocabulary size",
                                       g.display_name));
  }
  const auto bos = token_id(g, "tokenizer.ggml.bos_token_id");
  const auto eos = token_id(g, "tokenizer.ggml.eos_token_id");
  c["bos_token_id"] = bos ? nlohmann::json(*bos) : nlohmann::json(nullptr);
  c["eos_token_id"] = eos ? nlohmann::json(*eos) : nlohmann::json(nullptr);

  // config.json's parser applies every bound and refusal the safetensors path has; its messages
  // name config.json's fields, so the source says where they came from.
  ModelConfig out = parse_model_config(c.dump(), g.display_name + " (GGUF metadata read as config.json)");
  // Which projections carry biases follows the tensors present; Qwen2's q/k/v biases are part of
  // its modules whatever the file holds (a file without them then lacks a tensor).
  if (out.family != ModelFamily::Qwen2) out.attention_qkv_bias = has("blk.0.attn_q.bias");
  out.attention_out_bias = has("blk.0.attn_output.bias");
  return out;
}

std::optional<std::string> gguf_to_hf_name(std::string_view name) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  constexpr std::string_view kBlk = "blk.";
  if (!name.starts_with(kBlk)) return std::nullopt;
  std::string_view rest = name.substr(kBlk.size());
  int64_t layer = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), layer);
  // Canonical decimal only: "blk.01." would otherwise alias "blk.1.".
  if (ec != std::errc() || end == rest.data() || end == rest.data() + rest.size() || *end != '.' ||
      (rest[0] == '0' && end - rest.data() > 1) || layer < 0)
    return std::nullopt;
  rest = rest.substr(size_t(end - rest.data()) + 1);
  std::string_view suffix;
  if (rest.ends_with(".weight")) {
    suffix = ".weight";
  } else if (rest.ends_with(".bias")) {
    suffix = ".bias";
  } else {
    return std::nullopt;
  }
  const std::string_view module = rest.substr(0, rest.size() - suffix.size());
  constexpr std::pair<std::string_view, std::string_view> kModules[] = {
      {"attn_q", "self_attn.q_proj"},       {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},       {"attn_output", "self_attn.o_proj"},
      {"attn_q_norm", "self_attn.q_norm"},  {"attn_k_norm", "self_attn.k_norm"},
      {"attn_norm", "input_layernorm"},     {"ffn_norm", "post_attention_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},        {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
  };
  for (const auto& [gguf, hf] : kModules)
    if (module == gguf) {
      // Norms have weights only.
      if (suffix == ".bias" && hf.find("norm") != std::string_view::npos) return std::nullopt;
      return fmt::format("model.layers.{}.{}{}", layer, hf, suffix);
    }
  return std::nullopt;
}

bool gguf_qk_rows_permuted(ModelFamily family) {
  return family == ModelFamily::Llama || family == ModelFamily::Mistral;
}

void unpermute_qk_rows(std::span<float> data, int64_t n_heads, int64_t cols) {
  if (n_heads <= 0 || cols <= 0 || data.size() % size_t(n_heads * cols) != 0 ||
      (data.size() / size_t(n_heads * cols)) % 2 != 0)
    throw std::invalid_argument(fmt::format(
        "unpermute_qk_rows: {} values are not {} heads of an even number of rows of {}",
        data.size(), n_heads, cols));
  const auto head_rows = int64_t(data.size()) / (n_heads * cols);
  const int64_t half = head_rows / 2;
  std::vector<float> head(size_t(head_rows * cols));
  for (int64_t h = 0; h < n_heads; ++h) {
    float* base = data.data() + h * head_rows * cols;
    std::copy(base, base + head_rows * cols, head.begin());
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::copy_n(head.begin() + (2 * i + j) * cols, cols, base + (j * half + i) * cols);
  }
}

}  // namespace amk
