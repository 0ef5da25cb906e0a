// The acceptance core of the lowering: both fixtures, lowered once and decoded on the
// ReferenceVM, match transformers' logits at every position within 1e-4 and continue greedily
// exactly as transformers did.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <string>

#include "amk/checkpoint.h"
#include "amk/lowering.h"
#include "amk/oracle.h"

namespace {

using namespace amk;

const std::filesystem::path kFixtures = std::filesystem::path(AMK_TESTDATA_DIR) / "fixtures";

OracleReport oracle(const std::string& name, const ScheduleConfig& config = {}) {
  const Checkpoint ck = Checkpoint::open(kFixtures / name);
  const ExpectedOutputs e = load_expected(kFixtures / name / "expected.safetensors");
  const Program p = lower(ck.config(), config, *find_target("h100"), 64);
  return run_oracle(ck, p, e);
}

void expect_pass(const OracleReport& r) {
  EXPECT_LE(r.worst_error, kOracleTolerance) << "worst at position " << r.worst_position;
  EXPECT_TRUE(r.continuation_ok) << "diverges at continuation index " << r.first_divergence;
  EXPECT_FALSE(r.continuation.empty());
  EXPECT_TRUE(r.pass());
}

TEST(Oracle, TinyLlamaPassesWithTheDefaultConfig) {
  const OracleReport r = oracle("tiny-llama");
  expect_pass(r);
  RecordProperty("worst_error", std::to_string(r.worst_error));
  std::cout << "tiny-llama worst error " << r.worst_error << " at position " << r.worst_position
            << "\n";
}

TEST(Oracle, TinyQwen3PassesWithTheDefaultConfig) {
  const OracleReport r = oracle("tiny-qwen3");
  expect_pass(r);
  std::cout << "tiny-qwen3 worst error " << r.worst_error << " at position " << r.worst_position
            << "\n";
}

TEST(Oracle, SplitKvSmallTilesAndEveryPolicyStillPass) {
  ScheduleConfig c;
  c.tiling = {
      {"gemv", {{"N_tile", 16}}}, {"lm_head", {{"N_tile", 96}}}, {"attention", {{"kv_block", 16}}}};
  c.sm_assignment = std::string("round_robin");
  c.page_allocation = "linear";
  c.pipelining_depth = 3;
  for (const char* name : {"tiny-llama", "tiny-qwen3"}) {
    SCOPED_TRACE(name);
    expect_pass(oracle(name, c));
  }
}

TEST(Oracle, ReportsAWrongModelAsAFailure) {
  // tiny-qwen3's expected outputs against tiny-llama's weights: same vocab, different model.
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  const ExpectedOutputs e = load_expected(kFixtures / "tiny-qwen3" / "expected.safetensors");
  const OracleReport r = run_oracle(ck, lower(ck.config(), {}, *find_target("h100"), 64), e);
  EXPECT_FALSE(r.logits_ok);
  EXPECT_FALSE(r.pass());
}

TEST(Oracle, RejectsExpectedOutputsWithoutTheirTensors) {
  // A model file is a valid safetensors file without prompt_ids.
  EXPECT_THROW(load_expected(kFixtures / "tiny-llama" / "model.safetensors"), OracleInputError);
}

}  // namespace
