// evaluate() (amk/evaluate.h) on a tiny random checkpoint: PASS with a predicted latency on a
// good config, REJECTED (never run) for configs out of range, unlowerable or refused by
// validate(), FAIL when the schedule's numbers are wrong; and the Verdict's JSON round trip.
#include <gtest/gtest.h>

#include <cmath>

#include "amk/critical_path.h"
#include "amk/evaluate.h"
#include "amk/knob_space.h"
#include "amk/lowering.h"
#include "amk/verdict.h"
#include "support/tiny_model.h"

namespace amk::eval {
namespace {

Evaluator make(EvalDevice device, int64_t check_layers = 0) {
  EvalOptions o;
  o.device = device;
  o.check_layers = check_layers;
  return Evaluator(Checkpoint::open(testing::tiny_model_dir()), "tiny", *find_target("h100"), o);
}

TEST(Evaluate, TheDefaultConfigPassesWithAPredictedLatency) {
  Evaluator e = make(EvalDevice::Sim);
  const Verdict v = e.evaluate(e.default_config());
  ASSERT_EQ(v.correctness, Correctness::PASS) << v.details;
  ASSERT_TRUE(v.has_latency());
  EXPECT_EQ(v.latency_kind, LatencyKind::Predicted);
  EXPECT_GT(*v.latency_us, 0);
  // §6: the spec-sheet floor over the latency.
  EXPECT_NEAR(*v.pct_of_roofline, v.roofline_us / *v.latency_us * 100, 1e-9);
  EXPECT_GE(v.check_error, 0);
  EXPECT_LE(v.check_error, 1e-4);
  EXPECT_FALSE(v.check_reduced_depth);
  EXPECT_EQ(v.check_layers, 2);
  ASSERT_TRUE(v.shares.known);
  EXPECT_NEAR(v.shares.attention + v.shares.mlp + v.shares.lm_head + v.shares.other, 1.0, 1e-9);
  EXPECT_EQ(e.last_stamps().size(), e.last_program()->tasks.size());
}

TEST(Evaluate, CpuChecksCorrectnessAndGivesNoLatency) {
  Evaluator e = make(EvalDevice::Cpu);
  const Verdict v = e.evaluate(plain_schedule_config());
  EXPECT_EQ(v.correctness, Correctness::PASS) << v.details;
  EXPECT_FALSE(v.latency_us);
  EXPECT_EQ(v.latency_kind, LatencyKind::None);
  EXPECT_EQ(v.check_error, 0);  // the plain lowering is its own reference
}

TEST(Evaluate, AReducedDepthTwinIsChecked) {
  Evaluator e = make(EvalDevice::Sim, /*check_layers=*/1);
  const Verdict v = e.evaluate(e.default_config());
  EXPECT_EQ(v.correctness, Correctness::PASS) << v.details;
  EXPECT_TRUE(v.check_reduced_depth);
  EXPECT_EQ(v.check_layers, 1);
  EXPECT_NE(v.details.find("1-layer twin"), std::string::npos) << v.details;
}

TEST(Evaluate, ConfigsThatCannotRunAreRejectedWithoutALatency) {
  Evaluator e = make(EvalDevice::Sim);
  ScheduleConfig out_of_range = e.default_config();
  out_of_range.threads_per_block = 100;
  const Verdict a = e.evaluate(out_of_range);
  EXPECT_EQ(a.correctness, Correctness::REJECTED);
  EXPECT_NE(a.details.find("threads_per_block 100"), std::string::npos) << a.details;
  EXPECT_FALSE(a.latency_us);

  ScheduleConfig unlowerable = e.default_config();  // 3 does not divide the 2 KV heads
  set_integer_knob(unlowerable, "tiling.attention.kv_block", 64);
  set_integer_knob(unlowerable, "tiling.attention.kv_heads", 3);
  const Verdict b = e.evaluate(unlowerable);
  EXPECT_EQ(b.correctness, Correctness::REJECTED) << b.details;
  EXPECT_FALSE(b.latency_us);

  // A program validate() refuses (the test hook closes a cycle): REJECTED by validate(), and
  // never handed to a VM.
  EvalFaults cycle;
  cycle.corrupt_program = true;
  const Verdict c = e.evaluate(e.default_config(), cycle);
  EXPECT_EQ(c.correctness, Correctness::REJECTED);
  EXPECT_NE(c.details.find("validate()"), std::string::npos) << c.details;
  EXPECT_FALSE(c.latency_us);
}

TEST(Evaluate, WrongNumbersFailAndCarryNoLatency) {
  Evaluator e = make(EvalDevice::Sim);
  EvalFaults fault;
  fault.perturb_logits = true;
  const Verdict v = e.evaluate(e.default_config(), fault);
  EXPECT_EQ(v.correctness, Correctness::FAIL);
  EXPECT_FALSE(v.has_latency());
  EXPECT_GT(v.check_error, 1e-4);
  // The fault is not cached: the same config without it passes.
  EXPECT_EQ(e.evaluate(e.default_config()).correctness, Correctness::PASS);
}

TEST(Evaluate, CudaWithoutAGpuIsASetupErrorNotAVerdict) {
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EvalOptions o;
  o.device = EvalDevice::Cuda;
  EXPECT_THROW(Evaluator(Checkpoint::open(testing::tiny_model_dir()), "tiny", *find_target("h100"), o),
               EvalSetupError);
  unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST(Verdict, JsonRoundTripsAndNeverCarriesALatencyWithoutAPass) {
  Verdict v;
  v.correctness = Correctness::PASS;
  v.latency_kind = LatencyKind::Predicted;
  v.latency_us = 12.5;
  v.pct_of_roofline = 40;
  v.schedule_id = "sched-0123456789abcdef";
  v.shares = {0.5, 0.3, 0.2, 0.0, true};
  v.simplicity.tasks = 17;
  const Verdict back = verdict_from_json(verdict_to_json(v));
  EXPECT_EQ(back.correctness, Correctness::PASS);
  EXPECT_EQ(back.latency_us, 12.5);
  EXPECT_EQ(back.latency_kind, LatencyKind::Predicted);
  EXPECT_EQ(back.simplicity.tasks, 17);
  EXPECT_DOUBLE_EQ(back.shares.mlp, 0.3);
  v.correctness = Correctness::FAIL;  // a latency beside a FAIL is dropped both ways
  EXPECT_FALSE(verdict_from_json(verdict_to_json(v)).latency_us);
  EXPECT_THROW(verdict_from_json("{\"correctness\": \"MAYBE\"}"), std::invalid_argument);
}

TEST(CriticalPath, RegionsOfLabels) {
  EXPECT_EQ(region_of_label("L3.q_proj[t2]"), Region::Attention);
  EXPECT_EQ(region_of_label("L3.attention[h0][kv1]"), Region::Attention);
  EXPECT_EQ(region_of_label("L0.gate_proj[t0]"), Region::Mlp);
  EXPECT_EQ(region_of_label("L0.down_proj[t4]"), Region::Mlp);
  EXPECT_EQ(region_of_label("lm_head[t9]"), Region::LmHead);
  EXPECT_EQ(region_of_label("sample_argmax"), Region::LmHead);
  EXPECT_EQ(region_of_label("embed"), Region::Other);
}

}  // namespace
}  // namespace amk::eval
