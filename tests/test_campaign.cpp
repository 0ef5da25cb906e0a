// The campaign commands end to end on a tiny random checkpoint, through the built `amk`:
// autoresearch's results.tsv (exact header, one honest row per experiment), resume continuing
// the ids, an injected validate() rejection, hang, crash and numeric fault each logged and
// survived, `amk loop`'s one-knob rule, `amk campaign status|next`, `amk eval` and `amk propose`.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include <dirent.h>
#include <sys/wait.h>
#include <signal.h>

#include "amk/eval_worker.h"
#include "amk/lowering.h"
#include "amk/model_config.h"
#include "amk/results_tsv.h"
#include "amk/schedule_config_io.h"
#include "support/amk_command.h"
#include "support/tiny_model.h"

namespace {

namespace fs = std::filesystem;
using amk::testing::run_amk;
using amk::testing::shell_quote;

struct Workdir {
  fs::path path;
  explicit Workdir(const std::string& name)
      : path(fs::temp_directory_path() / (name + std::to_string(getpid()))) {
    fs::remove_all(path);
  }
  ~Workdir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> f;
  std::stringstream s(line);
  for (std::string x; std::getline(s, x, '\t');) f.push_back(x);
  if (!line.empty() && line.back() == '\t') f.push_back("");
  return f;
}

// Every row honest: loop 2, keep/revert, one of the five words, a latency only with PASS (and
// then marked [predicted]), ids 1..n in order.
void expect_honest_rows(const fs::path& results, size_t n) {
  const auto lines = lines_of(results);
  ASSERT_EQ(lines.size(), n + 1);
  std::set<std::string> ids;  // a campaign never evaluates one schedule twice
  EXPECT_EQ(lines[0],
            "experiment\ttag\tloop\tmodel\tgpu\tregime\tkept\tcorrectness\tlatency_us\t"
            "pct_of_roofline\tschedule_or_kernel_id\tdescription");
  for (size_t i = 1; i < lines.size(); ++i) {
    SCOPED_TRACE(lines[i]);
    const auto f = fields(lines[i]);
    ASSERT_EQ(f.size(), 12u);
    EXPECT_EQ(f[0], std::to_string(i));
    EXPECT_EQ(f[2], "2");
    EXPECT_EQ(f[4], "h100");
    EXPECT_TRUE(f[6] == "keep" || f[6] == "revert");
    const std::set<std::string> words{"PASS", "FAIL", "REJECTED", "TIMEOUT", "CRASH"};
    EXPECT_TRUE(words.contains(f[7]));
    if (f[7] == "PASS") {
      EXPECT_FALSE(f[8].empty());
      EXPECT_TRUE(f[11].starts_with("[predicted] "));
    } else {
      EXPECT_TRUE(f[8].empty());
      EXPECT_TRUE(f[9].empty());
      EXPECT_EQ(f[6], "revert");
    }
    EXPECT_TRUE(f[10].starts_with("sched-"));
    EXPECT_TRUE(ids.insert(f[10]).second) << "evaluated twice: " << f[10];
  }
}

std::string model() { return shell_quote(amk::testing::tiny_model_dir().string()); }

TEST(Autoresearch, TwentyHonestRowsThenResumesToThirtySurvivingInjectedFailures) {
  Workdir w("amk_test_autoresearch_");
  const std::string cmd = "autoresearch " + model() + " --gpu h100 --device sim --workdir " +
                          shell_quote(w.path.string()) + " --watchdog 5 --seed 5 --iters ";
  // Experiment 4: the program is corrupted so validate() rejects it (unless the proposal does
  // not even lower: REJECTED either way); 6: the worker hangs; 9: it crashes.
  setenv("AMK_TEST_INJECT", "reject@4,hang@6,crash@9,crash@25", 1);
  const auto first = run_amk(cmd + "20");
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  expect_honest_rows(w.path / "results.tsv", 20);
  const auto rows = amk::eval::read_results(w.path / "results.tsv");
  EXPECT_EQ(rows[0].correctness, "PASS");  // the baseline
  EXPECT_EQ(rows[3].correctness, "REJECTED");
  EXPECT_EQ(rows[5].correctness, "TIMEOUT");
  EXPECT_NE(rows[5].description.find("watchdog"), std::string::npos);
  EXPECT_EQ(rows[8].correctness, "CRASH");
  EXPECT_NE(rows[8].description.find("signal"), std::string::npos);
  // The campaign went on after each failure: later experiments passed again.
  int later_passes = 0;
  for (size_t i = 9; i < rows.size(); ++i) later_passes += rows[i].correctness == "PASS";
  EXPECT_GT(later_passes, 0);
  EXPECT_TRUE(fs::exists(w.path / "state.json"));
  EXPECT_TRUE(fs::exists(w.path / "worker.log"));

  const auto second = run_amk(cmd + "30");
  unsetenv("AMK_TEST_INJECT");
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  expect_honest_rows(w.path / "results.tsv", 30);
  EXPECT_NE(second.out.find("resuming"), std::string::npos) << second.out;
  EXPECT_EQ(amk::eval::read_results(w.path / "results.tsv")[24].correctness, "CRASH");

  // Every experiment's config is logged with its verdict: the line's config has the row's id.
  const auto experiments = lines_of(w.path / "experiments.jsonl");
  ASSERT_EQ(experiments.size(), 30u);
  const auto all_rows = amk::eval::read_results(w.path / "results.tsv");
  for (size_t i = 0; i < experiments.size(); ++i) {
    const auto e = nlohmann::ordered_json::parse(experiments[i]);
    EXPECT_EQ(e["experiment"], int64_t(i) + 1);
    EXPECT_EQ(e["correctness"], all_rows[i].correctness);
    EXPECT_EQ(e.contains("latency_us"), all_rows[i].latency_us.has_value());
    const auto parsed = amk::parse_schedule_config(e["config"].dump());
    ASSERT_TRUE(parsed.config) << parsed.error;
    EXPECT_EQ(amk::schedule_id(*parsed.config), all_rows[i].schedule_id) << "experiment " << i + 1;
  }

  // Kept PASS configs are in the corpus, keyed by shape and GPU.
  const auto corpus = lines_of(w.path / "corpus.jsonl");
  ASSERT_FALSE(corpus.empty());
  const auto entry = nlohmann::json::parse(corpus.front());
  EXPECT_EQ(entry["gpu"], "h100");
  EXPECT_EQ(entry["shape"]["hidden"], 64);

  const auto status = run_amk("campaign status --json --workdir " + shell_quote(w.path.string()));
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const auto s = nlohmann::json::parse(status.out);
  EXPECT_EQ(s["experiments"], 30);
  EXPECT_EQ(s["next_experiment"], 31);
  EXPECT_GE(s["worker_starts"].get<int>(), 4);  // the first, after the hang and both crashes
  EXPECT_GT(s["baseline_us"].get<double>(), 0);
  // The simplicity tie-break keeps a simpler config within 1 % either way, so the incumbent may
  // sit a little above the baseline.
  EXPECT_GE(s["speedup"].get<double>(), 0.99);
  const auto next = run_amk("campaign next --json --workdir " + shell_quote(w.path.string()));
  ASSERT_EQ(next.exit_code, 0) << next.err;
  const auto n = nlohmann::json::parse(next.out);
  EXPECT_TRUE(n["decision"] == "CONTINUE" || n["decision"] == "STOP");
  EXPECT_FALSE(n["reasons"].empty());
  const auto report = run_amk("campaign report --workdir " + shell_quote(w.path.string()));
  EXPECT_EQ(report.exit_code, 0);
  EXPECT_NE(report.out.find("kept experiments"), std::string::npos);
}

TEST(Autoresearch, AFailedBaselineIsLoggedAndTheFirstPassIsKept) {
  Workdir w("amk_test_autoresearch_fail_");
  // Experiment 1 (the default schedule, which always lowers) gets wrong logits: FAIL.
  setenv("AMK_TEST_INJECT", "fail@1", 1);
  const auto r = run_amk("autoresearch " + model() + " --gpu h100 --device sim --iters 4 --workdir " +
                         shell_quote(w.path.string()));
  unsetenv("AMK_TEST_INJECT");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_honest_rows(w.path / "results.tsv", 4);
  const auto rows = amk::eval::read_results(w.path / "results.tsv");
  EXPECT_EQ(rows[0].correctness, "FAIL");
  EXPECT_EQ(rows[0].kept, "revert");
  for (const auto& row : rows)
    if (row.correctness == "PASS") {
      EXPECT_EQ(row.kept, "keep");
      EXPECT_NE(row.description.find("first PASS"), std::string::npos) << row.description;
      break;
    }
}

TEST(Autoresearch, ARowWrittenBeforeALostCheckpointKeepsItsId) {
  Workdir w("amk_test_autoresearch_lost_");
  const std::string cmd = "autoresearch " + model() + " --gpu h100 --device sim --workdir " +
                          shell_quote(w.path.string()) + " --iters ";
  ASSERT_EQ(run_amk(cmd + "5").exit_code, 0);
  // As if the process died after appending rows 4 and 5 but before checkpointing them.
  std::ifstream in(w.path / "state.json");
  nlohmann::ordered_json state = nlohmann::ordered_json::parse(in);
  in.close();
  state["next_experiment"] = 4;
  std::ofstream(w.path / "state.json") << state.dump(2);
  const auto r = run_amk(cmd + "7");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("continuing at 6"), std::string::npos) << r.out;
  expect_honest_rows(w.path / "results.tsv", 7);
}

TEST(Autoresearch, AMinutesBudgetStopsTheCampaign) {
  Workdir w("amk_test_autoresearch_minutes_");
  const auto r = run_amk("autoresearch " + model() + " --gpu h100 --device sim --minutes 0.01 "
                         "--json --workdir " + shell_quote(w.path.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GE(j["experiments"].get<int>(), 1);
  EXPECT_GE(j["elapsed_s"].get<double>(), 0.6);
  // The time budget is spent, so the orchestrator says STOP and why.
  EXPECT_EQ(j["next"]["decision"], "STOP");
  EXPECT_NE(j["next"]["reasons"].dump().find("time budget"), std::string::npos) << j.dump();
}

// The systematic sweep (no prior, no exploration) gives every knob a turn before any knob a
// second: each proposal takes the least-swept knob's neighbours, so a keep does not send the
// sweep back to the first tier. (It used to: a GPU campaign on the 1B spent 18 of 44
// experiments on pipelining_depth and never reached smem_bytes_per_block.)
TEST(Autoresearch, TheSweepGivesEveryKnobATurnBeforeAnyASecond) {
  Workdir w("amk_test_autoresearch_sweep_");
  const auto r = run_amk("autoresearch " + model() +
                         " --gpu h100 --device sim --cold --epsilon 0 --seed 2 --iters 26 "
                         "--workdir " + shell_quote(w.path.string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto rows = amk::eval::read_results(w.path / "results.tsv");
  ASSERT_EQ(rows.size(), 26u);
  std::vector<std::string> knobs;  // each sweep row's knob, in order
  int keeps = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    const std::string& d = rows[i].description;
    const size_t at = d.find("sweep: ");
    ASSERT_NE(at, std::string::npos) << d;
    knobs.push_back(d.substr(at + 7, d.find(' ', at + 7) - at - 7));
    keeps += rows[i].kept == "keep";
  }
  EXPECT_GT(keeps, 0) << "no keep: the test would not see a restart";
  const std::set<std::string> distinct(knobs.begin(), knobs.end());
  ASSERT_GE(distinct.size(), 10u);
  // The first |distinct| sweeps are all different knobs.
  const std::set<std::string> first(knobs.begin(), knobs.begin() + ptrdiff_t(distinct.size()));
  EXPECT_EQ(first.size(), distinct.size());
  // And the state remembers the counts, so a resumed campaign goes on where it stopped.
  const auto state = nlohmann::json::parse(std::ifstream(w.path / "state.json"));
  int64_t counted = 0;
  for (const auto& [knob, n] : state.at("knob_proposals").items()) counted += n.get<int64_t>();
  EXPECT_EQ(counted, int64_t(knobs.size()));
}

size_t open_fds() {
  size_t n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

// The parent's side of the worker in process: a hang is a TIMEOUT, a crash a CRASH, the next
// request a fresh worker, and nothing is left behind (no child, no descriptor).
TEST(EvalWorker, SurvivesAHangAndACrashWithoutLeaks) {
  const size_t fds_before = open_fds();
  const fs::path log = fs::temp_directory_path() / ("amk_test_worker_" + std::to_string(getpid()));
  {
    amk::search::WorkerSetup setup;
    setup.model_path = amk::testing::tiny_model_dir().string();
    setup.model_name = "tiny";
    setup.gpu = "h100";
    amk::search::EvalWorker worker(AMK_BINARY, setup, log, /*watchdog_s=*/2);
    const amk::ModelConfig m = amk::Checkpoint::open(setup.model_path).config();
    const amk::ScheduleConfig c = amk::default_schedule_config(m, *amk::find_target("h100"), 512);
    setenv("AMK_TEST_INJECT", "hang@1,crash@2", 1);
    EXPECT_EQ(worker.evaluate(c, 1).correctness, amk::eval::Correctness::TIMEOUT);
    const auto crash = worker.evaluate(c, 2);
    EXPECT_EQ(crash.correctness, amk::eval::Correctness::CRASH);
    EXPECT_NE(crash.details.find("signal 6"), std::string::npos) << crash.details;
    const auto ok = worker.evaluate(c, 3);
    unsetenv("AMK_TEST_INJECT");
    EXPECT_EQ(ok.correctness, amk::eval::Correctness::PASS) << ok.details;
    EXPECT_EQ(worker.starts(), 3);
    // A worker that cannot start is the caller's error, not a verdict.
    setup.model_path = "/nonexistent";
    amk::search::EvalWorker broken(AMK_BINARY, setup, log, 2);
    EXPECT_THROW(broken.evaluate(c, 1), amk::eval::EvalSetupError);
  }
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);  // every child reaped
  EXPECT_EQ(errno, ECHILD);
  EXPECT_EQ(open_fds(), fds_before);
  fs::remove(log);
}

// The children of `parent` whose command line contains "eval-worker".
std::vector<pid_t> eval_workers_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const pid_t pid = pid_t(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    std::ifstream cmd("/proc/" + std::string(e->d_name) + "/cmdline");
    const std::string args((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    if (args.find("eval-worker") != std::string::npos) out.push_back(pid);
  }
  closedir(d);
  return out;
}

// A campaign killed outright (SIGKILL: no destructor runs) takes its worker with it, even one
// stuck in an evaluation, instead of leaving it to run (or hold the GPU) on its own.
TEST(EvalWorker, DiesWithAKilledCampaign) {
  const fs::path work = fs::temp_directory_path() / ("amk_test_orphan_" + std::to_string(getpid()));
  fs::remove_all(work);
  const pid_t campaign = fork();
  ASSERT_GE(campaign, 0);
  if (campaign == 0) {
    setenv("AMK_TEST_INJECT", "hang@1", 1);
    const std::string model = amk::testing::tiny_model_dir().string(), dir = work.string();
    execl(AMK_BINARY, AMK_BINARY, "autoresearch", model.c_str(), "--gpu", "h100", "--device",
          "sim", "--iters", "3", "--watchdog", "60", "--workdir", dir.c_str(), (char*)nullptr);
    _exit(127);
  }
  std::vector<pid_t> workers;
  for (int i = 0; i < 200 && workers.empty(); ++i) {  // up to 10 s for the worker to start
    usleep(50000);
    workers = eval_workers_of(campaign);
  }
  ASSERT_EQ(workers.size(), 1u) << "no eval-worker child of the campaign appeared";
  kill(campaign, SIGKILL);
  waitpid(campaign, nullptr, 0);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {  // up to 5 s
    usleep(50000);
    std::ifstream stat("/proc/" + std::to_string(workers[0]) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    // Gone, or a zombie waiting for init to reap it.
    gone = !stat || close == std::string::npos || line.substr(close + 2, 1) == "Z";
  }
  EXPECT_TRUE(gone) << "eval-worker " << workers[0] << " outlived its campaign";
  if (!gone) kill(workers[0], SIGKILL);
  fs::remove_all(work);
}

TEST(Loop, ChangesOneKnobPerExperimentAndStopsAtTheBudget) {
  Workdir w("amk_test_loop_");
  const auto r = run_amk("loop " + model() + " --gpu h100 --device sim --budget 6 --workdir " +
                         shell_quote(w.path.string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_honest_rows(w.path / "results.tsv", 6);
  const auto rows = amk::eval::read_results(w.path / "results.tsv");
  EXPECT_NE(rows[0].description.find("baseline"), std::string::npos);
  // §5B: the sweep starts with the prefetch depth, one value at a time.
  for (size_t i = 1; i < rows.size(); ++i)
    EXPECT_NE(rows[i].description.find("sweep: pipelining_depth "), std::string::npos)
        << rows[i].description;
}

TEST(CampaignCli, BadInputsAreClearErrors) {
  Workdir w("amk_test_campaign_bad_");
  const auto none = run_amk("campaign status --workdir " + shell_quote(w.path.string()));
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("holds no campaign"), std::string::npos) << none.err;
  const auto both = run_amk("autoresearch " + model() + " --iters 3 --minutes 1");
  EXPECT_EQ(both.exit_code, 2);
  const auto cpu = run_amk("autoresearch " + model() + " --device cpu --iters 3");
  EXPECT_EQ(cpu.exit_code, 2);
  EXPECT_NE(cpu.err.find("--device"), std::string::npos);
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  const auto cuda = run_amk("autoresearch " + model() + " --device cuda --iters 3 --workdir " +
                            shell_quote(w.path.string()));
  unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(cuda.exit_code, 2);
  EXPECT_NE(cuda.err.find("no usable GPU"), std::string::npos) << cuda.err;
  EXPECT_FALSE(fs::exists(w.path / "results.tsv"));  // nothing ran, nothing was logged
}

TEST(EvalCli, OneVerdictAsJson) {
  const auto r = run_amk("eval " + model() + " --gpu h100 --device sim --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["verdict"]["correctness"], "PASS");
  EXPECT_EQ(j["verdict"]["latency_kind"], "predicted");
  EXPECT_GT(j["verdict"]["latency_us"].get<double>(), 0);
  const auto text = run_amk("eval " + model() + " --gpu h100 --device sim");
  EXPECT_NE(text.out.find("span"), std::string::npos) << text.out;  // the per-level table
  const auto cpu = run_amk("eval " + model() + " --gpu h100 --device cpu --json");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_TRUE(nlohmann::json::parse(cpu.out)["verdict"]["latency_us"].is_null());
}

TEST(EvalCli, AConfigOutOfRangeIsRefusedByTheLoader) {
  Workdir w("amk_test_eval_cfg_");
  fs::create_directories(w.path);
  std::ofstream(w.path / "cfg.json") << "{\"threads_per_block\": 1024}";
  const auto r = run_amk("eval " + model() + " --config " + shell_quote((w.path / "cfg.json").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("threads_per_block 1024"), std::string::npos) << r.err;
}

TEST(ProposeCli, PrintsTheIncumbentAndTheSpace) {
  const auto r = run_amk("propose " + model() + " --gpu h100 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["incumbent"]["pipelining_depth"], 4);
  bool threads = false;
  for (const auto& k : j["space"])
    if (k["name"] == "threads_per_block") {
      threads = true;
      EXPECT_EQ(k["lands_in"], "launch");
      EXPECT_NE(k["range"].get<std::string>().find("[64, 992]"), std::string::npos);
    }
  EXPECT_TRUE(threads);
}

}  // namespace

namespace {

// The worker's setup crosses the process boundary as JSON: every option it needs arrives,
// the reference cache's folder included (a campaign on the GPU keeps its reference logits
// there); a setup written before that field reads as "no cache".
TEST(EvalWorker, ItsSetupRoundTripsThroughJson) {
  amk::search::WorkerSetup s;
  s.model_path = "/models/x";
  s.model_name = "x";
  s.gpu = "h200";
  s.weights = "bf16";
  s.options.device = amk::eval::EvalDevice::Cuda;
  s.options.max_context = 4096;
  s.options.check_positions = {0, 3000};
  s.options.tokens = 128;
  s.options.reference_cache_dir = "/work/campaign/references";
  const amk::search::WorkerSetup back =
      amk::search::worker_setup_from_json(amk::search::worker_setup_to_json(s));
  EXPECT_EQ(back.model_path, s.model_path);
  EXPECT_EQ(back.gpu, "h200");
  EXPECT_EQ(back.options.device, amk::eval::EvalDevice::Cuda);
  EXPECT_EQ(back.options.max_context, 4096);
  EXPECT_EQ(back.options.check_positions, s.options.check_positions);
  EXPECT_EQ(back.options.tokens, 128);
  EXPECT_EQ(back.options.reference_cache_dir, "/work/campaign/references");
  nlohmann::json j = nlohmann::json::parse(amk::search::worker_setup_to_json(s));
  j.erase("reference_cache");
  EXPECT_EQ(amk::search::worker_setup_from_json(j.dump()).options.reference_cache_dir, "");
  EXPECT_THROW(amk::search::worker_setup_from_json("{\"model_path\": 1}"), std::invalid_argument);
}

}  // namespace
