// Checkpoint folders: the fixtures, sharded checkpoints the test writes, and the folder-level
// errors (missing shard, tensor not where the index says, a tensor in two shards, escaping paths).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "amk/checkpoint.h"
#include "support/safetensors_writer.h"

namespace amk {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::safetensors_bytes;
using testing::StTensor;

const fs::path kFixtures = fs::path(AMK_TESTDATA_DIR) / "fixtures";

// The message of the exception `f` throws, or "" (and a failure) if it throws nothing.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception";
  return "";
}

#define EXPECT_CONTAINS(haystack, needle)                                                   \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack) \
                                                                   << "\nwanted: " << (needle)

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("amk_ck_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The tiny-llama fixture's tensors, copied out as writer input.
  static std::vector<StTensor> llama_tensors() {
    const SafetensorsFile f = SafetensorsFile::open(kFixtures / "tiny-llama" / "model.safetensors");
    std::vector<StTensor> out;
    for (const TensorView& t : f.tensors()) {
      const auto* p = reinterpret_cast<const uint8_t*>(t.bytes.data());
      out.push_back({t.name, std::string(name_of(t.dtype)), t.shape, {p, p + t.bytes.size()}});
    }
    return out;
  }

  // tiny-llama re-saved as two shards plus an index; the index can be edited before writing.
  json write_sharded(const std::function<void(json&)>& edit_index = {}) {
    fs::copy_file(kFixtures / "tiny-llama" / "config.json", dir_ / "config.json",
                  fs::copy_options::overwrite_existing);
    std::vector<StTensor> a, b;
    for (StTensor& t : llama_tensors()) (t.name.find("layers.1.") != std::string::npos ? b : a).push_back(t);
    json index = {{"metadata", {{"total_size", 476416}}}, {"weight_map", json::object()}};
    for (const StTensor& t : a) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
    for (const StTensor& t : b) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
    testing::write_bytes(dir_ / "model-00001-of-00002.safetensors", safetensors_bytes(a));
    testing::write_bytes(dir_ / "model-00002-of-00002.safetensors", safetensors_bytes(b));
    if (edit_index) edit_index(index);
    testing::write_text(dir_ / "model.safetensors.index.json", index.dump(2));
    return index;
  }

  fs::path dir_;
};

// Every weight the config implies is present with its shape, nothing else is, and the parameter
// count is the fixture's.
void expect_complete(const Checkpoint& ck) {
  const std::vector<WeightSpec> want = expected_weights(ck.config());
  int64_t numel = 0;
  for (const WeightSpec& w : want) {
    const TensorView& t = ck.tensor(w.name, w.shape);
    EXPECT_EQ(static_cast<int64_t>(t.to_floats().size()), t.numel());
    numel += t.numel();
  }
  std::vector<std::string> names;
  for (const WeightSpec& w : want) names.push_back(w.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(ck.tensor_names(), names);
  EXPECT_EQ(parameter_count(ck.config()), numel);
  EXPECT_EQ(weight_bytes(ck.config(), DType::F32), 4 * numel);
}

// ---- the fixtures ------------------------------------------------------------------------------------

TEST(CheckpointFixtures, TinyLlama) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  EXPECT_EQ(ck.config().family, ModelFamily::Llama);
  EXPECT_FALSE(ck.sharded());
  EXPECT_EQ(ck.files().size(), 1u);
  EXPECT_EQ(ck.num_tensors(), 21u);
  ASSERT_TRUE(ck.generation_config().has_value());
  EXPECT_EQ(ck.generation_config()->bos_token_ids, std::vector<int64_t>{1});
  EXPECT_EQ(ck.eos_token_ids(), std::vector<int64_t>{2});
  expect_complete(ck);
  EXPECT_EQ(parameter_count(ck.config()), 476416 / 4);
}

TEST(CheckpointFixtures, TinyQwen3) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-qwen3");
  EXPECT_EQ(ck.config().family, ModelFamily::Qwen3);
  EXPECT_TRUE(ck.config().tie_word_embeddings);
  EXPECT_EQ(ck.find("lm_head.weight"), nullptr);
  ASSERT_TRUE(ck.generation_config().has_value());
  EXPECT_TRUE(ck.eos_token_ids().empty());  // neither file names one
  expect_complete(ck);
  EXPECT_EQ(parameter_count(ck.config()), 509696 / 4);
}

TEST(CheckpointFixtures, LookupErrorsNameTensorAndShapes) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  const std::string folder = (kFixtures / "tiny-llama").string();
  EXPECT_CONTAINS(error_of([&] { ck.tensor("model.layers.7.mlp.up_proj.weight"); }),
                  folder + ": missing tensor 'model.layers.7.mlp.up_proj.weight'");
  EXPECT_CONTAINS(error_of([&] { ck.tensor("model.norm.weight", std::vector<int64_t>{128}); }),
                  "tensor 'model.norm.weight' has shape [64], expected [128]");
  EXPECT_CONTAINS(error_of([&] { ck.tensor("lm_head.weight", std::vector<int64_t>{64, 256}); }),
                  "tensor 'lm_head.weight' has shape [256, 64], expected [64, 256]");
  EXPECT_CONTAINS(error_of([&] { ck.tensor("model.norm.weight", std::vector<int64_t>{64, 1}); }),
                  "has shape [64], expected [64, 1]");
  EXPECT_THROW(ck.tensor("nope"), CheckpointError);
}

// ---- sharded checkpoints -------------------------------------------------------------------------------

TEST_F(CheckpointTest, ShardedCheckpointLoadsLikeTheSingleFile) {
  write_sharded();
  Checkpoint ck = Checkpoint::open(dir_);
  EXPECT_TRUE(ck.sharded());
  ASSERT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.files()[0].path().filename(), "model-00001-of-00002.safetensors");
  expect_complete(ck);

  const Checkpoint single = Checkpoint::open(kFixtures / "tiny-llama");
  for (const std::string& name : single.tensor_names())
    EXPECT_EQ(ck.tensor(name).to_floats(), single.tensor(name).to_floats()) << name;
  EXPECT_EQ(ck.tensor("model.layers.1.mlp.down_proj.weight").file,
            (dir_ / "model-00002-of-00002.safetensors").string());

  // Views survive moving the checkpoint.
  const TensorView* before = ck.find("model.norm.weight");
  const Checkpoint moved = std::move(ck);
  EXPECT_EQ(moved.find("model.norm.weight"), before);
  EXPECT_EQ(before->to_floats(), single.tensor("model.norm.weight").to_floats());
}

TEST_F(CheckpointTest, MissingShardIsRefused) {
  write_sharded();
  fs::remove(dir_ / "model-00002-of-00002.safetensors");
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir_); }),
                  "shard 'model-00002-of-00002.safetensors' listed in model.safetensors.index.json does "
                  "not exist");
}

TEST_F(CheckpointTest, TensorMissingFromItsShardIsRefused) {
  write_sharded([](json& index) {
    index["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors";
  });
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir_); }),
                  "lists tensor 'model.norm.weight' in shard 'model-00002-of-00002.safetensors', which "
                  "does not contain it");
  write_sharded([](json& index) { index["weight_map"]["model.extra.weight"] = "model-00001-of-00002.safetensors"; });
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir_); }), "lists tensor 'model.extra.weight'");
}

TEST_F(CheckpointTest, TensorInTwoShardsIsRefused) {
  write_sharded();
  // Shard 2 also carries the final norm.
  std::vector<StTensor> b;
  for (StTensor& t : llama_tensors())
    if (t.name.find("layers.1.") != std::string::npos || t.name == "model.norm.weight") b.push_back(t);
  testing::write_bytes(dir_ / "model-00002-of-00002.safetensors", safetensors_bytes(b));
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir_); }),
                  "tensor 'model.norm.weight' is in two shards, " +
                      (dir_ / "model-00001-of-00002.safetensors").string() + " and " +
                      (dir_ / "model-00002-of-00002.safetensors").string());
}

TEST_F(CheckpointTest, ShardPathsMustStayInsideTheFolder) {
  for (const std::string bad : {"../model-00001-of-00002.safetensors", "sub/../../x.safetensors",
                                "/etc/passwd", ""}) {
    SCOPED_TRACE(bad);
    write_sharded([&](json& index) { index["weight_map"]["model.norm.weight"] = bad; });
    const std::string msg = error_of([&] { Checkpoint::open(dir_); });
    EXPECT_CONTAINS(msg, "model.safetensors.index.json: tensor 'model.norm.weight' maps to shard '" + bad + "'");
    EXPECT_TRUE(msg.find("escapes") != std::string::npos || msg.find("absolute") != std::string::npos ||
                msg.find("empty") != std::string::npos)
        << msg;
  }
  // A subfolder is fine.
  write_sharded([&](json& index) {
    for (auto& [name, shard] : index["weight_map"].items())
      if (shard == "model-00002-of-00002.safetensors") shard = "sub/./b.safetensors";
  });
  fs::create_directories(dir_ / "sub");
  fs::rename(dir_ / "model-00002-of-00002.safetensors", dir_ / "sub" / "b.safetensors");
  EXPECT_NO_THROW(Checkpoint::open(dir_));
}

TEST_F(CheckpointTest, MalformedIndex) {
  write_sharded([](json& index) { index["weight_map"] = json::array(); });
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir_); }),
                  "weight_map must be an object (tensor -> shard file), got an array");
  write_sharded([](json& index) { index.erase("weight_map"); });
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir_); }), "must be a JSON object with a \"weight_map\"");
  write_sharded([](json& index) { index["weight_map"]["model.norm.weight"] = 3; });
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir_); }),
                  "weight_map entry for tensor 'model.norm.weight' must be a file name, got an integer");
  write_sharded();
  testing::write_text(dir_ / "model.safetensors.index.json",
                      R"({"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}})");
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir_); }), "duplicate key 'a'");
}

// ---- folder-level errors -------------------------------------------------------------------------------

TEST_F(CheckpointTest, MissingPieces) {
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir_ / "nope"); }), "not a checkpoint folder");
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir_); }), dir_.string() + ": no config.json");
  fs::copy_file(kFixtures / "tiny-llama" / "config.json", dir_ / "config.json");
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir_); }),
                  "no model.safetensors or model.safetensors.index.json");
  testing::write_text(dir_ / "pytorch_model.bin", "");
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir_); }), "only PyTorch .bin weights");
}

TEST_F(CheckpointTest, GenerationConfigIsOptionalAndOverridesEos) {
  fs::copy_file(kFixtures / "tiny-llama" / "config.json", dir_ / "config.json");
  fs::copy_file(kFixtures / "tiny-llama" / "model.safetensors", dir_ / "model.safetensors");
  {
    const Checkpoint ck = Checkpoint::open(dir_);
    EXPECT_FALSE(ck.generation_config().has_value());
    EXPECT_EQ(ck.eos_token_ids(), std::vector<int64_t>{2});  // from config.json
  }
  testing::write_text(dir_ / "generation_config.json", R"({"eos_token_id": [2, 7], "pad_token_id": 0})");
  const Checkpoint ck = Checkpoint::open(dir_);
  EXPECT_EQ(ck.eos_token_ids(), (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(ck.generation_config()->pad_token_id, 0);
  testing::write_text(dir_ / "generation_config.json", R"({"eos_token_id": "two"})");
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir_); }),
                  "generation_config.json: eos_token_id must be a token id");
}

TEST_F(CheckpointTest, UnsupportedConfigIsRefusedOnOpen) {
  json cfg = json::parse(std::ifstream(kFixtures / "tiny-llama" / "config.json"));
  cfg["hidden_act"] = "gelu";
  testing::write_text(dir_ / "config.json", cfg.dump());
  fs::copy_file(kFixtures / "tiny-llama" / "model.safetensors", dir_ / "model.safetensors");
  try {
    Checkpoint::open(dir_);
    ADD_FAILURE();
  } catch (const UnsupportedModelError& e) {
    EXPECT_CONTAINS(e.what(), (dir_ / "config.json").string() + ": unsupported: MLP activation 'gelu'");
  }
}

}  // namespace
}  // namespace amk
