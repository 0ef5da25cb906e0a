// `amk compile`, `amk run` and `amk oracle` end to end on the fixtures, with their exit codes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
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

// --device cpu is the fast CPU decoder, cpu-ref the reference VM: both pass the oracle, both run
// the same greedy tokens, and the stderr of a piped run holds no progress line.
TEST(OracleCli, CpuAndCpuRefAgree) {
  for (const char* device : {"cpu", "cpu-ref"}) {
    const auto r = run_amk("oracle " + fixture("tiny-qwen3") + " --expected " +
                           expected("tiny-qwen3") + " --device " + device);
    EXPECT_EQ(r.exit_code, 0) << device << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("PASS"), std::string::npos) << device;
  }
  const std::string args = "run " + fixture("tiny-llama") + " --prompt-ids 5,17,3 -n 12 --device ";
  const auto fast = run_amk(args + "cpu"), ref = run_amk(args + "cpu-ref");
  ASSERT_EQ(fast.exit_code, 0) << fast.err;
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  EXPECT_EQ(fast.out, ref.out);
  EXPECT_EQ(fast.err, "");
  const auto unknown = run_amk(args + "gpu");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("cpu, cpu-ref or cuda"), std::string::npos) << unknown.err;
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
  fs::remove(cfg);
  fs::remove(out);
}

// A ScheduleConfig file: {} is the defaults, an unknown key a warning (the rest is used), "-"
// standard input; only regular files, and malformed text an error.
TEST(LoweringCli, ConfigFiles) {
  const fs::path cfg = scratch("cfg2.json"), out = scratch("prog2.json");
  const std::string compile = "compile " + fixture("tiny-llama") + " -o " + shell_quote(out.string());
  std::ofstream(cfg) << "{}";
  auto r = run_amk(compile + " --config " + shell_quote(cfg.string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;

  std::ofstream(cfg) << R"({"pipelining_dept": 3, "pipelining_depth": 1})";
  r = run_amk(compile + " --config " + shell_quote(cfg.string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pipelining_dept"), std::string::npos) << r.err;
  amk::LoadResult loaded = amk::load_program(out);
  ASSERT_TRUE(loaded) << loaded.error;
  EXPECT_EQ(loaded.program->config->pipelining_depth, 1) << "the known keys are used";

  r = run_amk(compile + " --config - < " + shell_quote(cfg.string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;

  for (const char* bad : {"1", "[]", "{", "{}, \"tasks\": []", ""}) {
    SCOPED_TRACE(bad);
    std::ofstream(cfg, std::ios::trunc) << bad;
    r = run_amk(compile + " --config " + shell_quote(cfg.string()));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("invalid config"), std::string::npos) << r.err;
  }
  r = run_amk(compile + " --config /dev/zero");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
  fs::remove(cfg);
  fs::remove(out);
}

// Never write over an input: -o on (or into) the checkpoint folder or onto the config is refused
// and the input is untouched.
TEST(LoweringCli, CompileNeverWritesOverItsInputs) {
  const fs::path model = scratch("protected-model");
  fs::remove_all(model);
  fs::copy(std::string(AMK_TESTDATA_DIR) + "/fixtures/tiny-llama", model);
  const std::string config_text = [&] {
    std::ifstream in(model / "config.json");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const fs::path cfg = scratch("cfg3.json"), link = scratch("link.json");
  std::ofstream(cfg) << "{}";
  fs::remove(link);
  fs::create_symlink(model / "config.json", link);
  const std::string m = shell_quote(model.string());
  for (const std::string& o :
       {(model / "config.json").string(), (model / "model.safetensors").string(),
        (model / ".." / model.filename() / "config.json").string(), link.string(), model.string(),
        cfg.string(), (model / "generation_config.json").string(),
        (model / "model-00001-of-00002.safetensors").string()}) {
    SCOPED_TRACE(o);
    const auto r = run_amk("compile " + m + " --config " + shell_quote(cfg.string()) + " -o " +
                           shell_quote(o));
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("refusing to write -o"), std::string::npos) << r.err;
  }
  std::ifstream in(model / "config.json");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), config_text);
  EXPECT_EQ(run_amk("oracle " + m + " --expected " + expected("tiny-llama")).exit_code, 0);
  // A new program beside the checkpoint's files harms nothing.
  EXPECT_EQ(run_amk("compile " + m + " -o " + shell_quote((model / "prog.json").string())).exit_code, 0);
  fs::remove_all(model);
  fs::remove(cfg);
  fs::remove(link);
}

TEST(OracleCli, BadNumbersAreUsageErrors) {
  const std::string base = "oracle " + fixture("tiny-llama") + " --expected " + expected("tiny-llama");
  for (const char* opt : {"--tolerance -1", "--tolerance nan", "--tolerance inf", "--timeout nan",
                          "--timeout 0", "--timeout -3"}) {
    SCOPED_TRACE(opt);
    const auto r = run_amk(base + " " + opt);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_EQ(r.err.rfind("amk: " + std::string(opt).substr(0, std::string(opt).find(' ')), 0), 0u)
        << r.err;
  }
  EXPECT_EQ(run_amk(base + " --tolerance 0.001").exit_code, 0);
}

// A FIFO where a safetensors file is expected is refused, not waited on forever.
TEST(OracleCli, FifoInputsAreRefused) {
  const fs::path fifo = scratch("expected.fifo");
  fs::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto r = run_amk("oracle " + fixture("tiny-llama") + " --expected " + shell_quote(fifo.string()));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
  fs::remove(fifo);
}

}  // namespace
