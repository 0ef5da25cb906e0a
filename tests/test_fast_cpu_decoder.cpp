// The fast CPU decoder against independent expectations: transformers' logits on both fixtures
// (the oracle's tolerance), and the ReferenceDecoder (the lowered program on the reference VM,
// in double) on random checkpoints of every architecture variant the lowering supports, step by
// step and after seek() to late positions, with several thread counts and weight storages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/cpu_decoder.h"
#include "amk/decoder.h"
#include "amk/lowering.h"
#include "amk/oracle.h"
#include "support/safetensors_writer.h"

namespace {

using namespace amk;
namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(AMK_TESTDATA_DIR) / "fixtures";

// max_j |a - b| / max_j |b|: the oracle's measure.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t j = 0; j < b.size(); ++j) {
    diff = std::max(diff, std::fabs(double(a[j]) - double(b[j])));
    scale = std::max(scale, std::fabs(double(b[j])));
  }
  return diff / scale;
}

int64_t argmax(const std::vector<float>& v) {
  return int64_t(std::max_element(v.begin(), v.end()) - v.begin());
}

CpuDecoderOptions with_threads(int threads, CpuWeights weights = CpuWeights::AsStored) {
  CpuDecoderOptions o;
  o.threads = threads;
  o.weights = weights;
  o.show_progress = false;
  return o;
}

// ---- transformers' logits -----------------------------------------------------------------------

void expect_fixture_passes(const std::string& name, int threads) {
  SCOPED_TRACE(name + ", " + std::to_string(threads) + " threads");
  const Checkpoint ck = Checkpoint::open(kFixtures / name);
  const ExpectedOutputs e = load_expected(kFixtures / name / "expected.safetensors");
  FastCpuDecoder dec(ck, int64_t(e.sequence_ids.size()), with_threads(threads));
  EXPECT_EQ(dec.threads(), threads);
  const OracleReport r = run_oracle(dec, e);
  EXPECT_LE(r.worst_error, kOracleTolerance) << "worst at position " << r.worst_position;
  EXPECT_TRUE(r.continuation_ok) << "diverges at continuation index " << r.first_divergence;
  EXPECT_FALSE(r.continuation.empty());
  std::cout << name << " (" << threads << " threads): worst error " << r.worst_error << "\n";
}

TEST(FastCpuDecoder, TinyLlamaMatchesTransformers) {
  for (int threads : {1, 2, 3}) expect_fixture_passes("tiny-llama", threads);
}

TEST(FastCpuDecoder, TinyQwen3MatchesTransformers) {
  for (int threads : {1, 2, 3}) expect_fixture_passes("tiny-qwen3", threads);
}

TEST(FastCpuDecoder, AWrongModelFailsTheOracle) {
  // tiny-qwen3's expected outputs against tiny-llama's weights: the check can fail.
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  const ExpectedOutputs e = load_expected(kFixtures / "tiny-qwen3" / "expected.safetensors");
  FastCpuDecoder dec(ck, int64_t(e.sequence_ids.size()), with_threads(2));
  EXPECT_FALSE(run_oracle(dec, e).logits_ok);
}

// ---- the reference decoder on random checkpoints -------------------------------------------------

struct Rng {
  uint64_t s;
  double next() {  // uniform in [-1, 1)
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return double(s >> 11) / double(1ull << 52) - 1.0;
  }
};

// config.json and model.safetensors of random weights (bf16-exact values in a BF16 file when
// `bf16`), in a fresh folder.
fs::path write_checkpoint(const std::string& name, const std::string& config, bool bf16) {
  const fs::path dir = fs::temp_directory_path() /
                       ("amk_fastcpu_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  amk::testing::write_text(dir / "config.json", config);
  const ModelConfig m = parse_model_config(config);
  Rng rng{4321};
  std::vector<amk::testing::StTensor> tensors;
  for (const WeightSpec& w : expected_weights(m)) {
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    const bool norm = w.name.find("norm") != std::string::npos;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = float(norm ? 1.0 + 0.2 * rng.next() : 0.15 * rng.next());
    if (bf16) {
      std::vector<uint16_t> bits;
      for (float x : v) bits.push_back(uint16_t(std::bit_cast<uint32_t>(x) >> 16));
      tensors.push_back({w.name, "BF16", w.shape, amk::testing::u16_bytes(bits)});
    } else {
      tensors.push_back({w.name, "F32", w.shape, amk::testing::f32_bytes(v)});
    }
  }
  amk::testing::write_bytes(dir / "model.safetensors", amk::testing::safetensors_bytes(tensors));
  return dir;
}

// The two decoders agree on every step from position 0, and from seeded states at late
// positions (several split points of the context).
void expect_matches_reference(const std::string& name, const std::string& config,
                              bool bf16 = false, int64_t steps = 12, int64_t context = 40) {
  SCOPED_TRACE(name);
  const fs::path dir = write_checkpoint(name, config, bf16);
  const Checkpoint ck = Checkpoint::open(dir);
  const Program program = lower(ck.config(), {}, *find_target("h100"), context);
  ReferenceDecoder ref(ck, program);
  const int64_t V = ck.config().vocab_size;
  double worst = 0;
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    FastCpuDecoder fast(ck, context, with_threads(threads));
    EXPECT_EQ(fast.vocab_size(), V);
    EXPECT_EQ(fast.max_context(), context);
    Rng rng{77};
    const auto token = [&] { return int64_t((rng.next() + 1) / 2 * double(V)) % V; };
    ref.reset();
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t tok = token();
      const std::vector<float> want = ref.step(tok), got = fast.step(tok);
      worst = std::max(worst, relative_error(got, want));
      ASSERT_EQ(fast.last_next_token(), ref.last_next_token()) << "step " << t;
      ASSERT_EQ(fast.position(), ref.position());
    }
    for (int64_t position : {int64_t{5}, context / 2, context - 3}) {
      SCOPED_TRACE("seek to " + std::to_string(position));
      ref.seek(position, 1000 + uint64_t(position));
      fast.seek(position, 1000 + uint64_t(position));
      for (int64_t t = 0; t < 3; ++t) {
        const int64_t tok = token();
        const std::vector<float> want = ref.step(tok), got = fast.step(tok);
        worst = std::max(worst, relative_error(got, want));
        ASSERT_EQ(fast.last_next_token(), ref.last_next_token());
      }
    }
    // reset() forgets the seeded state: position 0 gives the first step's logits again.
    fast.reset();
    ref.reset();
    const int64_t tok = token();
    worst = std::max(worst, relative_error(fast.step(tok), ref.step(tok)));
  }
  // The reference sums in double, this decoder in f32: a few ulps of the logits apart.
  EXPECT_LE(worst, 1e-5);
  std::cout << name << ": worst relative logit error against the reference " << worst << "\n";
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

// Hidden and FFN sizes that are not multiples of the GEMV's 32 lanes nor of the 16-row blocks
// the threads split, so the kernels' tails and uneven splits are exercised.
constexpr const char* kMistralOdd =
    R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
  "vocab_size": 75, "hidden_size": 72, "intermediate_size": 100, "num_hidden_layers": 2,
  "num_attention_heads": 6, "num_key_value_heads": 3, "head_dim": 12, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "max_position_embeddings": 128, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "float32", "hidden_act": "silu"})";

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

TEST(FastCpuDecoder, Qwen2BiasesWithMqaMatchTheReference) {
  expect_matches_reference("qwen2-mqa", kQwen2Mqa);
}
TEST(FastCpuDecoder, LlamaGqa3BiasesTiedMatchTheReference) {
  expect_matches_reference("llama-gqa3", kLlamaGqa3Biased);
}
TEST(FastCpuDecoder, Qwen3HeadNormsWithMqaMatchTheReference) {
  expect_matches_reference("qwen3-mqa", kQwen3Mqa);
}
TEST(FastCpuDecoder, MistralWithOddSizesMatchesTheReference) {
  expect_matches_reference("mistral-odd", kMistralOdd);
}
// Late positions are where scaled RoPE tables differ from the default one.
TEST(FastCpuDecoder, Llama3RopeScalingMatchesTheReference) {
  expect_matches_reference("llama3-scaled", kLlama3Scaled, false, 8, 300);
}
TEST(FastCpuDecoder, LinearRopeScalingMatchesTheReference) {
  expect_matches_reference("linear-scaled", kLinearScaled, false, 8, 300);
}
// bf16 weights stay bf16 in both decoders (exact values): the same products.
TEST(FastCpuDecoder, Bf16CheckpointMatchesTheReference) {
  std::string config = kMistralOdd;
  config.replace(config.find("float32"), 7, "bfloat16");
  expect_matches_reference("mistral-bf16", config, /*bf16=*/true);
}

TEST(FastCpuDecoder, WeightStorageFollowsTheOption) {
  std::string config = kMistralOdd;
  config.replace(config.find("float32"), 7, "bfloat16");
  const fs::path dir = write_checkpoint("storage", config, /*bf16=*/true);
  const Checkpoint ck = Checkpoint::open(dir);
  const ModelConfig& c = ck.config();
  const int64_t per_layer = (c.q_dim() + 2 * c.kv_dim()) * c.hidden_size +
                            c.hidden_size * c.q_dim() + 3 * c.intermediate_size * c.hidden_size;
  const int64_t elements = c.num_hidden_layers * per_layer + c.vocab_size * c.hidden_size;
  FastCpuDecoder as_stored(ck, 8, with_threads(1));
  FastCpuDecoder widened(ck, 8, with_threads(1, CpuWeights::F32));
  EXPECT_EQ(as_stored.weight_bytes_per_token(), 2 * elements);
  EXPECT_EQ(widened.weight_bytes_per_token(), 4 * elements);
  // Widening bf16 is exact: the same products, summed by differently vectorised kernels.
  EXPECT_LE(relative_error(as_stored.step(3), widened.step(3)), 1e-6);
  fs::remove_all(dir);
}

// ---- interface --------------------------------------------------------------------------------

TEST(FastCpuDecoder, RefusesOutOfRangeTokensPositionsAndSeeks) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  FastCpuDecoder dec(ck, 2, with_threads(2));
  EXPECT_THROW(dec.last_next_token(), DecodeError);  // nothing decoded yet
  EXPECT_THROW(dec.step(-1), DecodeError);
  EXPECT_THROW(dec.step(ck.config().vocab_size), DecodeError);
  EXPECT_THROW(dec.seek(2, 1), DecodeError);
  EXPECT_THROW(dec.seek(-1, 1), DecodeError);
  dec.step(1);
  dec.step(2);
  EXPECT_EQ(dec.position(), 2);
  EXPECT_THROW(dec.step(3), DecodeError);  // the context is full
  EXPECT_THROW(FastCpuDecoder(ck, 0, with_threads(1)), DecodeError);
}

TEST(FastCpuDecoder, FactoryBuildsBothKinds) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-qwen3");
  const std::unique_ptr<Decoder> fast = make_cpu_decoder(ck, 16, CpuDecoderKind::Fast, with_threads(2));
  const std::unique_ptr<Decoder> ref = make_cpu_decoder(ck, 16, CpuDecoderKind::Reference);
  EXPECT_NE(dynamic_cast<FastCpuDecoder*>(fast.get()), nullptr);
  EXPECT_NE(dynamic_cast<ReferenceDecoder*>(ref.get()), nullptr);
  const int64_t prompt[] = {1, 5, 9};
  EXPECT_EQ(fast->generate(prompt, 6), ref->generate(prompt, 6));
}

}  // namespace

namespace {

// ---- the real SmolLM2-135M-Instruct (Q4_1 dequantised to f32) ----------------------------------

// At a late seeded position, where a wrong cache layout or RoPE angle would show, the two
// decoders agree on a real model. (Its greedy continuation from position 0 is checked through
// `amk run --device cpu` in test_gguf.cpp.)
TEST(FastCpuDecoderSmolLM2, AgreesWithTheReferenceAfterASeek) {
  const char* assets = std::getenv("AMK_ASSETS_DIR");
  if (assets == nullptr)
    GTEST_SKIP() << "AMK_ASSETS_DIR is not set (scripts/test.sh sets it from "
                    "scripts/fetch_assets.sh, which fetches SmolLM2-135M-Instruct.Q4_1.gguf)";
  const Checkpoint ck =
      Checkpoint::open(fs::path(assets) / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf");
  const int64_t context = 300;
  std::unique_ptr<Decoder> ref = make_cpu_decoder(ck, context, CpuDecoderKind::Reference);
  std::unique_ptr<Decoder> fast = make_cpu_decoder(ck, context, CpuDecoderKind::Fast,
                                                   with_threads(2));
  ref->seek(context - 2, 7);
  fast->seek(context - 2, 7);
  for (int64_t token : {4649, 314}) {  // " France", " is"
    const std::vector<float> want = ref->step(token), got = fast->step(token);
    // f32 sums over 30 layers of a real model: ~2e-5 measured, within the oracle's tolerance
    // (transformers itself computes in f32).
    EXPECT_LE(relative_error(got, want), kOracleTolerance);
    EXPECT_EQ(fast->last_next_token(), ref->last_next_token());
    EXPECT_EQ(argmax(got), fast->last_next_token());
  }
}

}  // namespace
