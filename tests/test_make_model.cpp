// `amk make-model`: the presets carry the published shapes, the weights are streamed into files
// the checkpoint reader accepts (sharded past the shard size), and the README's main command
// (make-model tiny -> compile -> run) generates tokens.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "amk/checkpoint.h"
#include "amk/model_presets.h"
#include "amk/random_checkpoint.h"
#include "support/amk_command.h"

namespace {

using namespace amk;
namespace fs = std::filesystem;
using amk::testing::run_amk;
using amk::testing::shell_quote;

fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("amk_make_model_" + std::to_string(getpid()) + "_" + name);
}

ModelConfig preset_config(std::string_view name) {
  return parse_model_config(model_preset_config(name, "bfloat16"), name);
}

struct Shape {
  const char* name;
  int64_t hidden, layers, heads, kv_heads, head_dim, ffn, vocab;
  bool tied;
  RopeType rope;
  double theta, factor, eps;
};

// The published config.json figures of each model.
constexpr Shape kShapes[] = {
    {"llama-3.2-1b", 2048, 16, 32, 8, 64, 8192, 128256, true, RopeType::Llama3, 5e5, 32, 1e-5},
    {"llama-3.1-8b", 4096, 32, 32, 8, 128, 14336, 128256, false, RopeType::Llama3, 5e5, 8, 1e-5},
    {"qwen3-0.6b", 1024, 28, 16, 8, 128, 3072, 151936, true, RopeType::Default, 1e6, 1, 1e-6},
    {"qwen3-1.7b", 2048, 28, 16, 8, 128, 6144, 151936, true, RopeType::Default, 1e6, 1, 1e-6},
    {"qwen3-8b", 4096, 36, 32, 8, 128, 12288, 151936, false, RopeType::Default, 1e6, 1, 1e-6},
    {"qwen2.5-0.5b", 896, 24, 14, 2, 64, 4864, 151936, true, RopeType::Default, 1e6, 1, 1e-6},
    {"smollm2-135m", 576, 30, 9, 3, 64, 1536, 49152, true, RopeType::Default, 1e5, 1, 1e-5},
    {"tiny", 64, 2, 4, 2, 16, 128, 256, true, RopeType::Llama3, 5e5, 32, 1e-5},
};

TEST(MakeModel, PresetsHaveThePublishedShapes) {
  ASSERT_EQ(model_preset_names().size(), std::size(kShapes));
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.name);
    const ModelConfig m = preset_config(s.name);
    EXPECT_EQ(m.hidden_size, s.hidden);
    EXPECT_EQ(m.num_hidden_layers, s.layers);
    EXPECT_EQ(m.num_attention_heads, s.heads);
    EXPECT_EQ(m.num_key_value_heads, s.kv_heads);
    EXPECT_EQ(m.head_dim, s.head_dim);
    EXPECT_EQ(m.intermediate_size, s.ffn);
    EXPECT_EQ(m.vocab_size, s.vocab);
    EXPECT_EQ(m.tie_word_embeddings, s.tied);
    EXPECT_EQ(m.rope.type, s.rope);
    EXPECT_EQ(m.rope.theta, s.theta);
    EXPECT_EQ(m.rope.factor, s.factor);
    EXPECT_EQ(m.rms_norm_eps, s.eps);
    EXPECT_EQ(m.torch_dtype, "bfloat16");
    if (s.rope == RopeType::Llama3) EXPECT_EQ(m.rope.original_max_position_embeddings, 8192);
    EXPECT_EQ(m.qk_norm, m.family == ModelFamily::Qwen3);
  }
  EXPECT_THROW(model_preset_config("llama-4", "bfloat16"), std::invalid_argument);
}

// Qwen2.5's config carries a sliding_window that is switched off and no attention_bias field:
// the biases come from the architecture.
TEST(MakeModel, Qwen25ConfigRoundTrips) {
  const std::string text = model_preset_config("qwen2.5-0.5b", "float16");
  const ModelConfig m = parse_model_config(text);
  EXPECT_EQ(m.family, ModelFamily::Qwen2);
  EXPECT_TRUE(m.attention_qkv_bias);
  EXPECT_FALSE(m.attention_out_bias);
  EXPECT_EQ(m.torch_dtype, "float16");
  EXPECT_FALSE(m.effective_sliding_window().has_value());
  EXPECT_EQ(parse_model_config(nlohmann::json::parse(text).dump()).hidden_size, 896);
  EXPECT_EQ(m.eos_token_ids, std::vector<int64_t>{151643});
}

// SmolLM2-135M(-Instruct): a plain Llama (no RoPE scaling), 9 heads over 3 KV heads, tied
// embeddings, and its own special ids and context.
TEST(MakeModel, SmolLM2ConfigRoundTrips) {
  const ModelConfig m = preset_config("smollm2-135m");
  EXPECT_EQ(m.family, ModelFamily::Llama);
  EXPECT_EQ(m.hidden_size, 576);
  EXPECT_EQ(m.num_hidden_layers, 30);
  EXPECT_EQ(m.num_attention_heads, 9);
  EXPECT_EQ(m.num_key_value_heads, 3);
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_EQ(m.intermediate_size, 1536);
  EXPECT_EQ(m.vocab_size, 49152);
  EXPECT_TRUE(m.tie_word_embeddings);
  EXPECT_EQ(m.rms_norm_eps, 1e-5);
  EXPECT_EQ(m.rope.type, RopeType::Default);
  EXPECT_EQ(m.rope.theta, 1e5);
  EXPECT_EQ(m.max_position_embeddings, 8192);
  EXPECT_EQ(m.bos_token_ids, std::vector<int64_t>{1});
  EXPECT_EQ(m.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(m.torch_dtype, "bfloat16");
  EXPECT_FALSE(m.attention_qkv_bias);
  EXPECT_FALSE(m.qk_norm);
  const auto gen = nlohmann::json::parse(model_preset_generation_config("smollm2-135m"));
  EXPECT_EQ(gen["bos_token_id"], 1);
  EXPECT_EQ(gen["eos_token_id"], 2);
}

// The big presets are planned, not written: the shards cover expected_weights exactly, in order,
// each under the shard size, and the index maps every tensor.
TEST(MakeModel, ShardPlansCoverEveryWeight) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.name);
    const ModelConfig m = preset_config(s.name);
    const auto shards = plan_shards(m, DType::BF16);
    std::vector<std::string> names;
    int64_t total = 0;
    for (const CheckpointShard& sh : shards) {
      EXPECT_LE(sh.bytes, kMaxShardBytes);
      total += sh.bytes;
      for (const WeightSpec& w : sh.tensors) names.push_back(w.name);
    }
    std::vector<std::string> want;
    for (const WeightSpec& w : expected_weights(m)) want.push_back(w.name);
    EXPECT_EQ(names, want);
    EXPECT_EQ(total, weight_bytes(m, DType::BF16));
    EXPECT_EQ(shards.size() > 1, weight_bytes(m, DType::BF16) > kMaxShardBytes);
    if (shards.size() > 1) {
      const auto index = nlohmann::json::parse(shard_index_json(shards));
      EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
      EXPECT_EQ(index["weight_map"].size(), want.size());
      EXPECT_EQ(shards.back().file,
                "model-0000" + std::to_string(shards.size()) + "-of-0000" +
                    std::to_string(shards.size()) + ".safetensors");
    }
  }
  EXPECT_GE(plan_shards(preset_config("llama-3.1-8b"), DType::BF16).size(), 4u);  // 16 GB
}

TEST(MakeModel, WritesACheckpointTheReaderAccepts) {
  const fs::path dir = scratch("tiny");
  write_random_checkpoint(dir, "tiny", DType::BF16, 7);
  const Checkpoint ck = Checkpoint::open(dir);
  EXPECT_EQ(ck.config().hidden_size, 64);
  EXPECT_TRUE(fs::exists(dir / "generation_config.json"));
  // N(0, 0.02) for projections, 1 + N(0, 0.02) for norms.
  const std::vector<float> q = ck.tensor("model.layers.0.self_attn.q_proj.weight", {64, 64}).to_floats();
  double sum = 0, sq = 0;
  for (float v : q) sum += v, sq += double(v) * v;
  EXPECT_NEAR(sum / double(q.size()), 0.0, 0.003);
  EXPECT_NEAR(std::sqrt(sq / double(q.size())), 0.02, 0.002);
  const std::vector<float> norm = ck.tensor("model.norm.weight", {64}).to_floats();
  for (float v : norm) EXPECT_NEAR(v, 1.0, 0.15);

  // Same seed, same bytes; another seed, other bytes.
  const fs::path again = scratch("tiny-again"), other = scratch("tiny-other");
  write_random_checkpoint(again, "tiny", DType::BF16, 7);
  write_random_checkpoint(other, "tiny", DType::BF16, 8);
  const auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  EXPECT_EQ(bytes(dir / "model.safetensors"), bytes(again / "model.safetensors"));
  EXPECT_NE(bytes(dir / "model.safetensors"), bytes(other / "model.safetensors"));
  for (const fs::path& p : {dir, again, other}) fs::remove_all(p);
}

TEST(MakeModel, ShardsPastTheShardSize) {
  const fs::path dir = scratch("sharded");
  write_random_checkpoint(dir, "tiny", DType::F32, 3, /*max_shard_bytes=*/100'000);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  const Checkpoint ck = Checkpoint::open(dir);
  for (const WeightSpec& w : expected_weights(ck.config()))
    EXPECT_NO_THROW(ck.tensor(w.name, w.shape)) << w.name;
  fs::remove_all(dir);
}

// The README's main command.
TEST(MakeModel, TinyCompilesAndGeneratesOnTheCpu) {
  const fs::path dir = scratch("cli");
  const std::string model = shell_quote((dir / "tiny-model").string());
  const auto made = run_amk("make-model --preset tiny -o " + model);
  ASSERT_EQ(made.exit_code, 0) << made.out << made.err;
  const auto compiled = run_amk("compile " + model + " --gpu h100 -o " +
                                shell_quote((dir / "tiny.json").string()));
  ASSERT_EQ(compiled.exit_code, 0) << compiled.out << compiled.err;
  // The derived default fuses RoPE into the attention tasks, which carry the llama3 table.
  EXPECT_NE(compiled.out.find("ROPE_KV_ATTENTION_TILE"), std::string::npos) << compiled.out;
  std::ofstream(dir / "empty.json") << "{}\n";  // the IR's defaults: nothing fused
  const auto plain = run_amk("compile " + model + " --gpu h100 --config " +
                             shell_quote((dir / "empty.json").string()) + " -o " +
                             shell_quote((dir / "tiny-plain.json").string()));
  EXPECT_NE(plain.out.find("ROPE_FREQ"), std::string::npos) << plain.out << plain.err;
  const auto ran = run_amk("run " + model + " --device cpu --prompt-ids 1,2,3 -n 16");
  ASSERT_EQ(ran.exit_code, 0) << ran.out << ran.err;
  EXPECT_EQ(std::count(ran.out.begin(), ran.out.end(), ','), 15) << ran.out;

  EXPECT_EQ(run_amk("make-model --preset nope -o " + model).exit_code, 2);
  EXPECT_EQ(run_amk("make-model --preset tiny --dtype f8 -o " + model).exit_code, 2);
  fs::remove_all(dir);
}

// make-model never writes over an existing checkpoint (or any non-empty folder, or a file)
// without --force; no --seed means a random one, printed so that the run can be repeated.
TEST(MakeModel, RefusesANonEmptyFolderWithoutForce) {
  const fs::path dir = scratch("force");
  fs::remove_all(dir);
  const std::string model = shell_quote((dir / "m").string());
  const auto first = run_amk("make-model --preset tiny -o " + model);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const size_t at = first.out.find("random: --seed ");
  ASSERT_NE(at, std::string::npos) << first.out;
  const std::string seed = first.out.substr(at + 15, first.out.find(' ', at + 15) - at - 15);
  const auto config_before = fs::last_write_time(dir / "m" / "config.json");

  const auto again = run_amk("make-model --preset tiny -o " + model);
  EXPECT_EQ(again.exit_code, 2) << again.out << again.err;
  EXPECT_NE(again.err.find("is not empty"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("--force"), std::string::npos) << again.err;
  EXPECT_EQ(fs::last_write_time(dir / "m" / "config.json"), config_before);

  const std::vector<uint8_t> bytes = [&] {
    std::ifstream in(dir / "m" / "model.safetensors", std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
  }();
  const auto forced = run_amk("make-model --preset tiny --force --seed " + seed + " -o " + model);
  EXPECT_EQ(forced.exit_code, 0) << forced.err;
  std::ifstream in(dir / "m" / "model.safetensors", std::ios::binary);
  EXPECT_EQ(std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}), bytes)
      << "the printed seed repeats the weights";

  std::ofstream(dir / "file") << "x";
  const auto onto_file =
      run_amk("make-model --preset tiny --force -o " + shell_quote((dir / "file").string()));
  EXPECT_EQ(onto_file.exit_code, 2) << onto_file.err;
  EXPECT_EQ(run_amk("make-model --preset tiny --seed -1 -o " + shell_quote((dir / "n").string()))
                .exit_code,
            2);
  fs::remove_all(dir);
}

}  // namespace
