// hf_config_json / write_hf_folder (amk/hf_export.h).
#include "amk/hf_export.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "amk/safetensors_writer.h"
#include "amk/tensor.h"

namespace amk {

namespace {

std::string_view default_architecture(ModelFamily family) {
  switch (family) {
    case ModelFamily::Llama: return "LlamaForCausalLM";
    case ModelFamily::Mistral: return "MistralForCausalLM";
    case ModelFamily::Qwen2: return "Qwen2ForCausalLM";
    case ModelFamily::Qwen3: return "Qwen3ForCausalLM";
  }
  return "LlamaForCausalLM";
}

nlohmann::ordered_json token_ids(const std::vector<int64_t>& ids) {
  if (ids.empty()) return nullptr;
  if (ids.size() == 1) return ids[0];
  return ids;
}

StDType st_dtype(DType d) {
  switch (d) {
    case DType::BF16: return StDType::BF16;
    case DType::F16: return StDType::F16;
    case DType::F32: return StDType::F32;
    default: throw HfExportError(fmt::format("an HF folder is written as BF16, F16 or F32, not {}", name_of(d)));
  }
}

std::string_view torch_dtype_name(DType d) {
  return d == DType::BF16 ? "bfloat16" : d == DType::F16 ? "float16" : "float32";
}

}  // namespace

std::string hf_config_json(const ModelConfig& c, const std::string& torch_dtype) {
  nlohmann::ordered_json j;
  j["architectures"] = {c.architecture.empty() ? std::string(default_architecture(c.family)) : c.architecture};
  j["model_type"] = std::string(name_of(c.family));
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = c.hidden_act;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rope_theta"] = c.rope.theta;
  switch (c.rope.type) {
    case RopeType::Default: j["rope_scaling"] = nullptr; break;
    case RopeType::Linear: j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope.factor}}; break;
    case RopeType::Llama3:
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope.factor},
                           {"low_freq_factor", c.rope.low_freq_factor},
                           {"high_freq_factor", c.rope.high_freq_factor},
                           {"original_max_position_embeddings", c.rope.original_max_position_embeddings}};
      break;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.family == ModelFamily::Qwen2) {
    if (c.attention_out_bias)
      throw HfExportError("a Qwen2 config.json cannot give o_proj a bias");
  } else {
    if (c.attention_qkv_bias != c.attention_out_bias)
      throw HfExportError(fmt::format("a {} config.json gives q/k/v and o_proj biases together (attention_bias); "
                                      "this model has {}",
                                      name_of(c.family), c.attention_qkv_bias ? "q/k/v biases only" : "an o_proj bias only"));
    j["attention_bias"] = c.attention_qkv_bias;
  }
  j["mlp_bias"] = c.mlp_bias;
  j["sliding_window"] = c.sliding_window ? nlohmann::ordered_json(*c.sliding_window) : nlohmann::ordered_json(nullptr);
  j["use_sliding_window"] = c.use_sliding_window;
  j["bos_token_id"] = token_ids(c.bos_token_ids);
  j["eos_token_id"] = token_ids(c.eos_token_ids);
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

void write_hf_folder(const Checkpoint& checkpoint, const std::filesystem::path& dir, DType dtype) {
  namespace fs = std::filesystem;
  const StDType st = st_dtype(dtype);
  std::error_code ec;
  if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
    throw HfExportError(fmt::format("'{}' exists and is not an empty folder", dir.string()));
  fs::create_directories(dir, ec);
  if (ec) throw HfExportError(fmt::format("cannot create '{}': {}", dir.string(), ec.message()));
  const ModelConfig& config = checkpoint.config();
  {
    std::ofstream out(dir / "config.json");
    out << hf_config_json(config, std::string(torch_dtype_name(dtype)));
    if (!out) throw HfExportError(fmt::format("cannot write '{}'", (dir / "config.json").string()));
  }
  const std::vector<WeightSpec> weights = expected_weights(config);
  std::vector<StTensorDecl> decls;
  for (const WeightSpec& w : weights) decls.push_back({w.name, st, w.shape});
  SafetensorsWriter writer(dir / "model.safetensors", decls, {{"format", "pt"}});
  for (const WeightSpec& w : weights) {
    const std::vector<float> values = checkpoint.tensor(w.name, w.shape).to_floats();
    const Tensor t = Tensor::from_floats(dtype, w.shape, values);
    writer.append(t.bytes);
  }
  writer.finish();
}

}  // namespace amk
