// `amk compile`, `amk run` and `amk oracle` end to end on the fixtures, with their exit codes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "amk/json.h"
#include "amk/oracle.h"
#include "amk/validate.h"
#include "support/amk_command.h"

namespace {

using amk::testing::run_amk;
using amk::testing::shell_quote;
namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  return shell_quote(std::string(AMK_TESTDATA_DIR) + "/fixtures/" + name);
}
std::string expected(const std::string& name) {
  return shell_quote(std::string(AMK_TESTDATA_DIR) + "/fixtures/" + name + "/expected.safetensors");
}
fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("amk_model_cmd_" + std::to_string(getpid()) + "_" + name);
}

TEST(OracleCli, BothFixturesPass) {
  for (const char* name : {"tiny-llama", "tiny-qwen3"}) {
    const auto r =
        run_amk("oracle " + fixture(name) + " --expected " + expected(name) + " --device cpu");
    EXPECT_EQ(r.exit_code, 0) << name << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("PASS"), std::string::npos);
    EXPECT_NE(r.out.find("identical"), std::string::npos);
  }
}

TEST(OracleCli, AnotherModelsOutputsFailWithExitOne) {
  const auto r =
      run_amk("oracle " + fixture("tiny-llama") + " --expected " + expected("tiny-qwen3"));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos);
}

TEST(OracleCli, InvalidInputExitsTwo) {
  // Not an expected-outputs file / no checkpoint / the CUDA VM does not exist yet.
  EXPECT_EQ(
      run_amk("oracle " + fixture("tiny-llama") + " --expected " +
              shell_quote(std::string(AMK_TESTDATA_DIR) + "/fixtures/tiny-llama/model.safetensors"))
          .exit_code,
      2);
  EXPECT_EQ(run_amk("oracle /nonexistent --expected " + expected("tiny-llama")).exit_code, 2);
  const auto cuda = run_amk("oracle " + fixture("tiny-llama") + " --expected " +
                            expected("tiny-llama") + " --device cuda");
  // This suite runs where there is no GPU (CI): the CUDA path must say why it cannot run.
  EXPECT_EQ(cuda.exit_code, 2);
  EXPECT_NE(cuda.err.find("amk: --device cuda: "), std::string::npos) << cuda.err;
}

TEST(OracleCli, RunGeneratesTheGreedyContinuation) {
  // From the fixture's prompt, `run` prints transformers' greedy continuation.
  const amk::ExpectedOutputs e = amk::load_expected(std::string(AMK_TESTDATA_DIR) +
                                                    "/fixtures/tiny-llama/expected.safetensors");
  std::string prompt, want;
  for (size_t i = 0; i < e.sequence_ids.size(); ++i) {
    std::string& s = i < e.prompt_ids.size() ? prompt : want;
    s += (s.empty() ? "" : ",") + std::to_string(e.sequence_ids[i]);
  }
  const size_t n = e.sequence_ids.size() - e.prompt_ids.size();
  const auto r = run_amk("run " + fixture("tiny-llama") + " --device cpu --prompt-ids " + prompt +
                         " -n " + std::to_string(n));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, want + "\n");
  EXPECT_EQ(run_amk("run " + fixture("tiny-qwen3") + " --prompt-ids 1,x").exit_code, 2);
  EXPECT_EQ(run_amk("run " + fixture("tiny-qwen3") + " --prompt-ids 999").exit_code, 2);
  // Where there is no GPU (CI), the CUDA path says why and exits 2.
  const auto cuda = run_amk("run " + fixture("tiny-qwen3") + " --prompt-ids 1 --device cuda");
  EXPECT_EQ(cuda.exit_code, 2);
  EXPECT_NE(cuda.err.find("amk: --device cuda: "), std::string::npos) << cuda.err;
}

TEST(LoweringCli, CompileWritesAValidProgramAndHonoursTheConfig) {
  const fs::path cfg = scratch("cfg.json"), out = scratch("prog.json");
  std::ofstream(cfg) << R"({"tiling": {"gemv": {"N_tile": 32}, "attention": {"kv_block": 64}},
                           "sm_assignment": "round_robin", "pipelining_depth": 1})";
  const auto r =
      run_amk("compile " + fixture("tiny-llama") + " --gpu h200 --config " +
              shell_quote(cfg.string()) + " --max-context 256 -o " + shell_quote(out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* word : {"tasks", "counters", "pages", "weights", "floor", "ATTENTION_COMBINE"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word << "\n" << r.out;
  const amk::LoadResult loaded = amk::load_program(out);
  ASSERT_TRUE(loaded) << loaded.error;
  EXPECT_TRUE(amk::validate(*loaded.program).ok);
  EXPECT_EQ(loaded.program->target->name, "h200");
  ASSERT_TRUE(loaded.program->config.has_value());
  EXPECT_EQ(loaded.program->config->pipelining_depth, 1);

  std::ofstream(cfg) << R"({"tiling": {"gemv": {"N_tile": 32, "K_tile": 8}}})";
  const auto bad = run_amk("compile " + fixture("tiny-llama") + " --config " +
                           shell_quote(cfg.string()) + " -o " + shell_quote(out.string()));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("K_tile"), std::string::npos) << bad.err;
  std::ofstream(cfg) << R"({"pipelining_dept": 3})";
  const auto typo = run_amk("compile " + fixture("tiny-llama") + " --config " +
                            shell_quote(cfg.string()) + " -o " + shell_quote(out.string()));
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("pipelining_dept"), std::string::npos) << typo.err;
  fs::remove(cfg);
  fs::remove(out);
}

}  // namespace
