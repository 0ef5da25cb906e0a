// Broken checkpoints through the commands: `amk compile` and `amk run` each refuse every one with
// exit 2 (invalid input) and a message naming the problem (the file, the tensor or the feature) —
// never a crash, never a wrong answer. Each folder is the tiny-llama fixture with one thing broken.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/amk_command.h"
#include "support/safetensors_writer.h"

namespace {

namespace fs = std::filesystem;
using amk::testing::run_amk;
using amk::testing::shell_quote;
using json = nlohmann::ordered_json;

const fs::path kFixture = fs::path(AMK_TESTDATA_DIR) / "fixtures" / "tiny-llama";

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string read_text(const fs::path& p) {
  const auto b = read_bytes(p);
  return {b.begin(), b.end()};
}

// The fixture's model.safetensors split into its header (JSON) and data section.
struct Parsed {
  json header;
  std::vector<uint8_t> data;
};
Parsed parse_fixture_weights() {
  const std::vector<uint8_t> file = read_bytes(kFixture / "model.safetensors");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(file.at(size_t(i))) << (8 * i);
  Parsed p;
  p.header = json::parse(file.begin() + 8, file.begin() + 8 + std::ptrdiff_t(n));
  p.data.assign(file.begin() + 8 + std::ptrdiff_t(n), file.end());
  return p;
}

// Rebuilds model.safetensors from the fixture's tensors, with `edit` applied to the list first.
std::vector<uint8_t> rebuilt(const std::function<void(std::vector<amk::testing::StTensor>&)>& edit) {
  const Parsed p = parse_fixture_weights();
  std::vector<amk::testing::StTensor> tensors;
  for (const auto& [name, v] : p.header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t b = v["data_offsets"][0], e = v["data_offsets"][1];
    tensors.push_back({name, v["dtype"], v["shape"].get<std::vector<int64_t>>(),
                       std::vector<uint8_t>(p.data.begin() + std::ptrdiff_t(b),
                                            p.data.begin() + std::ptrdiff_t(e))});
  }
  edit(tensors);
  return amk::testing::safetensors_bytes(tensors, {{"format", "pt"}});
}

class BadCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("amk_bad_ckpt_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
      fs::copy_file(kFixture / f, dir_ / f);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Both commands exit 2 and name every one of `needles` on stderr.
  void expect_refused(const std::vector<std::string>& needles) {
    const std::string out = (dir_ / "prog.json").string();
    const auto compile =
        run_amk("compile " + shell_quote(dir_.string()) + " --gpu h100 -o " + shell_quote(out));
    const auto run =
        run_amk("run " + shell_quote(dir_.string()) + " --device cpu --prompt-ids 1 -n 1");
    for (const auto* r : {&compile, &run}) {
      const char* which = r == &compile ? "compile" : "run";
      EXPECT_EQ(r->exit_code, 2) << which << "\nstdout: " << r->out << "\nstderr: " << r->err;
      EXPECT_TRUE(r->out.empty()) << which << " printed: " << r->out;
      for (const std::string& n : needles)
        EXPECT_NE(r->err.find(n), std::string::npos)
            << which << ": stderr does not name '" << n << "':\n" << r->err;
    }
    EXPECT_FALSE(fs::exists(out)) << "compile wrote a program for a broken checkpoint";
  }

  void edit_config(const std::function<void(json&)>& edit) {
    json c = json::parse(read_text(dir_ / "config.json"));
    edit(c);
    amk::testing::write_text(dir_ / "config.json", c.dump(2));
  }

  fs::path dir_;
};

TEST_F(BadCheckpoint, IntactCopyWorks) {
  // The control: the copied folder itself is fine, so every refusal below is the breakage's.
  const std::string out = (dir_ / "prog.json").string();
  EXPECT_EQ(run_amk("compile " + shell_quote(dir_.string()) + " --gpu h100 -o " + shell_quote(out))
                .exit_code,
            0);
  const auto r = run_amk("run " + shell_quote(dir_.string()) + " --device cpu --prompt-ids 1 -n 1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(BadCheckpoint, TruncatedSafetensors) {
  std::vector<uint8_t> b = read_bytes(dir_ / "model.safetensors");
  b.resize(b.size() / 2);
  amk::testing::write_bytes(dir_ / "model.safetensors", b);
  expect_refused({"model.safetensors"});
}

TEST_F(BadCheckpoint, TruncatedInsideTheHeader) {
  std::vector<uint8_t> b = read_bytes(dir_ / "model.safetensors");
  b.resize(100);
  amk::testing::write_bytes(dir_ / "model.safetensors", b);
  expect_refused({"model.safetensors"});
}

TEST_F(BadCheckpoint, HeaderOffsetsPastTheEnd) {
  Parsed p = parse_fixture_weights();
  const uint64_t size = p.data.size();
  // The last tensor (model.norm.weight, 256 bytes) moved past the data section's end.
  p.header["model.norm.weight"]["data_offsets"] = {size + 1024, size + 1024 + 256};
  std::string text = p.header.dump();
  while (text.size() % 8 != 0) text += ' ';
  amk::testing::write_bytes(dir_ / "model.safetensors", amk::testing::raw_safetensors(text, p.data));
  expect_refused({"model.safetensors", "model.norm.weight"});
}

TEST_F(BadCheckpoint, MissingTensor) {
  amk::testing::write_bytes(dir_ / "model.safetensors", rebuilt([](auto& ts) {
                              std::erase_if(ts, [](const amk::testing::StTensor& t) {
                                return t.name == "model.layers.1.mlp.down_proj.weight";
                              });
                            }));
  expect_refused({"missing tensor", "model.layers.1.mlp.down_proj.weight"});
}

TEST_F(BadCheckpoint, MissingEmbeddingTable) {
  amk::testing::write_bytes(dir_ / "model.safetensors", rebuilt([](auto& ts) {
                              std::erase_if(ts, [](const amk::testing::StTensor& t) {
                                return t.name == "model.embed_tokens.weight";
                              });
                            }));
  expect_refused({"model.embed_tokens.weight"});
}

TEST_F(BadCheckpoint, WrongShapedTensor) {
  // Same bytes, same element count, wrong shape: [64, 64] declared as [32, 128].
  amk::testing::write_bytes(dir_ / "model.safetensors", rebuilt([](auto& ts) {
                              for (auto& t : ts)
                                if (t.name == "model.layers.0.self_attn.q_proj.weight")
                                  t.shape = {32, 128};
                            }));
  expect_refused({"model.layers.0.self_attn.q_proj.weight"});
}

TEST_F(BadCheckpoint, UnsupportedMixtureOfExperts) {
  edit_config([](json& c) {
    c["architectures"] = {"MixtralForCausalLM"};
    c["model_type"] = "mixtral";
    c["num_local_experts"] = 8;
    c["num_experts_per_tok"] = 2;
  });
  expect_refused({"config.json", "mixtral"});
}

TEST_F(BadCheckpoint, UnsupportedActivation) {
  edit_config([](json& c) { c["hidden_act"] = "gelu"; });
  expect_refused({"config.json", "gelu"});
}

TEST_F(BadCheckpoint, UnsupportedRopeType) {
  edit_config([](json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  expect_refused({"config.json", "yarn"});
}

// A config.json whose sizes are impossible, or disagree with the checkpoint's tensors, is refused
// when the checkpoint is opened, before anything is lowered or allocated, by a message naming
// the field: never a crash (num_key_value_heads 0 was SIGFPE), a "lowering bug", a silently
// dropped layer or minutes of work for a million layers that do not exist.
TEST_F(BadCheckpoint, ConfigFieldsAreCheckedAgainstBoundsAndTensors) {
  const std::vector<std::pair<json, std::vector<std::string>>> cases = {
      {{{"num_key_value_heads", 0}}, {"config.json", "num_key_value_heads is 0"}},
      {{{"num_attention_heads", 0}}, {"config.json", "num_attention_heads is 0"}},
      {{{"hidden_size", 0}}, {"config.json", "hidden_size is 0"}},
      {{{"vocab_size", 0}}, {"config.json", "vocab_size is 0"}},
      {{{"intermediate_size", 0}}, {"config.json", "intermediate_size is 0"}},
      {{{"head_dim", 0}}, {"config.json", "head_dim is 0"}},
      {{{"num_attention_heads", 3}}, {"config.json", "num_attention_heads 3", "num_key_value_heads 2"}},
      {{{"num_hidden_layers", 1}}, {"num_hidden_layers is 1", "holds 2 layers"}},
      {{{"num_hidden_layers", 3}}, {"num_hidden_layers is 3", "holds 2 layers"}},
      {{{"num_hidden_layers", 1000000}}, {"num_hidden_layers is 1000000", "limit"}},
      {{{"num_hidden_layers", 4096}}, {"num_hidden_layers is 4096", "holds 2 layers"}},
      {{{"vocab_size", 100}}, {"vocab_size is 100", "model.embed_tokens.weight"}},
      {{{"hidden_size", 128}}, {"hidden_size is 128", "model.embed_tokens.weight"}},
      {{{"intermediate_size", 100}}, {"intermediate_size is 100", "mlp.gate_proj.weight"}},
      {{{"num_key_value_heads", 4}}, {"num_key_value_heads 4", "k_proj.weight"}},
      {{{"head_dim", 8}}, {"head_dim 8", "q_proj.weight"}},
  };
  for (const auto& [patch, needles] : cases) {
    SCOPED_TRACE(patch.dump());
    fs::copy_file(kFixture / "config.json", dir_ / "config.json",
                  fs::copy_options::overwrite_existing);
    edit_config([&](json& c) { c.update(patch); });
    expect_refused(needles);
  }
}

// Layers numbered with a gap are not the config's 0..N-1.
TEST_F(BadCheckpoint, LayerNumbersWithAGap) {
  amk::testing::write_bytes(dir_ / "model.safetensors", rebuilt([](auto& ts) {
                              for (auto& t : ts)
                                if (t.name.starts_with("model.layers.1."))
                                  t.name.replace(0, 15, "model.layers.2.");
                            }));
  expect_refused({"num_hidden_layers is 2", "no model.layers.1"});
}

// Element `index` of F32 tensor `name` in the safetensors file at `path`, overwritten in place.
void poke_f32(const fs::path& path, const std::string& name, size_t index, float value) {
  std::vector<uint8_t> b = read_bytes(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(b.at(size_t(i))) << (8 * i);
  const json header = json::parse(b.begin() + 8, b.begin() + 8 + std::ptrdiff_t(n));
  ASSERT_EQ(header.at(name).at("dtype"), "F32");
  const size_t at = 8 + n + header.at(name).at("data_offsets")[0].get<size_t>() + 4 * index;
  std::memcpy(&b.at(at), &value, 4);
  amk::testing::write_bytes(path, b);
}

// Non-finite values are a FAIL or an error, never a PASS or tokens: NaN among the expected
// logits, and NaN weights (whose logits are NaN).
TEST_F(BadCheckpoint, NonFiniteLogitsFailTheOracleAndStopRun) {
  const std::string model = shell_quote(dir_.string());
  const fs::path expected = dir_ / "expected.safetensors";
  fs::copy_file(kFixture / "expected.safetensors", expected);
  const std::string oracle = "oracle " + model + " --expected " + shell_quote(expected.string());
  ASSERT_EQ(run_amk(oracle).exit_code, 0) << "the control passes";

  poke_f32(expected, "logits", 5 * 256 + 7, std::nanf(""));
  auto r = run_amk(oracle);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("PASS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 of the expected logits are NaN or infinite"), std::string::npos) << r.out;

  fs::copy_file(kFixture / "expected.safetensors", expected, fs::copy_options::overwrite_existing);
  poke_f32(dir_ / "model.safetensors", "model.norm.weight", 0, std::nanf(""));
  r = run_amk(oracle);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("of our logits are NaN or infinite"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not run"), std::string::npos) << r.out;

  r = run_amk("run " + model + " --device cpu --prompt-ids 1,2 -n 4");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(r.out.empty()) << "no tokens from NaN logits: " << r.out;
  EXPECT_NE(r.err.find("the logits at position 1 are not finite"), std::string::npos) << r.err;

  poke_f32(dir_ / "model.safetensors", "model.norm.weight", 0, INFINITY);
  r = run_amk("run " + model + " --device cpu --prompt-ids 1 -n 1");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("not finite"), std::string::npos) << r.err;
}

// The context (KV cache) is sized and checked against the model's positions before anything is
// lowered or allocated: -n 1048576 once allocated 10 GB and died of std::bad_alloc.
TEST_F(BadCheckpoint, ContextPastTheModelsPositionsIsAUsageError) {
  const std::string model = shell_quote(dir_.string());
  auto r = run_amk("run " + model + " --prompt-ids 1,2,3 -n 1048576");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("1048579 positions, more than the model's max_position_embeddings 512"),
            std::string::npos)
      << r.err;
  std::string prompt = "1";
  for (int i = 1; i < 513; ++i) prompt += ",1";
  r = run_amk("run " + model + " --prompt-ids " + prompt + " -n 1");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--prompt-ids (513 tokens)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("max_position_embeddings 512"), std::string::npos) << r.err;
  r = run_amk("run " + model + " --prompt-ids 1,2 -n 510");  // exactly 512: allowed
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(BadCheckpoint, MissingConfigJson) {
  fs::remove(dir_ / "config.json");
  expect_refused({"config.json"});
}

TEST_F(BadCheckpoint, MissingSafetensors) {
  fs::remove(dir_ / "model.safetensors");
  expect_refused({"model.safetensors"});
}

}  // namespace
