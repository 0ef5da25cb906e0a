// A checkpoint written as an HF folder (amk/hf_export.h) reads back as the same model: the
// config.json parses to the same ModelConfig for every preset and fixture, and the weights are
// the checkpoint's values (bit for bit in f32, rounded once in bf16), the SmolLM2 GGUF included.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "amk/checkpoint.h"
#include "amk/hf_export.h"
#include "amk/model_presets.h"
#include "amk/tensor.h"

namespace {

using namespace amk;
namespace fs = std::filesystem;

void expect_same_model(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope, b.rope);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.attention_qkv_bias, b.attention_qkv_bias);
  EXPECT_EQ(a.attention_out_bias, b.attention_out_bias);
  EXPECT_EQ(a.mlp_bias, b.mlp_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.effective_sliding_window(), b.effective_sliding_window());
  EXPECT_EQ(a.bos_token_ids, b.bos_token_ids);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
}

struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("amk_hf_export_" + std::to_string(getpid()));
  ScratchDir() { fs::remove_all(path); }
  ~ScratchDir() { fs::remove_all(path); }
};

TEST(HfExport, EveryPresetsConfigReadsBackTheSame) {
  for (std::string_view name : model_preset_names()) {
    SCOPED_TRACE(std::string(name));
    const ModelConfig c = parse_model_config(model_preset_config(name, "bfloat16"));
    expect_same_model(parse_model_config(hf_config_json(c)), c);
  }
}

void expect_round_trip(const Checkpoint& ck, DType dtype) {
  const ScratchDir dir;
  write_hf_folder(ck, dir.path, dtype);
  const Checkpoint back = Checkpoint::open(dir.path);
  expect_same_model(back.config(), ck.config());
  for (const WeightSpec& w : expected_weights(ck.config())) {
    const std::vector<float> want = ck.tensor(w.name, w.shape).to_floats();
    const std::vector<float> got = back.tensor(w.name, w.shape).to_floats();
    ASSERT_EQ(got.size(), want.size()) << w.name;
    for (size_t i = 0; i < want.size(); ++i) {
      const float expected = dtype == DType::BF16 ? bf16_bits_to_float(float_to_bf16_bits(want[i])) : want[i];
      ASSERT_EQ(got[i], expected) << w.name << " element " << i;
    }
  }
}

TEST(HfExport, FixturesRoundTripBitForBit) {
  for (const char* name : {"tiny-llama", "tiny-qwen3"}) {
    SCOPED_TRACE(name);
    const Checkpoint ck = Checkpoint::open(fs::path(AMK_TESTDATA_DIR) / "fixtures" / name);
    expect_round_trip(ck, DType::F32);
    expect_round_trip(ck, DType::BF16);
  }
}

TEST(HfExport, TheSmolLM2GgufBecomesAFolderOfItsDequantisedWeights) {
  const char* assets = std::getenv("AMK_ASSETS_DIR");
  if (assets == nullptr) GTEST_SKIP() << "AMK_ASSETS_DIR is not set (scripts/fetch_assets.sh)";
  const fs::path gguf = fs::path(assets) / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(gguf)) GTEST_SKIP() << gguf << " is missing (scripts/fetch_assets.sh)";
  const Checkpoint ck = Checkpoint::open(gguf);
  expect_round_trip(ck, DType::BF16);
}

TEST(HfExport, RefusesAFolderThatHoldsSomethingAndUnwritableConfigs) {
  const ScratchDir dir;
  fs::create_directories(dir.path);
  std::ofstream(dir.path / "keep.txt") << "mine\n";
  const Checkpoint ck = Checkpoint::open(fs::path(AMK_TESTDATA_DIR) / "fixtures" / "tiny-llama");
  try {
    write_hf_folder(ck, dir.path);
    ADD_FAILURE() << "wrote into a folder that holds a file";
  } catch (const HfExportError& e) {
    EXPECT_NE(std::string(e.what()).find("is not an empty folder"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(dir.path / "keep.txt"));
  ModelConfig odd = ck.config();
  odd.attention_qkv_bias = true;
  odd.attention_out_bias = false;
  EXPECT_THROW(hf_config_json(odd), HfExportError);
  EXPECT_THROW(write_hf_folder(ck, dir.path / "sub", DType::I32), HfExportError);
}

}  // namespace
