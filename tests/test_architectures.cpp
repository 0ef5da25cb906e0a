// The lowering against an independent eager decoder, on random checkpoints of the architecture
// variants the fixtures do not cover: Qwen2 q/k/v biases, MQA, GQA ratio 3, Llama attention and
// MLP biases with tied embeddings, Qwen3 MQA with head norms, Mistral, Llama 3 "llama3" and
// "linear" RoPE scaling. The eager model below is written from the Hugging Face modeling code, in
// double, sharing nothing with the lowering.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/decoder.h"
#include "amk/lowering.h"
#include "amk/oracle.h"
#include "support/safetensors_writer.h"

namespace {

using namespace amk;
using Vec = std::vector<double>;
namespace fs = std::filesystem;

struct Rng {
  uint64_t s;
  double next() {  // uniform in [-1, 1)
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return double(s >> 11) / double(1ull << 52) - 1.0;
  }
};

// Writes config.json and model.safetensors of random F32 weights; returns the weights.
// With `bf16`, the values are truncated to bf16 first so that the file holds them exactly.
std::map<std::string, std::vector<float>> write_checkpoint(const fs::path& dir,
                                                           const std::string& config, uint64_t seed,
                                                           bool bf16 = false) {
  fs::create_directories(dir);
  amk::testing::write_text(dir / "config.json", config);
  const ModelConfig m = parse_model_config(config);
  Rng rng{seed};
  std::map<std::string, std::vector<float>> weights;
  std::vector<amk::testing::StTensor> tensors;
  for (const WeightSpec& w : expected_weights(m)) {
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    const bool norm = w.name.find("norm") != std::string::npos;
    std::vector<float> v(size_t(n), 0.0f);
    for (float& x : v) x = float(norm ? 1.0 + 0.2 * rng.next() : 0.15 * rng.next());
    if (bf16) {
      std::vector<uint16_t> bits;
      for (float& x : v) {
        x = std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0xffff0000u);
        bits.push_back(amk::testing::bf16_exact(x));
      }
      tensors.push_back({w.name, "BF16", w.shape, amk::testing::u16_bytes(bits)});
    } else {
      tensors.push_back({w.name, "F32", w.shape, amk::testing::f32_bytes(v)});
    }
    weights[w.name] = std::move(v);
  }
  amk::testing::write_bytes(dir / "model.safetensors", amk::testing::safetensors_bytes(tensors));
  return weights;
}

// kv_bf16: the cached K and V are rounded to BF16, as a lowering of BF16 weights stores them
// (amk/lowering.h kv_cache_dtype); the rest stays in double.
class EagerModel {
 public:
  EagerModel(const ModelConfig& m, std::map<std::string, std::vector<float>> w,
             bool kv_bf16 = false)
      : m_(m), w_(std::move(w)), k_(size_t(m.num_hidden_layers)), v_(size_t(m.num_hidden_layers)),
        inv_freq_(inv_freq(m)), kv_bf16_(kv_bf16) {}

  Vec step(int64_t token) {
    const int64_t H = m_.hidden_size, HD = m_.head_dim, NH = m_.num_attention_heads;
    const int64_t NKV = m_.num_key_value_heads;
    const auto& emb = w_.at("model.embed_tokens.weight");
    Vec x(emb.begin() + token * H, emb.begin() + (token + 1) * H);
    for (int64_t l = 0; l < m_.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      const Vec xn = rmsnorm(x, p + "input_layernorm.weight");
      Vec q = linear(xn, p + "self_attn.q_proj", m_.attention_qkv_bias);
      Vec k = linear(xn, p + "self_attn.k_proj", m_.attention_qkv_bias);
      const Vec v = linear(xn, p + "self_attn.v_proj", m_.attention_qkv_bias);
      for (int64_t h = 0; h < NH; ++h) head(q, h, p + "self_attn.q_norm.weight");
      for (int64_t h = 0; h < NKV; ++h) head(k, h, p + "self_attn.k_norm.weight");
      k_[size_t(l)].push_back(cached(k));
      v_[size_t(l)].push_back(cached(v));
      Vec attn(size_t(NH * HD), 0.0);
      const auto T = int64_t(k_[size_t(l)].size());
      for (int64_t h = 0; h < NH; ++h) {
        const int64_t g = h / (NH / NKV);
        Vec s(static_cast<size_t>(T), 0.0);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < T; ++j) {
          double d = 0;
          for (int64_t i = 0; i < HD; ++i)
            d += q[size_t(h * HD + i)] * k_[size_t(l)][size_t(j)][size_t(g * HD + i)];
          s[size_t(j)] = d / std::sqrt(double(HD));
          mx = std::max(mx, s[size_t(j)]);
        }
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j < T; ++j)
          for (int64_t i = 0; i < HD; ++i)
            attn[size_t(h * HD + i)] +=
                s[size_t(j)] / sum * v_[size_t(l)][size_t(j)][size_t(g * HD + i)];
      }
      const Vec o = linear(attn, p + "self_attn.o_proj", m_.attention_out_bias);
      for (int64_t i = 0; i < H; ++i) x[size_t(i)] += o[size_t(i)];
      const Vec hn = rmsnorm(x, p + "post_attention_layernorm.weight");
      const Vec gate = linear(hn, p + "mlp.gate_proj", m_.mlp_bias);
      Vec up = linear(hn, p + "mlp.up_proj", m_.mlp_bias);
      for (size_t i = 0; i < up.size(); ++i) up[i] *= gate[i] / (1 + std::exp(-gate[i]));
      const Vec down = linear(up, p + "mlp.down_proj", m_.mlp_bias);
      for (int64_t i = 0; i < H; ++i) x[size_t(i)] += down[size_t(i)];
    }
    ++pos_;
    return matvec(rmsnorm(x, "model.norm.weight"),
                  w_.at(m_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"));
  }

 private:
  Vec rmsnorm(const Vec& x, const std::string& w) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / double(x.size()) + m_.rms_norm_eps);
    Vec out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * r * w_.at(w)[i];
    return out;
  }
  static Vec matvec(const Vec& x, const std::vector<float>& W) {
    const size_t K = x.size(), N = W.size() / K;
    Vec out(N, 0.0);
    for (size_t n = 0; n < N; ++n)
      for (size_t k = 0; k < K; ++k) out[n] += W[n * K + k] * x[k];
    return out;
  }
  Vec linear(const Vec& x, const std::string& name, bool bias) const {
    Vec out = matvec(x, w_.at(name + ".weight"));
    if (bias)
      for (size_t i = 0; i < out.size(); ++i) out[i] += w_.at(name + ".bias")[i];
    return out;
  }
  // Optional per-head RMSNorm (Qwen3), then rotate-half RoPE at this position.
  void head(Vec& x, int64_t h, const std::string& norm) const {
    const int64_t HD = m_.head_dim, half = HD / 2;
    double* v = &x[size_t(h * HD)];
    if (m_.qk_norm) {
      const Vec n = rmsnorm(Vec(v, v + HD), norm);
      std::copy(n.begin(), n.end(), v);
    }
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(pos_) * inv_freq_[size_t(i)];
      const double x0 = v[i], x1 = v[i + half];
      v[i] = x0 * std::cos(a) - x1 * std::sin(a);
      v[i + half] = x1 * std::cos(a) + x0 * std::sin(a);
    }
  }

  // transformers' modeling_rope_utils.py: default, linear and llama3 inverse frequencies.
  static Vec inv_freq(const ModelConfig& m) {
    const RopeConfig& r = m.rope;
    Vec f;
    for (int64_t i = 0; i < m.head_dim; i += 2)
      f.push_back(1.0 / std::pow(r.theta, double(i) / double(m.head_dim)));
    if (r.type == RopeType::Linear)
      for (double& x : f) x /= r.factor;
    if (r.type == RopeType::Llama3) {
      const double ctx = double(r.original_max_position_embeddings);
      for (double& x : f) {
        const double wavelen = 2 * M_PI / x;
        if (wavelen > ctx / r.low_freq_factor) {
          x /= r.factor;
        } else if (wavelen >= ctx / r.high_freq_factor) {
          const double smooth =
              (ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
          x = (1 - smooth) * x / r.factor + smooth * x;
        }
      }
    }
    return f;
  }

  ModelConfig m_;
  std::map<std::string, std::vector<float>> w_;
  std::vector<std::vector<Vec>> k_, v_;
  Vec inv_freq_;
  bool kv_bf16_ = false;
  int64_t pos_ = 0;

  Vec cached(Vec x) const {
    if (kv_bf16_)
      for (double& e : x) e = double(amk::round_to_dtype(DType::BF16, float(e)));
    return x;
  }
};

double relative_error(const std::vector<float>& ours, const Vec& ref) {
  double diff = 0, scale = 0;
  for (size_t j = 0; j < ref.size(); ++j) {
    diff = std::max(diff, std::fabs(ours[j] - ref[j]));
    scale = std::max(scale, std::fabs(ref[j]));
  }
  return diff / scale;
}

// With `unscaled_must_differ`, an eager model that ignores the config's RoPE scaling must miss
// the tolerance: the test then proves the scaling, not just a model that never reaches it.
void expect_matches_eager(const std::string& name, const std::string& config,
                          const ScheduleConfig& schedule = {}, bool bf16 = false,
                          int64_t steps = 20, bool unscaled_must_differ = false) {
  SCOPED_TRACE(name);
  const fs::path dir =
      fs::temp_directory_path() / ("amk_arch_" + std::to_string(getpid()) + "_" + name);
  auto weights = write_checkpoint(dir, config, 1234, bf16);
  const Checkpoint ck = Checkpoint::open(dir);
  ModelConfig unscaled_config = ck.config();
  unscaled_config.rope.type = RopeType::Default;
  EagerModel unscaled(unscaled_config, weights, bf16);
  // BF16 weights lower to BF16 KV caches: an eager model with an F32 cache must then miss.
  EagerModel f32_cache(ck.config(), weights);
  EagerModel eager(ck.config(), std::move(weights), bf16);
  const int64_t kSteps = steps;
  const Program program = lower(ck.config(), schedule, *find_target("h100"), kSteps);
  for (const Buffer& b : program.buffers)
    if (b.kind == BufferKind::WEIGHT) EXPECT_EQ(b.dtype, bf16 ? DType::BF16 : DType::F32) << b.name;
  ReferenceDecoder dec(ck, program);
  Rng rng{99};
  double worst = 0, worst_unscaled = 0, worst_f32_cache = 0;
  for (int64_t t = 0; t < kSteps; ++t) {
    const auto token =
        int64_t((rng.next() + 1) / 2 * double(ck.config().vocab_size)) % ck.config().vocab_size;
    const std::vector<float> ours = dec.step(token);
    worst = std::max(worst, relative_error(ours, eager.step(token)));
    if (unscaled_must_differ)
      worst_unscaled = std::max(worst_unscaled, relative_error(ours, unscaled.step(token)));
    if (bf16) worst_f32_cache = std::max(worst_f32_cache, relative_error(ours, f32_cache.step(token)));
  }
  EXPECT_LE(worst, kOracleTolerance);
  if (bf16) EXPECT_GT(worst_f32_cache, 10 * kOracleTolerance);
  if (unscaled_must_differ) EXPECT_GT(worst_unscaled, 10 * kOracleTolerance);
  std::cout << name << ": worst relative logit error " << worst << "\n";
  fs::remove_all(dir);
}

constexpr const char* kQwen2Mqa = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
  "vocab_size": 96, "hidden_size": 64, "intermediate_size": 80, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 1, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
  "max_position_embeddings": 128, "tie_word_embeddings": false, "torch_dtype": "float32",
  "hidden_act": "silu", "use_sliding_window": false})";

constexpr const char* kLlamaGqa3Biased =
    R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "vocab_size": 80, "hidden_size": 96, "intermediate_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 6, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
  "max_position_embeddings": 128, "tie_word_embeddings": true, "attention_bias": true,
  "mlp_bias": true, "torch_dtype": "float32", "hidden_act": "silu"})";

constexpr const char* kQwen3Mqa = R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
  "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3,
  "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 8, "rms_norm_eps": 1e-6,
  "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
  "max_position_embeddings": 128, "tie_word_embeddings": true, "dtype": "float32",
  "hidden_act": "silu"})";

constexpr const char* kMistral =
    R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
  "vocab_size": 72, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
  "num_attention_heads": 8, "num_key_value_heads": 4, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
  "max_position_embeddings": 128, "sliding_window": null, "tie_word_embeddings": false,
  "torch_dtype": "float32", "hidden_act": "silu"})";

// Llama 3.2's scaling (factor 32 over an 8192-token original context, theta 500000) at head_dim
// 32, so that the table has kept, blended and slowed frequencies; 200 positions, far enough for
// the slowed ones to move the logits well past the tolerance.
constexpr const char* kLlama3Scaled =
    R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "vocab_size": 64, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "rms_norm_eps": 1e-5,
  "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 32.0,
  "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
  "max_position_embeddings": 131072, "tie_word_embeddings": true, "torch_dtype": "float32",
  "hidden_act": "silu"})";

constexpr const char* kLinearScaled =
    R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "vocab_size": 64, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 1, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "rope_scaling": {"type": "linear", "factor": 4.0},
  "max_position_embeddings": 8192, "tie_word_embeddings": false, "torch_dtype": "float32",
  "hidden_act": "silu"})";

TEST(OracleArchitectures, Llama3RopeScaling) {
  expect_matches_eager("llama3-scaled", kLlama3Scaled, {}, false, 200, true);
}
TEST(OracleArchitectures, LinearRopeScaling) {
  expect_matches_eager("linear-scaled", kLinearScaled, {}, false, 60, true);
}

TEST(OracleArchitectures, Qwen2BiasesWithMqa) { expect_matches_eager("qwen2-mqa", kQwen2Mqa); }
TEST(OracleArchitectures, LlamaGqaRatio3WithBiasesAndTiedEmbeddings) {
  expect_matches_eager("llama-gqa3", kLlamaGqa3Biased);
}
TEST(OracleArchitectures, Qwen3MqaWithHeadNorms) { expect_matches_eager("qwen3-mqa", kQwen3Mqa); }
TEST(OracleArchitectures, Mistral) { expect_matches_eager("mistral", kMistral); }
TEST(OracleArchitectures, SplitKvAndOddTilesOnQwen2) {
  ScheduleConfig c;
  c.tiling = {{"gemv", {{"N_tile", 24}}}, {"attention", {{"kv_block", 6}}}};
  c.sm_assignment = std::string("round_robin");
  expect_matches_eager("qwen2-split", kQwen2Mqa, c);
}

// A bf16 checkpoint keeps bf16 WEIGHT buffers (the bytes the GPU would stream); the reference
// computes in double from those exact values.
TEST(OracleArchitectures, Bf16WeightsStayBf16) {
  std::string config = kMistral;
  config.replace(config.find("float32"), 7, "bfloat16");
  expect_matches_eager("mistral-bf16", config, {}, /*bf16=*/true);
}

}  // namespace
