// `amk bench` without a usable GPU: it must say why and exit 2 before generating, measuring or
// printing any number (PROGRAM.md §7: never a latency without its verdict, never a fake one).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <filesystem>

#include "support/amk_command.h"
#include "support/temp_dir.h"

namespace {

using amk::testing::run_amk;

// Hides every GPU from the child, so the test means the same on a machine that has one.
class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override { setenv("CUDA_VISIBLE_DEVICES", "", 1); }
  void TearDown() override { unsetenv("CUDA_VISIBLE_DEVICES"); }
};

TEST_F(BenchCli, WithoutAGpuItSaysWhyAndExitsTwo) {
  const auto r = run_amk("bench --preset tiny --results /dev/null");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("no usable GPU"), std::string::npos) << r.err;
  // No numbers: nothing about the floor, the latency or the check reached stdout.
  EXPECT_EQ(r.out.find("floor"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("token"), std::string::npos) << r.out;
}

// The GPU is looked at before any other input: whatever else is wrong, no GPU is the answer.
TEST_F(BenchCli, NoGpuIsSaidBeforeAnythingElse) {
  for (const char* args : {"bench", "bench /nonexistent --preset tiny", "bench --preset tiny --tokens 0",
                           "bench --preset nope --config /dev/zero"}) {
    SCOPED_TRACE(args);
    const auto r = run_amk(args);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("no usable GPU"), std::string::npos) << r.err;
    // Says what is missing: not "CUDA driver version is insufficient" alone where there is no
    // driver, and never a fault of the other inputs.
    EXPECT_TRUE(r.err.find("no NVIDIA") != std::string::npos ||
                r.err.find("built without CUDA") != std::string::npos)
        << r.err;
  }
}

// --reference-only needs no GPU: it fills the reference cache with the check's logits (one file
// a position) and stops, printing no floor and no latency; the second run reads them. It needs
// the cache folder and a named target (the key holds the plain lowering for it).
TEST_F(BenchCli, ReferenceOnlyFillsTheCacheWithoutAGpu) {
  const amk::testing::TempDir dir("bench_reference_only");
  const std::string cache = (dir.path() / "refs").string();
  const std::string args = "bench --preset tiny --preset-dir " + (dir.path() / "tiny").string() +
                           " --reference-only --reference-cache " + cache +
                           " --gpu h200 --context 512 --check-positions 0,1,65";
  const auto first = run_amk(args);
  EXPECT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_NE(first.out.find("reference 3 check steps of the plain lowering computed in"),
            std::string::npos)
      << first.out;
  EXPECT_EQ(first.out.find("floor"), std::string::npos) << first.out;
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(cache)) files += e.is_regular_file();
  EXPECT_EQ(files, 3);
  const auto second = run_amk(args);
  EXPECT_EQ(second.exit_code, 0) << second.out << second.err;
  EXPECT_NE(second.out.find("read from"), std::string::npos) << second.out;
  const auto no_cache = run_amk("bench --preset tiny --reference-only --gpu h200");
  EXPECT_EQ(no_cache.exit_code, 2);
  EXPECT_NE(no_cache.err.find("--reference-only fills --reference-cache"), std::string::npos)
      << no_cache.err;
  const auto no_target = run_amk("bench --preset tiny --reference-only --reference-cache " + cache);
  EXPECT_EQ(no_target.exit_code, 2);
  EXPECT_NE(no_target.err.find("--reference-only needs --gpu NAME"), std::string::npos)
      << no_target.err;
}

TEST_F(BenchCli, NeedsExactlyOneModel) {
  EXPECT_EQ(run_amk("bench").exit_code, 2);
  EXPECT_EQ(run_amk("bench /nonexistent --preset tiny").exit_code, 2);
  EXPECT_EQ(run_amk("bench --preset tiny --tokens 0").exit_code, 2);
}

}  // namespace

// --tp lowers the derived tensor-parallel config (say so on the schedule line); a malformed
// shape, or --tp beside --config, is a usage error. (--reference-only: no GPU needed.)
TEST_F(BenchCli, TpDerivesATensorParallelSchedule) {
  const amk::testing::TempDir dir("bench_tp");
  const std::string base = "bench --preset tiny --preset-dir " + (dir.path() / "tiny").string() +
                           " --reference-only --reference-cache " +
                           (dir.path() / "refs").string() + " --gpu h200 --context 512";
  const auto ok = run_amk(base + " --tp 2,2,1");
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("schedule  tensor-parallel, 2 clusters of 2 SMs, attention on 1"),
            std::string::npos)
      << ok.out;
  const auto malformed = run_amk(base + " --tp 2,2");
  EXPECT_EQ(malformed.exit_code, 2);
  EXPECT_NE(malformed.err.find("--tp takes CLUSTERS,SIZE,ATTENTION"), std::string::npos)
      << malformed.err;
  const std::string config = (dir.path() / "c.json").string();
  std::ofstream(config) << "{}";
  const auto both = run_amk(base + " --tp 2,2,1 --config " + config);
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("not with --config"), std::string::npos) << both.err;
  const auto alone = run_amk(base + " --cluster-launch");
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("--cluster-launch launches a tensor-parallel step's clusters: it "
                           "needs --tp"),
            std::string::npos)
      << alone.err;
}
