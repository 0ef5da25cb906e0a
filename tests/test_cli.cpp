// The `amk` command, run as a subprocess: exit codes, key output, and the --json contracts.
// Also keeps examples/llama_block.json identical to what build_llama_block produces.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "amk/json.h"
#include "support/amk_command.h"
#include "support/llama_block.h"

namespace {

namespace fs = std::filesystem;

using CmdResult = amk::testing::CommandResult;

std::string quoted(const std::string& s) { return amk::testing::shell_quote(s); }
CmdResult amk(const std::string& args) { return amk::testing::run_amk(args); }

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string data(const std::string& name) { return quoted(std::string(AMK_TESTDATA_DIR) + "/cli/" + name); }
std::string example() { return quoted(std::string(AMK_EXAMPLES_DIR) + "/llama_block.json"); }
// `amk compile` of the tiny-llama fixture (derived default, a 64-row KV cache) into `out`.
CmdResult compile_tiny_llama(const fs::path& out) {
  return amk("compile " + quoted(std::string(AMK_TESTDATA_DIR) + "/fixtures/tiny-llama") +
             " --max-context 64 -o " + quoted(out.string()));
}

nlohmann::json parse_json(const CmdResult& r) {
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "stdout is not JSON (" << e.what() << "):\n" << r.out;
    return {};
  }
}

bool has_line_with(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(word) != std::string::npos) return true;
  return false;
}

// ---- validate -------------------------------------------------------------------------------
TEST(CliValidate, AcceptedExitsZero) {
  const CmdResult r = amk("validate " + data("accepted.json"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[VALID]"), std::string::npos) << r.out;
}

TEST(CliValidate, RejectedExitsOne) {
  const CmdResult r = amk("validate " + data("rejected_partial_wait.json"));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("[REJECTED]"), std::string::npos) << r.out;
  EXPECT_TRUE(has_line_with(r.out, "ERROR")) << r.out;
}

TEST(CliValidate, WarningsArePrintedWithTheWordWarning) {
  const CmdResult r = amk("validate " + data("warning.json"));
  EXPECT_EQ(r.exit_code, 0) << "warnings do not reject\n" << r.out << r.err;
  EXPECT_TRUE(has_line_with(r.out, "warning")) << r.out;
}

TEST(CliValidate, MalformedJsonExitsTwoNamingThePath) {
  const CmdResult r = amk("validate " + data("malformed.json"));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("malformed.json"), std::string::npos) << r.err;
}

TEST(CliValidate, InvalidFieldExitsTwo) {
  const CmdResult r = amk("validate " + data("bad_enum.json"));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("bad_enum.json"), std::string::npos) << r.err;
}

TEST(CliValidate, MissingFileExitsTwo) {
  const CmdResult r = amk("validate " + data("does_not_exist.json"));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("does_not_exist.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no such file"), std::string::npos) << r.err;
}

TEST(CliValidate, DirectoryExitsTwo) {
  const CmdResult r = amk("validate " + quoted(AMK_TESTDATA_DIR));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
}

TEST(CliValidate, JsonOutputParses) {
  const CmdResult ok = amk("validate --json " + data("accepted.json"));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  const nlohmann::json j = parse_json(ok);
  EXPECT_EQ(j.value("verdict", ""), "VALID");
  EXPECT_EQ(j.value("ok", false), true);
  EXPECT_TRUE(j["errors"].is_array() && j["errors"].empty());
  EXPECT_TRUE(j["warnings"].is_array());
  EXPECT_EQ(j["stats"].value("tasks", -1), 6);
  EXPECT_EQ(j["stats"].value("buffers", -1), 6);

  const CmdResult bad = amk("validate --json " + data("rejected_partial_wait.json"));
  EXPECT_EQ(bad.exit_code, 1);
  const nlohmann::json b = parse_json(bad);
  EXPECT_EQ(b.value("verdict", ""), "REJECTED");
  EXPECT_EQ(b.value("ok", true), false);
  EXPECT_FALSE(b["errors"].empty());

  const CmdResult warn = amk("validate --json " + data("warning.json"));
  EXPECT_EQ(warn.exit_code, 0);
  EXPECT_FALSE(parse_json(warn)["warnings"].empty());

  const CmdResult missing = amk("validate --json " + data("nope.json"));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(parse_json(missing).value("verdict", ""), "UNREADABLE");
}

// ---- info -----------------------------------------------------------------------------------
TEST(CliInfo, ExamplePrintsCountsAndTheFloor) {
  const CmdResult r = amk("info " + example());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* word : {"GEMV_TILE", "ATTENTION_TILE", "WEIGHT", "KV_CACHE", "counters",
                           "weights", "floor", "µs", "measured", "[VALID]"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word << " missing from\n" << r.out;
}

// The derived default's fused opcodes (RMSNORM_GEMV_GLU_TILE: 21 characters,
// ROPE_KV_ATTENTION_TILE: 22) are longer than the plain ones: the count column still lines up.
TEST(CliInfo, OpCountsLineUpWhateverTheNames) {
  const fs::path prog =
      fs::temp_directory_path() / ("amk_cli_info_" + std::to_string(getpid()) + ".json");
  const CmdResult c = compile_tiny_llama(prog);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const CmdResult r = amk("info " + quoted(prog.string()));
  fs::remove(prog);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<std::string> ops;
  bool in_tasks = false;
  while (std::getline(lines, line)) {
    if (line.rfind("tasks", 0) == 0) in_tasks = true;
    else if (in_tasks && line.rfind("  ", 0) == 0) ops.push_back(line);
    else if (in_tasks) break;
  }
  ASSERT_GE(ops.size(), 3u) << r.out;
  EXPECT_NE(r.out.find("RMSNORM_GEMV_GLU_TILE "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ROPE_KV_ATTENTION_TILE "), std::string::npos) << r.out;
  for (const std::string& op : ops) EXPECT_EQ(op.size(), ops[0].size()) << r.out;
}

TEST(CliInfo, JsonFloorIsWeightBytesOverBandwidth) {
  const CmdResult r = amk("info --json " + example());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_json(r);
  const double weight_bytes = j.value("weight_bytes", 0.0);
  EXPECT_GT(weight_bytes, 0.0);
  EXPECT_EQ(j.value("target", ""), "h100");
  EXPECT_NEAR(j.value("floor_us_spec", 0.0), weight_bytes / 3350e9 * 1e6, 1e-9);
  EXPECT_NEAR(j.value("floor_us_measured", 0.0), weight_bytes / 3100e9 * 1e6, 1e-9);
  EXPECT_EQ(j["tasks_by_op"].value("EMBED", 0), 1);
  EXPECT_EQ(j["buffers_by_kind"].value("KV_CACHE", 0), 2);
  EXPECT_EQ(j.value("ok", false), true);
}

TEST(CliInfo, NoTargetSaysSoAndGpuPicksOne) {
  const CmdResult r = amk("info " + data("no_target.json"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("no target"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--gpu"), std::string::npos) << r.out;

  const CmdResult h200 = amk("info --json --gpu h200 " + data("no_target.json"));
  EXPECT_EQ(h200.exit_code, 0) << h200.err;
  const nlohmann::json j = parse_json(h200);
  EXPECT_EQ(j.value("target", ""), "h200");
  EXPECT_NEAR(j.value("floor_us_spec", 0.0), j.value("weight_bytes", 0.0) / 4800e9 * 1e6, 1e-9);

  EXPECT_EQ(amk("info --gpu nosuchgpu " + data("no_target.json")).exit_code, 2);
}

TEST(CliInfo, BadInputExitsTwo) {
  EXPECT_EQ(amk("info " + data("malformed.json")).exit_code, 2);
  EXPECT_EQ(amk("info " + data("nope.json")).exit_code, 2);
}

// ---- targets --------------------------------------------------------------------------------
TEST(CliTargets, ListsTheBuiltInTargets) {
  const CmdResult r = amk("targets");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* word : {"h100", "h200", "b200", "sm_90", "3350", "4450", "measured GB/s"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word << " missing from\n" << r.out;

  const CmdResult j = amk("targets --json");
  EXPECT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json arr = parse_json(j);
  ASSERT_TRUE(arr.is_array());
  bool h100 = false, h200 = false;
  for (const auto& t : arr) {
    h100 |= t.value("name", "") == "h100";
    h200 |= t.value("name", "") == "h200";
  }
  EXPECT_TRUE(h100 && h200) << j.out;
}

// ---- exec -----------------------------------------------------------------------------------
TEST(CliExec, ExamplePrintsTheToken) {
  const CmdResult r = amk("exec " + example());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("next_token"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("logits"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("status: Ok"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("nan"), std::string::npos) << "every output is written\n" << r.out;
}

TEST(CliExec, JsonReportsTheTokenDeterministically) {
  const CmdResult a = amk("exec --json --seed 3 " + example());
  EXPECT_EQ(a.exit_code, 0) << a.err;
  const nlohmann::json j = parse_json(a);
  EXPECT_EQ(j.value("status", ""), "Ok");
  EXPECT_EQ(j.value("fired", 0), j.value("tasks", -1));
  bool saw_token = false;
  for (const auto& o : j["outputs"]) {
    if (o.value("name", "") != "next_token") continue;
    saw_token = true;
    ASSERT_TRUE(o.contains("value")) << o.dump();
    EXPECT_GE(o["value"].get<int64_t>(), 0);
    EXPECT_LT(o["value"].get<int64_t>(), amk::testing::LlamaBlockShape{}.vocab);
  }
  EXPECT_TRUE(saw_token) << a.out;
  const CmdResult b = amk("exec --json --seed 3 --order random " + example());
  EXPECT_EQ(parse_json(b)["outputs"], j["outputs"]) << "firing order cannot change the result";
}

TEST(CliExec, RepeatedRandomRunsAgree) {
  const CmdResult r = amk("exec --order random --runs 3 --seed 11 " + example());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("identical across runs: yes"), std::string::npos) << r.out;
}

TEST(CliExec, SmallProgramRuns) {
  const CmdResult r = amk("exec " + data("accepted.json"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("token"), std::string::npos) << r.out;
}

TEST(CliExec, RefusesRejectedAndBadInput) {
  const CmdResult rej = amk("exec " + data("rejected_partial_wait.json"));
  EXPECT_EQ(rej.exit_code, 1) << rej.out << rej.err;
  EXPECT_NE(rej.out.find("Rejected"), std::string::npos) << rej.out;
  EXPECT_EQ(amk("exec " + data("malformed.json")).exit_code, 2);
  EXPECT_EQ(amk("exec " + data("nope.json")).exit_code, 2);
  EXPECT_EQ(amk("exec --order sideways " + example()).exit_code, 2);
  EXPECT_EQ(amk("exec --runs 0 " + example()).exit_code, 2);
}

// A FIFO would block a reader forever and /dev/zero never end: program inputs must be regular
// files (or "-", standard input), refused by name otherwise.
TEST(CliInputs, ProgramsAreRegularFilesOrStdin) {
  const fs::path fifo = fs::temp_directory_path() / ("amk_cli_fifo_" + std::to_string(getpid()));
  fs::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const char* cmd : {"validate", "info", "exec"}) {
    SCOPED_TRACE(cmd);
    CmdResult r = amk(std::string(cmd) + " " + quoted(fifo.string()));
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("is a FIFO, not a regular file"), std::string::npos) << r.err;
    r = amk(std::string(cmd) + " /dev/zero");
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("is a character device, not a regular file"), std::string::npos) << r.err;
  }
  fs::remove(fifo);
  const CmdResult piped = amk("validate - < " + example());
  EXPECT_EQ(piped.exit_code, 0) << piped.out << piped.err;
  EXPECT_NE(piped.out.find("[VALID]"), std::string::npos) << piped.out;
}

// Numeric options that CLI11 would accept (NaN passes every range check, -1 wraps into a huge
// unsigned seed) are usage errors naming the option.
TEST(CliExec, BadNumbersAreUsageErrors) {
  for (const auto& [args, needle] :
       {std::pair<std::string, std::string>{"--seed -1", "--seed"},
        {"--seed 1.5", "--seed"},
        {"--seed 18446744073709551616", "--seed"},
        {"--timeout nan", "--timeout"},
        {"--timeout -1", "--timeout"},
        {"--timeout inf", "--timeout"},
        {"--pos -1", "--pos"}}) {
    SCOPED_TRACE(args);
    const CmdResult r = amk("exec " + args + " " + example());
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_EQ(r.err.rfind("amk: " + needle, 0), 0u) << r.err;
  }
}

// No --seed: a random one, printed, and --seed with it repeats the run.
TEST(CliExec, ARandomSeedIsPrintedAndRepeatable) {
  const CmdResult a = amk("exec --json " + example());
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const nlohmann::json ja = parse_json(a);
  EXPECT_TRUE(ja.value("seed_random", false));
  const auto seed = ja["seed"].get<uint64_t>();
  const CmdResult b = amk("exec --json --seed " + std::to_string(seed) + " " + example());
  const nlohmann::json jb = parse_json(b);
  EXPECT_FALSE(jb.value("seed_random", true));
  EXPECT_EQ(jb["outputs"], ja["outputs"]);
  const CmdResult text = amk("exec " + example());
  EXPECT_NE(text.out.find("(random: --seed "), std::string::npos) << text.out;
}

// What `amk compile` writes reads the step position at run time; exec runs it at --pos.
TEST(CliExec, CompiledProgramsRunAtAPosition) {
  const fs::path prog = fs::temp_directory_path() / ("amk_cli_pos_" + std::to_string(getpid()) + ".json");
  const CmdResult c = compile_tiny_llama(prog);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  for (const char* pos : {"", " --pos 0", " --pos 63"}) {
    SCOPED_TRACE(pos);
    const CmdResult r = amk("exec --seed 1" + std::string(pos) + " " + quoted(prog.string()));
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("status: Ok"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("step position"), std::string::npos) << r.out;
  }
  const CmdResult past = amk("exec --pos 64 " + quoted(prog.string()));
  EXPECT_EQ(past.exit_code, 2) << past.out << past.err;
  EXPECT_NE(past.err.find("--pos 64 is past the program's KV cache of 64 rows"), std::string::npos)
      << past.err;
  // A program whose positions are params takes none.
  const CmdResult fixed = amk("exec --pos 1 " + example());
  EXPECT_EQ(fixed.exit_code, 2) << fixed.out << fixed.err;
  EXPECT_NE(fixed.err.find("reads no step position"), std::string::npos) << fixed.err;
  fs::remove(prog);
}

// ---- usage ----------------------------------------------------------------------------------
TEST(CliUsage, UnknownCommandOrFlagExitsTwoWithUsageOnStderr) {
  const CmdResult r = amk("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("validate"), std::string::npos) << "usage lists the commands\n" << r.err;
  EXPECT_EQ(amk("").exit_code, 2);
  EXPECT_EQ(amk("validate --bogus " + data("accepted.json")).exit_code, 2);
  EXPECT_EQ(amk("validate").exit_code, 2);
  EXPECT_EQ(amk("--bogus").exit_code, 2);
}

TEST(CliUsage, HelpAndVersion) {
  const CmdResult help = amk("--help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* cmd : {"validate", "info", "targets", "exec"})
    EXPECT_NE(help.out.find(cmd), std::string::npos) << help.out;
  const CmdResult sub = amk("exec --help");
  EXPECT_EQ(sub.exit_code, 0);
  EXPECT_NE(sub.out.find("--seed"), std::string::npos) << sub.out;
  const CmdResult v = amk("--version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_NE(v.out.find("IR 0.12.0"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("ABI 0.12"), std::string::npos) << v.out;
  EXPECT_EQ(v.out.rfind("amk ", 0), 0u) << "the build version leads\n" << v.out;
  EXPECT_TRUE(v.out.find("CUDA compiled in") != std::string::npos ||
              v.out.find("CUDA not compiled in") != std::string::npos)
      << v.out;
}

// ---- the committed example ------------------------------------------------------------------
// AMK_REGENERATE_EXAMPLES=1 rewrites examples/llama_block.json; otherwise it must equal a fresh
// build byte for byte, so the README's program never drifts from the builder.
TEST(CliExample, LlamaBlockJsonMatchesTheBuilder) {
  const amk::Program program = amk::testing::build_llama_block({}, 0);
  const fs::path path = fs::path(AMK_EXAMPLES_DIR) / "llama_block.json";
  const char* regen = std::getenv("AMK_REGENERATE_EXAMPLES");
  if (regen != nullptr && std::string(regen) == "1") {
    std::string error;
    ASSERT_TRUE(amk::save_program(program, path, &error)) << error;
  }
  const std::string fresh = amk::program_to_json(program) + "\n";
  EXPECT_EQ(read_file(path), fresh)
      << path << " is stale; regenerate with AMK_REGENERATE_EXAMPLES=1 ./amk_tests "
      << "--gtest_filter=CliExample.*";
}

}  // namespace
