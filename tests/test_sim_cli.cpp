// `amk sim`, `amk sim-fit` and `amk sim-score` as a user runs them: what they print, what they
// write, and the clear refusal of bad input (exit 2, a message naming it, no crash).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "amk/lowering.h"
#include "amk/model_config.h"
#include "amk/model_presets.h"
#include "amk/schedule_config_io.h"
#include "amk/sim_constants_io.h"
#include "support/amk_command.h"

namespace amk {
namespace {

namespace fs = std::filesystem;
using testing::run_amk;
using testing::shell_quote;

fs::path scratch_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("amk_sim_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

TEST(SimCli, PredictsAPresetAndPrintsTheLevelTable) {
  const auto r = run_amk("sim smollm2-135m --gpu h100");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("predicted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("µs/token"), std::string::npos);
  EXPECT_NE(r.out.find("o_proj"), std::string::npos) << "the per-level table";
  EXPECT_NE(r.out.find("sched-"), std::string::npos) << "the schedule id bench gives it";
}

TEST(SimCli, WritesTheTraceAndJson) {
  const fs::path dir = scratch_dir("trace");
  const fs::path trace = dir / "t.json", config = dir / "c.json";
  const auto r = run_amk("sim smollm2-135m --gpu h100 --json --trace " + shell_quote(trace.string()) +
                         " --write-config " + shell_quote(config.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["predicted_us_per_token"].get<double>(), j["floor_us"].get<double>());
  EXPECT_TRUE(j["levels"].is_array());
  EXPECT_TRUE(nlohmann::json::parse(std::ifstream(trace)).contains("traceEvents"));
  // The written config lowers to the same program: the same prediction.
  const auto again = run_amk("sim smollm2-135m --gpu h100 --json --config " + shell_quote(config.string()));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(again.out)["predicted_us_per_token"].get<double>(),
                   j["predicted_us_per_token"].get<double>());
  fs::remove_all(dir);
}

TEST(SimCli, RefusesBadInputWithAClearMessage) {
  const fs::path dir = scratch_dir("bad");
  write(dir / "bad.json", R"({"format": "amk.sim_constants/1", "constants": {"hop_us": "x"}})");
  auto r = run_amk("sim smollm2-135m --constants " + shell_quote((dir / "bad.json").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("simulator constants"), std::string::npos) << r.err;
  r = run_amk("sim no-such-model-anywhere --gpu h100");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("neither"), std::string::npos) << r.err;
  r = run_amk("sim smollm2-135m --gpu h999");
  EXPECT_EQ(r.exit_code, 2);
  write(dir / "cases.tsv", "smollm2 only-four-fields smollm2-135m -\n");
  r = run_amk("sim-score --manifest " + shell_quote((dir / "cases.tsv").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cases.tsv:1"), std::string::npos) << r.err;
  write(dir / "cases.tsv", "smollm2 x smollm2-135m missing.json 1000\n");
  r = run_amk("sim-score --manifest " + shell_quote((dir / "cases.tsv").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("missing.json"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

// `--measured`: the per-level table of a GPU run's stamps of the same program beside the
// simulated one. The stamps here are made up (task i: wait at 1000 i ns, op 200-700 ns later), so
// the measured layer's span is known; a profile of another program is refused by name.
TEST(SimCli, LaysAMeasuredProfileOfTheSameProgramBesideThePrediction) {
  const fs::path dir = scratch_dir("measured");
  const ModelConfig m =
      parse_model_config(model_preset_config("smollm2-135m", "bfloat16"), "smollm2-135m");
  const GpuTarget& h100 = *find_target("h100");
  const Program p = lower(m, default_schedule_config(m, h100, 512), h100, 512, DType::BF16);
  const auto tsv = [&](const std::string& relabel) {
    std::string out =
        "task\tlabel\top\tsm\test_bytes\twait_begin_ns\top_begin_ns\top_end_ns\tbody_begin_ns\t"
        "body_end_ns\n";
    for (size_t i = 0; i < p.tasks.size(); ++i) {
      const Task& t = p.tasks[i];
      out += fmt::format("{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t-\t-\n", t.id,
                         i == 7 && !relabel.empty() ? relabel : t.label, int(t.op), *t.sm,
                         t.est_bytes, 1000 * i, 1000 * i + 200, 1000 * i + 700);
    }
    return out;
  };
  write(dir / "run.tsv", tsv(""));
  auto r = run_amk("sim smollm2-135m --gpu h100 --json --measured " +
                   shell_quote((dir / "run.tsv").string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j["measured_levels"].is_array());
  EXPECT_EQ(j["measured_levels"].size(), j["levels"].size());
  // The middle layer's tasks, first op begin to last op end.
  const std::string prefix = fmt::format("L{}.", j["layer"].get<int64_t>());
  size_t first = SIZE_MAX, last = 0;
  for (size_t i = 0; i < p.tasks.size(); ++i)
    if (p.tasks[i].label.starts_with(prefix)) first = std::min(first, i), last = i;
  EXPECT_NEAR(j["measured_layer_span_us"].get<double>(),
              (double(1000 * last + 700) - double(1000 * first + 200)) / 1e3, 1e-9);
  r = run_amk("sim smollm2-135m --gpu h100 --measured " + shell_quote((dir / "run.tsv").string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("measured ("), std::string::npos) << r.out;
  write(dir / "other.tsv", tsv("L0.not_this_program[t0]"));
  r = run_amk("sim smollm2-135m --gpu h100 --measured " + shell_quote((dir / "other.tsv").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("other.tsv"), std::string::npos) << r.err;
  r = run_amk("sim smollm2-135m --gpu h100 --measured " + shell_quote((dir / "absent.tsv").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("absent.tsv"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(SimCli, FitsAndScoresAManifest) {
  const fs::path dir = scratch_dir("fit");
  write(dir / "tile64.json", R"({"tiling": {"gemv": {"N_tile": 64}}, "sm_assignment": "critical_path"})");
  write(dir / "cases.tsv",
        "# GROUP NAME MODEL CONFIG BENCH\n"
        "smollm2 derived smollm2-135m - 1350\n"
        "smollm2 tile64  smollm2-135m tile64.json 1500\n");
  const fs::path out = dir / "fit.json";
  auto r = run_amk("sim-fit --manifest " + shell_quote((dir / "cases.tsv").string()) +
                   " --free hop_us,task_fixed_us --max-evals 40 --threads 1 --out " +
                   shell_quote(out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("objective"), std::string::npos) << r.out;
  const sim::SimConstants c = sim::load_constants(out.string());
  EXPECT_EQ(c.target, "h100");
  r = run_amk("sim-score --manifest " + shell_quote((dir / "cases.tsv").string()) +
              " --threads 1 --constants " + shell_quote(out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Spearman"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tile64"), std::string::npos);
  fs::remove_all(dir);
}

TEST(SimCli, FitsFromSeveralStartsAndRefusesBadStartsOrSeed) {
  const fs::path dir = scratch_dir("starts");
  write(dir / "cases.tsv",
        "smollm2 derived smollm2-135m - 1350\n"
        "smollm2 fused   smollm2-135m - 1400\n");
  const std::string fit = "sim-fit --manifest " + shell_quote((dir / "cases.tsv").string()) +
                          " --free hop_us,task_fixed_us --max-evals 8 --threads 1";
  const fs::path out = dir / "fit.json";
  auto r = run_amk(fit + " --starts 2 --seed 5 --out " + shell_quote(out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("starts    2 (seed 5)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("<- best"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(std::ifstream(out));
  EXPECT_EQ(j["fit"]["seed"].get<uint64_t>(), 5u);
  EXPECT_EQ(j["fit"]["starts"].size(), 2u);
  for (const std::string bad : {"--starts 0", "--starts 65", "--seed -1", "--seed 0x10"}) {
    r = run_amk(fit + " " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find(bad.substr(0, bad.find(' '))), std::string::npos) << bad << ": " << r.err;
  }
  fs::remove_all(dir);
}

// --tp: the derived config of a tensor-parallel step, every level tiled for its cluster, which
// --write-config saves; a malformed shape, one the lowering refuses, or --tp beside --config is
// refused by name. --cluster-size models its in-cluster hand-offs as mailboxes.
TEST(SimCli, DerivesATensorParallelConfig) {
  const fs::path config = scratch_dir("tp") / "tp.json";
  const auto r = run_amk("sim llama-3.2-1b --gpu h200 --tp 15,8,8 --cluster-size 8 --write-config " +
                         shell_quote(config.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("clusters  of 8 SMs"), std::string::npos) << r.out;
  std::ifstream in(config);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const ConfigParse parsed = parse_schedule_config(text);
  ASSERT_TRUE(parsed.config.has_value()) << parsed.error;
  const ScheduleConfig* written = &*parsed.config;
  std::map<std::string, std::map<std::string, int64_t>> tiling;
  for (const auto& [archetype, sizes] : written->tiling)
    for (const auto& [key, value] : sizes) tiling[archetype][key] = value;
  EXPECT_EQ(tiling["tp"], (std::map<std::string, int64_t>{{"attention", 8}, {"clusters", 15},
                                                           {"size", 8}}));
  EXPECT_EQ(tiling["o_proj"]["N_tile"], 2048 / 8);  // one slice of the sums
  EXPECT_EQ(tiling["gate_proj"]["N_tile"], 72);     // 576 features of a cluster over 8 SMs
  EXPECT_EQ(tiling["q_proj"]["N_tile"], 64);        // 4 + 1 + 1 tiles of a KV head on 8 SMs
  EXPECT_EQ(tiling["sample_argmax"]["N_tile"], 1072);  // 128,256 logits over 120 SMs
  EXPECT_FALSE(tiling["attention"].contains("qkv_by_group"));
  const auto bad = run_amk("sim llama-3.2-1b --gpu h200 --tp 15,8");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--tp takes CLUSTERS,SIZE,ATTENTION"), std::string::npos) << bad.err;
  const auto refused = run_amk("sim llama-3.2-1b --gpu h200 --tp 8,16,3");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("dividing the model's 8 KV heads"), std::string::npos) << refused.err;
  const auto both = run_amk("sim llama-3.2-1b --gpu h200 --tp 15,8,8 --config " +
                            shell_quote(config.string()));
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("not with --config"), std::string::npos) << both.err;
}

}  // namespace
}  // namespace amk
