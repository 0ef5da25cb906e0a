// config.json -> ModelConfig, the refusals, and the facts derived from a config.
#include "amk/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/strict_json.h"

namespace amk {
namespace {

using model_detail::json_type_word;
using model_detail::quote_name;
using nlohmann::json;

// Sizes travel to the device as int32 (amk_params_t), so a larger one is a corrupt config.
constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();
// Sane bounds per field, far above every published model (the largest have ~130 layers, 128
// heads of at most 256, hidden 16k-25k, FFN 53k-74k, vocabularies of 256k), so that a corrupt or
// hostile config.json is refused by name before anything sized by it is allocated. A checkpoint
// then pins the shapes to its tensors (Checkpoint::open).
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxHidden = int64_t{1} << 18;
constexpr int64_t kMaxIntermediate = int64_t{1} << 20;
constexpr int64_t kMaxVocab = int64_t{1} << 24;

// The defaults of transformers' config classes, so that a config omitting a field means what it
// means to transformers (e.g. Qwen3's head_dim is 128 however large hidden_size is).
struct FamilyDefaults {
  ModelFamily family;
  std::string_view model_type;
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
  std::optional<int64_t> num_key_value_heads;  // nullopt: num_attention_heads
  std::optional<int64_t> head_dim;             // nullopt: hidden_size / num_attention_heads
  int64_t max_position_embeddings;
  std::optional<int64_t> bos, eos;
  std::optional<int64_t> sliding_window;
};
const FamilyDefaults kFamilies[] = {
    {ModelFamily::Llama, "llama", 32000, 4096, 11008, 32, 32, std::nullopt, std::nullopt, 2048, 1, 2,
     std::nullopt},
    {ModelFamily::Mistral, "mistral", 32000, 4096, 14336, 32, 32, 8, std::nullopt, 4096 * 32, 1, 2,
     4096},
    {ModelFamily::Qwen2, "qwen2", 151936, 4096, 22016, 32, 32, 32, std::nullopt, 32768,
     std::nullopt, std::nullopt, 4096},
    {ModelFamily::Qwen3, "qwen3", 151936, 4096, 22016, 32, 32, 32, 128, 32768, std::nullopt,
     std::nullopt, 4096},
};
constexpr int64_t kQwenMaxWindowLayers = 28;

// Typed access to one JSON object, with messages that name the source and the field path.
class Fields {
 public:
  Fields(const json& obj, std::string_view source, std::string prefix)
      : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

  const json* get(std::string_view key) const {
    const auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  // Absent and null both mean "not given" in Hugging Face configs.
  const json* given(std::string_view key) const {
    const json* j = get(key);
    return j && !j->is_null() ? j : nullptr;
  }

  [[noreturn]] void bad(std::string_view key, std::string_view what) const {
    throw ModelConfigError(fmt::format("{}: {}{} {}", source_, prefix_, key, what));
  }

  std::optional<int64_t> opt_int(std::string_view key, int64_t lo = 1, int64_t hi = kMaxDim) const {
    const json* j = given(key);
    if (!j) return std::nullopt;
    if (!j->is_number_integer())
      bad(key, fmt::format("must be an integer, got {} ({})", json_type_word(*j), j->dump()));
    if (j->is_number_unsigned() ? j->get<uint64_t>() > uint64_t(hi) : j->get<int64_t>() > hi)
      bad(key, fmt::format("is {}, larger than the limit {}", j->dump(), hi));
    // nlohmann stores every non-negative literal as unsigned: 0 must meet the lower bound too.
    const int64_t v =
        j->is_number_unsigned() ? static_cast<int64_t>(j->get<uint64_t>()) : j->get<int64_t>();
    if (v < lo) bad(key, fmt::format("is {}, must be at least {}", j->dump(), lo));
    return v;
  }
  int64_t int_or(std::string_view key, int64_t fallback, int64_t lo = 1, int64_t hi = kMaxDim) const {
    return opt_int(key, lo, hi).value_or(fallback);
  }
  int64_t req_int(std::string_view key, int64_t lo = 1, int64_t hi = kMaxDim) const {
    if (auto v = opt_int(key, lo, hi)) return *v;
    bad(key, "is required");
  }

  // A positive finite number, below `hi` when one is given.
  std::optional<double> opt_real(std::string_view key,
                                 double hi = std::numeric_limits<double>::infinity()) const {
    const json* j = given(key);
    if (!j) return std::nullopt;
    if (!j->is_number()) bad(key, fmt::format("must be a number, got {}", json_type_word(*j)));
    const double v = j->get<double>();
    if (!std::isfinite(v) || v <= 0) bad(key, fmt::format("is {}, must be positive", j->dump()));
    if (!(v < hi)) bad(key, fmt::format("is {}, must be below {:g}", j->dump(), hi));
    return v;
  }
  double real_or(std::string_view key, double fallback,
                 double hi = std::numeric_limits<double>::infinity()) const {
    return opt_real(key, hi).value_or(fallback);
  }
  double req_real(std::string_view key) const {
    if (auto v = opt_real(key)) return *v;
    bad(key, "is required");
  }

  bool bool_or(std::string_view key, bool fallback) const {
    const json* j = given(key);
    if (!j) return fallback;
    if (!j->is_boolean()) bad(key, fmt::format("must be true or false, got {}", json_type_word(*j)));
    return j->get<bool>();
  }

  std::optional<std::string> opt_string(std::string_view key) const {
    const json* j = given(key);
    if (!j) return std::nullopt;
    if (!j->is_string()) bad(key, fmt::format("must be a string, got {}", json_type_word(*j)));
    return j->get<std::string>();
  }

  // A token id field: an integer, a list of integers, or null.
  std::vector<int64_t> token_ids(std::string_view key, std::optional<int64_t> fallback) const {
    const json* j = get(key);
    if (!j) return fallback ? std::vector<int64_t>{*fallback} : std::vector<int64_t>{};
    if (j->is_null()) return {};
    std::vector<int64_t> out;
    const auto one = [&](const json& v) {
      if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0) ||
          (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(kMaxDim)))
        bad(key, fmt::format("must be a token id, a list of token ids or null, got {}", j->dump()));
      out.push_back(v.get<int64_t>());
    };
    if (j->is_array()) {
      for (const json& v : *j) one(v);
    } else {
      one(*j);
    }
    return out;
  }

  const std::string& prefix() const { return prefix_; }

 private:
  const json& obj_;
  std::string_view source_;
  std::string prefix_;
};

[[noreturn]] void refuse(std::string_view source, std::string_view what) {
  throw UnsupportedModelError(fmt::format("{}: unsupported: {}", source, what));
}

bool is_moe_model_type(std::string_view t) {
  return t == "mixtral" || t.find("moe") != std::string_view::npos;
}

// Reads a rope dictionary (rope_scaling or rope_parameters): its type and that type's fields.
void parse_rope_dict(const json& dict, std::string_view source, const std::string& where,
                     RopeConfig& rope) {
  if (!dict.is_object())
    throw ModelConfigError(fmt::format("{}: {} must be an object or null, got {}", source, where,
                                       json_type_word(dict)));
  const Fields f(dict, source, where + ".");
  // transformers' BC: "rope_type" was once "type".
  std::string type = "default";
  if (auto t = f.opt_string("rope_type")) {
    type = *t;
  } else if (auto legacy = f.opt_string("type")) {
    type = *legacy;
  }
  if (auto p = f.opt_real("partial_rotary_factor"); p && *p != 1.0)
    refuse(source, fmt::format("partial rotary embeddings ({}partial_rotary_factor {})", f.prefix(), *p));

  if (type == "default") {
    rope.type = RopeType::Default;
  } else if (type == "linear") {
    rope.type = RopeType::Linear;
    rope.factor = f.req_real("factor");
  } else if (type == "llama3") {
    rope.type = RopeType::Llama3;
    rope.factor = f.req_real("factor");
    rope.low_freq_factor = f.req_real("low_freq_factor");
    rope.high_freq_factor = f.req_real("high_freq_factor");
    rope.original_max_position_embeddings = f.req_int("original_max_position_embeddings");
    if (rope.high_freq_factor <= rope.low_freq_factor)
      f.bad("high_freq_factor", fmt::format("({}) must exceed low_freq_factor ({})",
                                            rope.high_freq_factor, rope.low_freq_factor));
  } else {
    refuse(source, fmt::format("rope type {} ({}rope_type); AMK implements default, linear and llama3",
                               quote_name(type), f.prefix()));
  }
}

}  // namespace

std::string_view name_of(ModelFamily f) {
  for (const FamilyDefaults& d : kFamilies)
    if (d.family == f) return d.model_type;
  return "<invalid>";
}

std::optional<int64_t> ModelConfig::effective_sliding_window() const {
  if (!sliding_window) return std::nullopt;
  for (const std::string& t : layer_types)
    if (t == "sliding_attention") return sliding_window;
  return std::nullopt;
}

ModelConfig parse_model_config(std::string_view json_text, std::string_view source) {
  json doc;
  try {
    doc = model_detail::parse_untrusted_json(json_text);
  } catch (const std::runtime_error& e) {
    throw ModelConfigError(fmt::format("{}: {}", source, e.what()));
  }
  if (!doc.is_object())
    throw ModelConfigError(
        fmt::format("{}: must be a JSON object, got {}", source, json_type_word(doc)));
  const Fields f(doc, source, "");
  ModelConfig c;

  // ---- what model is this? ----
  const auto model_type = f.opt_string("model_type");
  if (!model_type) f.bad("model_type", "is required (a string such as \"llama\")");
  c.model_type = *model_type;
  if (const json* arch = f.given("architectures")) {
    if (!arch->is_array() || (!arch->empty() && !(*arch)[0].is_string()))
      f.bad("architectures", fmt::format("must be a list of strings, got {}", arch->dump()));
    if (!arch->empty()) c.architecture = (*arch)[0].get<std::string>();
  }
  if (is_moe_model_type(c.model_type))
    refuse(source, fmt::format("mixture-of-experts (model_type {})", quote_name(c.model_type)));
  for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"})
    if (f.given(key) && f.int_or(key, 0, 0) > 0)
      refuse(source, fmt::format("mixture-of-experts ({} {})", key, f.int_or(key, 0, 0)));
  const FamilyDefaults* fam = nullptr;
  for (const FamilyDefaults& d : kFamilies)
    if (d.model_type == c.model_type) fam = &d;
  if (!fam)
    refuse(source, fmt::format("model_type {}; AMK supports llama, mistral, qwen2 and qwen3",
                               quote_name(c.model_type)));
  c.family = fam->family;
  if (!c.architecture.empty() && !c.architecture.ends_with("ForCausalLM"))
    refuse(source, fmt::format("architecture {}; AMK compiles causal language models (*ForCausalLM)",
                               quote_name(c.architecture)));
  if (const json* q = f.given("quantization_config")) {
    std::string method = "?";
    if (q->is_object() && q->contains("quant_method") && (*q)["quant_method"].is_string())
      method = (*q)["quant_method"].get<std::string>();
    refuse(source, fmt::format("quantized checkpoint (quantization_config, quant_method {})",
                               quote_name(method)));
  }

  // ---- shapes ----
  // Every size is at least 1 and below its sane bound (kMax*), checked field by field before
  // anything is sized by it.
  c.vocab_size = f.int_or("vocab_size", fam->vocab_size, 1, kMaxVocab);
  c.hidden_size = f.int_or("hidden_size", fam->hidden_size, 1, kMaxHidden);
  c.intermediate_size = f.int_or("intermediate_size", fam->intermediate_size, 1, kMaxIntermediate);
  c.num_hidden_layers = f.int_or("num_hidden_layers", fam->num_hidden_layers, 1, kMaxLayers);
  c.num_attention_heads = f.int_or("num_attention_heads", fam->num_attention_heads, 1, kMaxHeads);
  if (f.get("num_key_value_heads") && !f.given("num_key_value_heads")) {
    c.num_key_value_heads = c.num_attention_heads;  // an explicit null means "no GQA"
  } else {
    c.num_key_value_heads = f.int_or("num_key_value_heads",
                                     fam->num_key_value_heads.value_or(c.num_attention_heads), 1,
                                     kMaxHeads);
  }
  if (c.num_key_value_heads > c.num_attention_heads)
    f.bad("num_key_value_heads", fmt::format("is {}, more than num_attention_heads {}",
                                             c.num_key_value_heads, c.num_attention_heads));
  if (auto hd = f.opt_int("head_dim", 1, kMaxHeadDim)) {
    c.head_dim = *hd;
  } else if (fam->head_dim) {
    c.head_dim = *fam->head_dim;
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      f.bad("hidden_size", fmt::format("{} is not divisible by num_attention_heads {} and no "
                                       "head_dim is given",
                                       c.hidden_size, c.num_attention_heads));
    c.head_dim = c.hidden_size / c.num_attention_heads;
    if (c.head_dim > kMaxHeadDim)
      f.bad("hidden_size", fmt::format("{} / num_attention_heads {} gives head_dim {}, larger than "
                                       "the limit {}",
                                       c.hidden_size, c.num_attention_heads, c.head_dim,
                                       kMaxHeadDim));
  }
  if (c.head_dim % 2 != 0)
    f.bad("head_dim", fmt::format("is {}; rotary embeddings need an even head_dim", c.head_dim));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    refuse(source, fmt::format("num_attention_heads {} is not divisible by num_key_value_heads {}",
                               c.num_attention_heads, c.num_key_value_heads));
  c.rms_norm_eps = f.real_or("rms_norm_eps", 1e-6, /*hi=*/1.0);
  c.max_position_embeddings = f.int_or("max_position_embeddings", fam->max_position_embeddings);

  // ---- the MLP ----
  c.hidden_act = f.opt_string("hidden_act").value_or("silu");
  if (c.hidden_act != "silu")
    refuse(source, fmt::format("MLP activation {} (hidden_act); AMK implements SiLU-gated MLPs only",
                               quote_name(c.hidden_act)));

  // ---- which modules exist (mirrors each family's modeling code) ----
  c.tie_word_embeddings = f.bool_or("tie_word_embeddings", false);
  const bool attention_bias = f.bool_or("attention_bias", false);
  switch (c.family) {
    case ModelFamily::Llama:
      c.attention_qkv_bias = c.attention_out_bias = attention_bias;
      c.mlp_bias = f.bool_or("mlp_bias", false);
      break;
    case ModelFamily::Mistral:
      break;  // Mistral's projections never have biases
    case ModelFamily::Qwen2:
      c.attention_qkv_bias = true;  // hard-wired in Qwen2Attention, whatever the config says
      break;
    case ModelFamily::Qwen3:
      c.attention_qkv_bias = c.attention_out_bias = attention_bias;
      c.qk_norm = true;
      break;
  }

  // ---- rope: the newer rope_parameters, else the classic rope_theta + rope_scaling ----
  c.rope.theta = f.real_or("rope_theta", 10000.0);
  if (auto p = f.opt_real("partial_rotary_factor"); p && *p != 1.0)
    refuse(source, fmt::format("partial rotary embeddings (partial_rotary_factor {})", *p));
  if (const json* params = f.given("rope_parameters")) {
    c.new_format = true;
    if (params->is_object() && !params->contains("rope_type") && !params->contains("rope_theta") &&
        !params->contains("type") && !params->empty() && params->begin()->is_object())
      refuse(source, "per-layer-type rope_parameters (different rope per attention type)");
    parse_rope_dict(*params, source, "rope_parameters", c.rope);
    c.rope.theta = Fields(*params, source, "rope_parameters.").real_or("rope_theta", c.rope.theta);
  } else if (const json* scaling = f.given("rope_scaling")) {
    parse_rope_dict(*scaling, source, "rope_scaling", c.rope);
  }

  // ---- attention windows ----
  c.use_sliding_window = f.bool_or("use_sliding_window", false);
  std::optional<int64_t> window;
  if (f.get("sliding_window")) {
    window = f.opt_int("sliding_window");  // null: no window
  } else {
    window = fam->sliding_window;
  }
  const auto n_layers = static_cast<size_t>(c.num_hidden_layers);
  switch (c.family) {
    case ModelFamily::Llama:
      c.layer_types.assign(n_layers, "full_attention");
      break;
    case ModelFamily::Mistral:
      // MistralModel applies sliding_window to every layer and ignores layer_types.
      c.sliding_window = window;
      c.use_sliding_window = window.has_value();
      c.layer_types.assign(n_layers, window ? "sliding_attention" : "full_attention");
      break;
    case ModelFamily::Qwen2:
    case ModelFamily::Qwen3: {
      c.sliding_window = c.use_sliding_window ? window : std::nullopt;
      if (const json* lt = f.given("layer_types")) {
        if (!lt->is_array() || lt->size() != n_layers)
          f.bad("layer_types", fmt::format("must be a list of {} strings", n_layers));
        for (const json& t : *lt) {
          if (!t.is_string()) f.bad("layer_types", "must hold strings");
          const auto& s = t.get_ref<const std::string&>();
          if (s != "full_attention" && s != "sliding_attention")
            refuse(source, fmt::format("layer type {} (layer_types)", quote_name(s)));
          c.layer_types.push_back(s);
        }
      } else {
        const int64_t max_window_layers = f.int_or("max_window_layers", kQwenMaxWindowLayers, 0);
        for (size_t i = 0; i < n_layers; ++i)
          c.layer_types.emplace_back(c.sliding_window && int64_t(i) >= max_window_layers
                                         ? "sliding_attention"
                                         : "full_attention");
      }
      break;
    }
  }

  // ---- tokens and storage ----
  c.bos_token_ids = f.token_ids("bos_token_id", fam->bos);
  c.eos_token_ids = f.token_ids("eos_token_id", fam->eos);
  if (auto d = f.opt_string("dtype")) {
    c.torch_dtype = *d;
  } else if (auto td = f.opt_string("torch_dtype")) {
    c.torch_dtype = *td;
  }
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& config_json) {
  std::string text;
  try {
    text = model_detail::read_text_file(config_json);
  } catch (const std::runtime_error& e) {
    throw ModelConfigError(fmt::format("{}: {}", config_json.string(), e.what()));
  }
  return parse_model_config(text, config_json.string());
}

void check_max_context(const ModelConfig& config, int64_t max_context) {
  if (max_context < 1)
    throw ModelConfigError(fmt::format("max context must be positive, got {}", max_context));
  const auto window = config.effective_sliding_window();
  if (window && max_context > *window)
    throw UnsupportedModelError(fmt::format(
        "unsupported: sliding-window attention (sliding_window {} in model_type {}) shorter than the "
        "requested context of {} tokens; AMK implements full attention, which equals the sliding "
        "window only for contexts of at most {} tokens",
        *window, quote_name(config.model_type), max_context, *window));
}

// ---- derived facts --------------------------------------------------------------------------------

std::vector<WeightSpec> expected_weights(const ModelConfig& c) {
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), ffn = c.intermediate_size;
  std::vector<WeightSpec> w;
  w.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    w.push_back({p + "input_layernorm.weight", {h}});
    w.push_back({p + "self_attn.q_proj.weight", {q, h}});
    w.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    w.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    w.push_back({p + "self_attn.o_proj.weight", {h, q}});
    if (c.attention_qkv_bias) {
      w.push_back({p + "self_attn.q_proj.bias", {q}});
      w.push_back({p + "self_attn.k_proj.bias", {kv}});
      w.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    if (c.attention_out_bias) w.push_back({p + "self_attn.o_proj.bias", {h}});
    if (c.qk_norm) {
      w.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      w.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
    w.push_back({p + "post_attention_layernorm.weight", {h}});
    w.push_back({p + "mlp.gate_proj.weight", {ffn, h}});
    w.push_back({p + "mlp.up_proj.weight", {ffn, h}});
    w.push_back({p + "mlp.down_proj.weight", {h, ffn}});
    if (c.mlp_bias) {
      w.push_back({p + "mlp.gate_proj.bias", {ffn}});
      w.push_back({p + "mlp.up_proj.bias", {ffn}});
      w.push_back({p + "mlp.down_proj.bias", {h}});
    }
  }
  w.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) w.push_back({"lm_head.weight", {c.vocab_size, h}});
  return w;
}

namespace {
int64_t checked_numel(const WeightSpec& w) {
  int64_t n = 1;
  for (const int64_t d : w.shape)
    if (__builtin_mul_overflow(n, d, &n))
      throw ModelConfigError(fmt::format("{}: element count overflows", w.name));
  return n;
}
}  // namespace

int64_t parameter_count(const ModelConfig& config) {
  int64_t total = 0;
  for (const WeightSpec& w : expected_weights(config))
    if (__builtin_add_overflow(total, checked_numel(w), &total))
      throw ModelConfigError("parameter count overflows");
  return total;
}

int64_t weight_bytes(const ModelConfig& config, DType dtype) {
  int64_t total = 0;
  for (const WeightSpec& w : expected_weights(config)) {
    const int64_t n = checked_numel(w);
    if (n > std::numeric_limits<int64_t>::max() / 8 ||
        __builtin_add_overflow(total, dtype_nbytes(dtype, n), &total))
      throw ModelConfigError("weight byte count overflows");
  }
  return total;
}

}  // namespace amk
