// `amk bench` without a usable GPU: it must say why and exit 2 before generating, measuring or
// printing any number (PROGRAM.md §7: never a latency without its verdict, never a fake one).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "support/amk_command.h"

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

TEST_F(BenchCli, NeedsExactlyOneModel) {
  EXPECT_EQ(run_amk("bench").exit_code, 2);
  EXPECT_EQ(run_amk("bench /nonexistent --preset tiny").exit_code, 2);
  EXPECT_EQ(run_amk("bench --preset tiny --tokens 0").exit_code, 2);
}

}  // namespace
