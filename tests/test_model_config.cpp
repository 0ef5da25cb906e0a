// config.json parsing in both formats, the refusals, derived facts and RoPE frequencies.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "amk/model_config.h"
#include "amk/rope.h"

namespace amk {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixtures = fs::path(AMK_TESTDATA_DIR) / "fixtures";

// A small valid Llama config; tests patch fields into it.
json llama_base() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "vocab_size": 1000, "hidden_size": 128, "intermediate_size": 256,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "rope_theta": 10000.0, "rope_scaling": null, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16"
  })");
}

json with(json base, const json& patch) {
  base.merge_patch(patch);  // a null in the patch removes the field
  return base;
}

ModelConfig parse(const json& j) { return parse_model_config(j.dump(), "config.json"); }

// Parsing must throw E with a message containing every needle.
template <class E>
void expect_refused(const json& j, std::initializer_list<std::string> needles) {
  try {
    parse(j);
    ADD_FAILURE() << "accepted: " << j.dump();
  } catch (const E& e) {
    for (const std::string& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "message: " << e.what()
                                                                  << "\nwanted: " << n;
  }
}

// ---- the fixtures: both config formats ------------------------------------------------------------

TEST(ModelConfigFixtures, ClassicFormatLlama) {
  const ModelConfig c = load_model_config(kFixtures / "tiny-llama" / "config.json");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.family, ModelFamily::Llama);
  EXPECT_FALSE(c.new_format);
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 160);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope, (RopeConfig{10000.0, RopeType::Default, 1.0, 1.0, 4.0, 0}));
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_qkv_bias);
  EXPECT_FALSE(c.attention_out_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_FALSE(c.effective_sliding_window().has_value());
  EXPECT_EQ(c.layer_types, (std::vector<std::string>{"full_attention", "full_attention"}));
  EXPECT_EQ(c.bos_token_ids, std::vector<int64_t>{1});
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(c.torch_dtype, "float32");
  EXPECT_NO_THROW(check_max_context(c, 512));
}

TEST(ModelConfigFixtures, NewFormatQwen3) {
  const ModelConfig c = load_model_config(kFixtures / "tiny-qwen3" / "config.json");
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.family, ModelFamily::Qwen3);
  EXPECT_TRUE(c.new_format);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.head_dim, 32);  // not hidden / heads
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_EQ(c.kv_dim(), 64);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope.theta, 1000000.0);
  EXPECT_EQ(c.rope.type, RopeType::Default);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_qkv_bias);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_FALSE(c.use_sliding_window);
  EXPECT_TRUE(c.bos_token_ids.empty());  // null
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_EQ(c.torch_dtype, "float32");  // from "dtype"
}

// ---- rope scaling ------------------------------------------------------------------------------------

TEST(ModelConfigRope, Llama31ScalingInTheClassicFormat) {
  const ModelConfig c = parse(with(llama_base(), json::parse(R"({
    "rope_theta": 500000.0, "max_position_embeddings": 131072,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})")));
  EXPECT_EQ(c.rope, (RopeConfig{500000.0, RopeType::Llama3, 8.0, 1.0, 4.0, 8192}));
  // The pre-4.45 spelling "type" means the same.
  json legacy = with(llama_base(), json::parse(R"({"rope_scaling": {"type": "llama3", "factor": 32,
      "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}})"));
  EXPECT_EQ(parse(legacy).rope.type, RopeType::Llama3);
  EXPECT_EQ(parse(legacy).rope.factor, 32.0);
}

TEST(ModelConfigRope, Llama3ScalingInTheNewFormat) {
  json j = with(llama_base(), json::parse(R"({"rope_theta": null, "rope_scaling": null,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})"));
  const ModelConfig c = parse(j);
  EXPECT_TRUE(c.new_format);
  EXPECT_EQ(c.rope, (RopeConfig{500000.0, RopeType::Llama3, 32.0, 1.0, 4.0, 8192}));
}

TEST(ModelConfigRope, LinearScaling) {
  EXPECT_EQ(parse(with(llama_base(), json::parse(R"({"rope_scaling": {"type": "linear", "factor": 4.0}})"))).rope,
            (RopeConfig{10000.0, RopeType::Linear, 4.0, 1.0, 4.0, 0}));
  EXPECT_EQ(parse(with(llama_base(), json::parse(R"({"rope_parameters": {"rope_type": "linear",
            "rope_theta": 1000.0, "factor": 2}})"))).rope,
            (RopeConfig{1000.0, RopeType::Linear, 2.0, 1.0, 4.0, 0}));
}

TEST(ModelConfigRope, MalformedScalingIsAnError) {
  expect_refused<ModelConfigError>(
      with(llama_base(), json::parse(R"({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}})")),
      {"config.json: rope_scaling.low_freq_factor is required"});
  expect_refused<ModelConfigError>(
      with(llama_base(), json::parse(R"({"rope_scaling": {"rope_type": "llama3", "factor": 8.0,
        "low_freq_factor": 4.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})")),
      {"high_freq_factor (4) must exceed low_freq_factor (4)"});
  expect_refused<ModelConfigError>(
      with(llama_base(), json::parse(R"({"rope_scaling": {"rope_type": "linear", "factor": -2}})")),
      {"rope_scaling.factor is -2, must be positive"});
  expect_refused<ModelConfigError>(with(llama_base(), json::parse(R"({"rope_scaling": "linear"})")),
                                   {"rope_scaling must be an object or null, got a string"});
}

TEST(ModelConfigRope, InverseFrequenciesByHand) {
  // head_dim 8, theta 10^4: theta^(-2i/8) = 10^-i.
  ModelConfig c;
  c.head_dim = 8;
  c.rope.theta = 10000.0;
  const std::vector<double> base = rope_inv_freq(c);
  ASSERT_EQ(base.size(), 4u);
  EXPECT_DOUBLE_EQ(base[0], 1.0);
  EXPECT_DOUBLE_EQ(base[1], 0.1);
  EXPECT_DOUBLE_EQ(base[2], 0.01);
  EXPECT_DOUBLE_EQ(base[3], 0.001);

  c.rope.type = RopeType::Linear;
  c.rope.factor = 4.0;
  const std::vector<double> linear = rope_inv_freq(c);
  for (size_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(linear[i], base[i] / 4.0);

  // llama3, factor 8, low 1, high 4, original context 1024: wavelengths below 1024/4 = 256 keep
  // their frequency, above 1024/1 are divided by 8, and in between are blended.
  //   wavelengths 2*pi/f: 6.283, 62.83, 628.3, 6283.2
  //   i=0,1: below 256 -> 1, 0.1
  //   i=2:   628.3 in [256, 1024] -> smooth = (1024/628.3185 - 1) / (4 - 1) = 0.2099155
  //          0.01 * ((1 - smooth)/8 + smooth) = 0.01 * (0.0987606 + 0.2099155) = 0.0030867610
  //   i=3:   above 1024 -> 0.001 / 8 = 0.000125
  c.rope = RopeConfig{10000.0, RopeType::Llama3, 8.0, 1.0, 4.0, 1024};
  const std::vector<double> l3 = rope_inv_freq(c);
  EXPECT_DOUBLE_EQ(l3[0], 1.0);
  EXPECT_DOUBLE_EQ(l3[1], 0.1);
  EXPECT_NEAR(l3[2], 0.0030867610, 1e-10);
  EXPECT_DOUBLE_EQ(l3[3], 0.000125);
}

TEST(ModelConfigRope, Llama31EndpointsAreUnscaledAndFullyScaled) {
  const ModelConfig c = parse(with(llama_base(), json::parse(R"({"hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 8, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})")));
  const std::vector<double> f = rope_inv_freq(c);
  ASSERT_EQ(f.size(), 64u);
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_DOUBLE_EQ(f[63], std::pow(500000.0, -126.0 / 128.0) / 8.0);
  for (size_t i = 1; i < f.size(); ++i) EXPECT_LT(f[i], f[i - 1]) << "monotone at " << i;
}

// ---- which modules exist ------------------------------------------------------------------------------

TEST(ModelConfigModules, Qwen2HasQkvBiasWhateverTheFieldSays) {
  json q = with(llama_base(), json::parse(R"({"model_type": "qwen2",
      "architectures": ["Qwen2ForCausalLM"], "attention_bias": false})"));
  const ModelConfig c = parse(q);
  EXPECT_EQ(c.family, ModelFamily::Qwen2);
  EXPECT_TRUE(c.attention_qkv_bias);
  EXPECT_FALSE(c.attention_out_bias);
  EXPECT_FALSE(c.qk_norm);
  bool saw_q_bias = false, saw_o_bias = false;
  for (const WeightSpec& w : expected_weights(c)) {
    saw_q_bias |= w.name == "model.layers.0.self_attn.q_proj.bias";
    saw_o_bias |= w.name == "model.layers.0.self_attn.o_proj.bias";
  }
  EXPECT_TRUE(saw_q_bias);
  EXPECT_FALSE(saw_o_bias);
}

TEST(ModelConfigModules, LlamaBiasesFollowTheFields) {
  const ModelConfig c = parse(with(llama_base(), json::parse(R"({"attention_bias": true, "mlp_bias": true})")));
  EXPECT_TRUE(c.attention_qkv_bias);
  EXPECT_TRUE(c.attention_out_bias);
  EXPECT_TRUE(c.mlp_bias);
  // 2 layers x (4 attention + 3 mlp biases) more than the bias-free model.
  EXPECT_EQ(expected_weights(c).size(), expected_weights(parse(llama_base())).size() + 14);
}

TEST(ModelConfigModules, DefaultsFollowTransformers) {
  json j = llama_base();
  j.erase("num_key_value_heads");
  j.erase("tie_word_embeddings");
  j.erase("hidden_act");
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.num_key_value_heads, 4);  // = heads
  EXPECT_EQ(c.head_dim, 32);            // hidden / heads
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.hidden_act, "silu");
  // An explicit null kv head count also means "as many as heads".
  json null_kv = llama_base();
  null_kv["num_key_value_heads"] = nullptr;
  EXPECT_EQ(parse(null_kv).num_key_value_heads, 4);
  json null_kv_qwen = with(llama_base(), json::parse(R"({"model_type": "qwen2"})"));
  null_kv_qwen["num_key_value_heads"] = nullptr;
  EXPECT_EQ(parse(null_kv_qwen).num_key_value_heads, 4);
  json absent_kv_qwen = with(llama_base(), json::parse(R"({"model_type": "qwen2", "num_attention_heads": 32,
    "hidden_size": 1024})"));
  absent_kv_qwen.erase("num_key_value_heads");
  EXPECT_EQ(parse(absent_kv_qwen).num_key_value_heads, 32);  // Qwen2Config's default, not "= heads"
  // Qwen3's head_dim defaults to 128 whatever hidden / heads is.
  json q3 = with(llama_base(), json::parse(R"({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]})"));
  EXPECT_EQ(parse(q3).head_dim, 128);
  EXPECT_TRUE(parse(q3).qk_norm);
}

TEST(ModelConfigModules, TokenIdsMayBeAnIntAListOrNull) {
  EXPECT_EQ(parse(with(llama_base(), json::parse(R"({"eos_token_id": [128001, 128008, 128009]})"))).eos_token_ids,
            (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(parse(with(llama_base(), json::parse(R"({"bos_token_id": 128000})"))).bos_token_ids,
            (std::vector<int64_t>{128000}));
  json nulls = llama_base();
  nulls["eos_token_id"] = nullptr;
  EXPECT_TRUE(parse(nulls).eos_token_ids.empty());
  expect_refused<ModelConfigError>(with(llama_base(), json::parse(R"({"eos_token_id": "x"})")),
                                   {"eos_token_id must be a token id"});
}

// ---- derived facts --------------------------------------------------------------------------------------

TEST(ModelConfigFacts, ParameterCountsOfPublishedModels) {
  // Llama 3.2 1B (tied embeddings): 1,235,814,400 parameters.
  const ModelConfig l32 = parse(with(llama_base(), json::parse(R"({"vocab_size": 128256,
    "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
    "tie_word_embeddings": true})")));
  EXPECT_EQ(parameter_count(l32), 1'235'814'400);
  EXPECT_EQ(weight_bytes(l32, DType::BF16), 2 * 1'235'814'400LL);
  EXPECT_EQ(weight_bytes(l32, DType::F32), 4 * 1'235'814'400LL);
  EXPECT_EQ(weight_bytes(l32, DType::I4), 1'235'814'400LL / 2);  // all tensor sizes are even

  // Llama 3.1 8B (untied): 8,030,261,248.
  const ModelConfig l31 = parse(with(llama_base(), json::parse(R"({"vocab_size": 128256,
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8})")));
  EXPECT_EQ(parameter_count(l31), 8'030'261'248);

  // Qwen2.5 0.5B (tied, q/k/v biases): 494,032,768.
  const ModelConfig q25 = parse(json::parse(R"({"architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
    "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
    "max_position_embeddings": 32768, "tie_word_embeddings": true, "sliding_window": 32768,
    "use_sliding_window": false, "max_window_layers": 21, "rope_theta": 1000000.0})"));
  EXPECT_EQ(parameter_count(q25), 494'032'768);
}

TEST(ModelConfigFacts, TiedHeadIsCountedOnce) {
  const ModelConfig untied = parse(llama_base());
  const ModelConfig tied = parse(with(llama_base(), json::parse(R"({"tie_word_embeddings": true})")));
  EXPECT_EQ(parameter_count(untied) - parameter_count(tied), 1000 * 128);
  EXPECT_EQ(expected_weights(untied).back().name, "lm_head.weight");
  EXPECT_NE(expected_weights(tied).back().name, "lm_head.weight");
}

// ---- refusals, each naming the feature -------------------------------------------------------------------

TEST(ModelConfigRefusals, MixtureOfExperts) {
  expect_refused<UnsupportedModelError>(
      with(llama_base(), json::parse(R"({"model_type": "mixtral", "num_local_experts": 8})")),
      {"config.json: unsupported: mixture-of-experts (model_type 'mixtral')"});
  expect_refused<UnsupportedModelError>(with(llama_base(), json::parse(R"({"model_type": "qwen3_moe"})")),
                                        {"mixture-of-experts (model_type 'qwen3_moe')"});
  expect_refused<UnsupportedModelError>(with(llama_base(), json::parse(R"({"model_type": "qwen2_moe"})")),
                                        {"mixture-of-experts"});
  expect_refused<UnsupportedModelError>(
      with(llama_base(), json::parse(R"({"model_type": "qwen2", "num_experts": 60})")),
      {"mixture-of-experts (num_experts 60)"});
  EXPECT_NO_THROW(parse(with(llama_base(), json::parse(R"({"num_experts": 0})"))));
}

TEST(ModelConfigRefusals, SlidingWindowShorterThanTheContext) {
  // Mistral 7B v0.1: a 4096 window over 32768 positions. Fine for a 4096-token context only.
  const ModelConfig m = parse(with(llama_base(), json::parse(R"({"model_type": "mistral",
    "architectures": ["MistralForCausalLM"], "sliding_window": 4096, "max_position_embeddings": 32768})")));
  EXPECT_EQ(m.effective_sliding_window(), 4096);
  EXPECT_NO_THROW(check_max_context(m, 4096));
  try {
    check_max_context(m, 32768);
    ADD_FAILURE();
  } catch (const UnsupportedModelError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("sliding-window attention (sliding_window 4096 in model_type 'mistral')"),
              std::string::npos) << msg;
    EXPECT_NE(msg.find("requested context of 32768 tokens"), std::string::npos) << msg;
  }
  // Mistral v0.2+: null window. A mistral config without the field gets transformers' 4096.
  json null_window = with(llama_base(), json::parse(R"({"model_type": "mistral"})"));
  null_window["sliding_window"] = nullptr;  // (merge_patch would delete a null)
  const ModelConfig m2 = parse(null_window);
  EXPECT_FALSE(m2.effective_sliding_window().has_value());
  EXPECT_NO_THROW(check_max_context(m2, 32768));
  json absent = with(llama_base(), json::parse(R"({"model_type": "mistral"})"));
  EXPECT_EQ(parse(absent).effective_sliding_window(), 4096);

  // Qwen2 applies the window only when use_sliding_window, and only from max_window_layers on.
  json q = with(llama_base(), json::parse(R"({"model_type": "qwen2", "sliding_window": 1024,
    "max_window_layers": 1})"));
  EXPECT_FALSE(parse(q).effective_sliding_window().has_value());
  q["use_sliding_window"] = true;
  const ModelConfig qs = parse(q);
  EXPECT_EQ(qs.layer_types, (std::vector<std::string>{"full_attention", "sliding_attention"}));
  EXPECT_THROW(check_max_context(qs, 4096), UnsupportedModelError);
  EXPECT_NO_THROW(check_max_context(qs, 1024));
  q["max_window_layers"] = 2;  // no layer at or past 2: full attention everywhere
  EXPECT_NO_THROW(check_max_context(parse(q), 4096));
  EXPECT_THROW(check_max_context(parse(llama_base()), 0), ModelConfigError);
}

TEST(ModelConfigRefusals, NonSiluMlp) {
  expect_refused<UnsupportedModelError>(with(llama_base(), json::parse(R"({"hidden_act": "gelu"})")),
                                        {"MLP activation 'gelu' (hidden_act)"});
}

TEST(ModelConfigRefusals, UnknownRopeTypes) {
  for (const char* type : {"yarn", "dynamic", "longrope", "ntk"}) {
    expect_refused<UnsupportedModelError>(
        with(llama_base(), json{{"rope_scaling", {{"rope_type", type}, {"factor", 4.0}}}}),
        {std::string("rope type '") + type + "' (rope_scaling.rope_type)"});
    expect_refused<UnsupportedModelError>(
        with(llama_base(), json{{"rope_parameters", {{"rope_type", type}, {"factor", 4.0}, {"rope_theta", 1e6}}}}),
        {std::string("rope type '") + type + "' (rope_parameters.rope_type)"});
  }
  // Qwen2.5's long-context recipe.
  expect_refused<UnsupportedModelError>(
      with(llama_base(), json::parse(R"({"model_type": "qwen2", "rope_scaling": {"type": "yarn",
        "factor": 4.0, "original_max_position_embeddings": 32768}})")),
      {"rope type 'yarn'"});
  expect_refused<UnsupportedModelError>(with(llama_base(), json::parse(R"({"partial_rotary_factor": 0.5})")),
                                        {"partial rotary embeddings"});
}

TEST(ModelConfigRefusals, UnknownModelTypeAndOtherShapes) {
  expect_refused<UnsupportedModelError>(with(llama_base(), json::parse(R"({"model_type": "gpt2"})")),
                                        {"model_type 'gpt2'; AMK supports llama, mistral, qwen2 and qwen3"});
  expect_refused<UnsupportedModelError>(
      with(llama_base(), json::parse(R"({"num_attention_heads": 4, "num_key_value_heads": 3})")),
      {"num_attention_heads 4 is not divisible by num_key_value_heads 3"});
  expect_refused<UnsupportedModelError>(
      with(llama_base(), json::parse(R"({"architectures": ["LlamaForSequenceClassification"]})")),
      {"architecture 'LlamaForSequenceClassification'"});
  expect_refused<UnsupportedModelError>(
      with(llama_base(), json::parse(R"({"quantization_config": {"quant_method": "gptq", "bits": 4}})")),
      {"quantized checkpoint (quantization_config, quant_method 'gptq')"});
  expect_refused<UnsupportedModelError>(
      with(llama_base(), json::parse(R"({"model_type": "qwen3", "layer_types": ["full_attention", "linear_attention"]})")),
      {"layer type 'linear_attention'"});
}

TEST(ModelConfigErrors, MalformedConfigs) {
  try {
    parse_model_config("{\"model_type\": ", "/x/config.json");
    ADD_FAILURE();
  } catch (const ModelConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/x/config.json: not valid JSON"), std::string::npos) << e.what();
  }
  expect_refused<ModelConfigError>(json::array(), {"must be a JSON object, got an array"});
  json no_type = llama_base();
  no_type.erase("model_type");
  expect_refused<ModelConfigError>(no_type, {"model_type is required"});
  expect_refused<ModelConfigError>(with(llama_base(), json::parse(R"({"hidden_size": "128"})")),
                                   {"hidden_size must be an integer, got a string"});
  expect_refused<ModelConfigError>(with(llama_base(), json::parse(R"({"hidden_size": 128.0})")),
                                   {"hidden_size must be an integer, got a real number"});
  expect_refused<ModelConfigError>(with(llama_base(), json::parse(R"({"vocab_size": -5})")),
                                   {"vocab_size is -5, must be at least 1"});
  expect_refused<ModelConfigError>(with(llama_base(), json::parse(R"({"num_hidden_layers": 99999999999})")),
                                   {"num_hidden_layers is 99999999999, larger than the limit"});
  expect_refused<ModelConfigError>(with(llama_base(), json::parse(R"({"tie_word_embeddings": 1})")),
                                   {"tie_word_embeddings must be true or false"});
  expect_refused<ModelConfigError>(with(llama_base(), json::parse(R"({"head_dim": 15})")),
                                   {"rotary embeddings need an even head_dim"});
  expect_refused<ModelConfigError>(with(llama_base(), json::parse(R"({"hidden_size": 130})")),
                                   {"hidden_size 130 is not divisible by num_attention_heads 4"});
  expect_refused<ModelConfigError>(with(llama_base(), json::parse(R"({"rms_norm_eps": 0})")),
                                   {"rms_norm_eps is 0, must be positive"});
  expect_refused<ModelConfigError>(json::parse(std::string(100, '[') + std::string(100, ']')),
                                   {"nested deeper than 64 levels"});
  expect_refused<ModelConfigError>(json::parse("{}"), {"model_type is required"});
  EXPECT_THROW(parse_model_config(R"({"model_type": "llama", "model_type": "llama"})"), ModelConfigError);
  EXPECT_THROW(load_model_config(kFixtures / "does-not-exist.json"), ModelConfigError);
}

// A JSON 0 is an unsigned integer to nlohmann: every size must still meet its lower bound (the
// zeros once reached the lowering, and num_key_value_heads 0 a division by zero), and each has a
// sane upper bound, all before anything is sized by them. Each message names the field.
TEST(ModelConfigErrors, EverySizeIsBoundedAndNamed) {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "num_key_value_heads", "head_dim",
                            "max_position_embeddings"}) {
    SCOPED_TRACE(field);
    expect_refused<ModelConfigError>(with(llama_base(), json{{field, 0}}),
                                     {std::string(field) + " is 0, must be at least 1"});
    expect_refused<ModelConfigError>(with(llama_base(), json{{field, uint64_t{1} << 40}}),
                                     {std::string(field) + " is 1099511627776, larger than the limit"});
  }
  expect_refused<ModelConfigError>(with(llama_base(), json{{"num_hidden_layers", 1000000}}),
                                   {"num_hidden_layers is 1000000, larger than the limit 4096"});
  expect_refused<ModelConfigError>(with(llama_base(), json{{"num_key_value_heads", 8}}),
                                   {"num_key_value_heads is 8, more than num_attention_heads 4"});
  expect_refused<ModelConfigError>(with(llama_base(), json{{"rms_norm_eps", 2.0}}),
                                   {"rms_norm_eps is 2.0, must be below 1"});
  expect_refused<ModelConfigError>(
      with(llama_base(), json{{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0},
                                                {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                                                {"original_max_position_embeddings", 0}}}}),
      {"rope_scaling.original_max_position_embeddings is 0, must be at least 1"});
  // Qwen's max_window_layers may be 0 (every layer windowed), and the bounds admit real models.
  EXPECT_NO_THROW(parse(with(llama_base(), json{{"model_type", "qwen2"}, {"max_window_layers", 0}})));
  EXPECT_NO_THROW(parse(with(llama_base(), json{{"vocab_size", 262144}, {"hidden_size", 16384},
                                                {"intermediate_size", 53248},
                                                {"num_hidden_layers", 126},
                                                {"num_attention_heads", 128},
                                                {"num_key_value_heads", 8}})));
}

// The float32 table is transformers' arithmetic; it agrees with the double formula to float32
// rounding (a few ulps through the llama3 blend), and the scaling really moved it.
TEST(RopeInvFreqF32, MatchesTheDoubleFormulaToFloatPrecision) {
  ModelConfig m;
  m.head_dim = 128;
  m.rope.theta = 500000.0;
  for (RopeType type : {RopeType::Default, RopeType::Linear, RopeType::Llama3}) {
    m.rope.type = type;
    m.rope.factor = 8.0;
    m.rope.original_max_position_embeddings = 8192;
    const std::vector<double> d = rope_inv_freq(m);
    const std::vector<float> f = rope_inv_freq_f32(m);
    ASSERT_EQ(f.size(), 64u);
    for (size_t i = 0; i < f.size(); ++i) EXPECT_NEAR(f[i] / d[i], 1.0, 1e-6) << i;
    if (type != RopeType::Default) EXPECT_NEAR(f.back() * 8.0 / std::pow(5e5, -126.0 / 128), 1, 1e-6);
  }
  m.rope.type = RopeType::Default;
  EXPECT_EQ(rope_inv_freq_f32(m), default_rope_inv_freq_f32(500000.0f, 128));
}

}  // namespace
}  // namespace amk
