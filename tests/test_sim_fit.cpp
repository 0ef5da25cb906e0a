// Calibrating the timing simulator: the constants' JSON file and what it refuses, the profile
// reader, the fit recovering constants from measurements the simulator itself made, and the
// held-out score's arithmetic against naive formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "amk/knob_space.h"
#include "amk/lowering.h"
#include "amk/model_config.h"
#include "amk/model_presets.h"
#include "amk/sim_constants_io.h"
#include "amk/sim_fit.h"
#include "amk/timing_sim.h"

namespace amk::sim {
namespace {

const GpuTarget& h100() { return *find_target("h100"); }

std::string valid_json() { return constants_to_json(constants_for(h100()), R"({"note": "x"})"); }

void expect_refused(const std::string& text, const std::string& fragment) {
  try {
    constants_from_json(text, "test.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test.json"), std::string::npos) << e.what();
  }
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(SimConstants, RoundTripThroughJson) {
  SimConstants c = constants_for(h100());
  c.hop_us = 1.234;
  c.attn_gbs = 5.5;
  const SimConstants back = constants_from_json(constants_to_json(c, R"({"cases": 3})"), "x");
  for (const std::string& name : fitted_constant_names())
    EXPECT_DOUBLE_EQ(*constant_field(back, name), *constant_field(c, name)) << name;
  EXPECT_DOUBLE_EQ(back.ceiling_gbs, c.ceiling_gbs);
  EXPECT_EQ(back.target, "h100");
}

TEST(SimConstants, TheLoaderRefusesMalformedConstantsByName) {
  const std::string ok = valid_json();
  expect_refused("{", "not valid JSON");
  expect_refused("[1, 2]", "expected a JSON object");
  expect_refused(replaced(ok, "amk.sim_constants/1", "amk.sim_constants/9"), "\"format\"");
  expect_refused(replaced(ok, "\"hop_us\"", "\"hop_usx\""), "unknown constant \"hop_usx\"");
  expect_refused(replaced(ok, "\"fit\"", "\"fitt\""), "unknown key \"fitt\"");
  // A missing constant: drop one line.
  {
    std::string text = ok;
    const size_t at = text.find("\"chunk_us\"");
    text.erase(at, text.find('\n', at) - at + 1);
    expect_refused(text, "\"chunk_us\" is missing");
  }
  std::string text = ok;
  const size_t at = text.find("\"per_sm_gbs\"");
  const size_t colon = text.find(':', at), end = text.find(',', at);
  expect_refused(text.substr(0, colon + 1) + " \"fast\"" + text.substr(end), "must be a number");
  expect_refused(text.substr(0, colon + 1) + " 0" + text.substr(end), "out of range (> 0)");
  const size_t hop = text.find("\"hop_us\"");
  const size_t hop_colon = text.find(':', hop), hop_end = text.find(',', hop);
  expect_refused(text.substr(0, hop_colon + 1) + " -1" + text.substr(hop_end), "out of range (>= 0)");
}

TEST(SimConstants, TheStoredH100FitIsCompiledInAndParses) {
  const auto stored = stored_constants("h100");
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->target, "h100");
  const SimConstants c = constants_for(h100());
  for (const std::string& name : fitted_constant_names())
    EXPECT_DOUBLE_EQ(*constant_field(c, name), *constant_field(*stored, name)) << name;
  EXPECT_GT(c.ceiling_gbs, 0);
  EXPECT_FALSE(stored_constants("no-such-gpu").has_value());
}

// ---- profiles ----

// Without a kv_block split the lowering refuses [attention_combine, gemv] (nothing to merge).
void drop_combine_fusion(ScheduleConfig& c) {
  std::erase_if(c.fusion_grouping, [](const std::vector<std::string>& g) {
    return g == std::vector<std::string>{"attention_combine", "gemv"};
  });
}

Program small_program(const ScheduleConfig* config = nullptr) {
  const ModelConfig m = parse_model_config(model_preset_config("smollm2-135m", "bfloat16"), "s");
  return lower(m, config ? *config : default_schedule_config(m, h100(), 512), h100(), 512,
               DType::BF16);
}

std::string tsv_of(const Program& p, const SimResult& r) {
  std::string out =
      "task\tlabel\top\tsm\test_bytes\twait_begin_ns\top_begin_ns\top_end_ns\tbody_begin_ns\t"
      "body_end_ns\n";
  for (size_t i = 0; i < p.tasks.size(); ++i)
    out += std::to_string(p.tasks[i].id) + "\t" + p.tasks[i].label + "\t" +
           std::to_string(int(p.tasks[i].op)) + "\t" + std::to_string(*p.tasks[i].sm) + "\t" +
           std::to_string(p.tasks[i].est_bytes) + "\t" + std::to_string(r.stamps[i].wait_begin) +
           "\t" + std::to_string(r.stamps[i].op_begin) + "\t" + std::to_string(r.stamps[i].op_end) +
           "\t" + (r.stamps[i].body_begin ? std::to_string(r.stamps[i].body_begin) : "-") +
           "\t" + (r.stamps[i].body_end ? std::to_string(r.stamps[i].body_end) : "-") + "\n";
  return out;
}

TEST(SimProfile, ReadsAProfileOfTheSameProgramAndRefusesAnotherOne) {
  const Program p = small_program();
  const SimResult r = simulate_step(p, h100(), constants_for(h100()));
  const MeasuredProfile m = read_profile_tsv(tsv_of(p, r), p, "prof.tsv");
  ASSERT_EQ(m.stamps.size(), p.tasks.size());
  for (size_t i = 0; i < p.tasks.size(); i += 97) {
    EXPECT_EQ(m.stamps[i].op_begin, r.stamps[i].op_begin);
    EXPECT_EQ(m.stamps[i].op_end, std::max<uint64_t>(r.stamps[i].op_end, 1));
  }
  ScheduleConfig other = *p.config;
  other.tiling = {{"gemv", {{"N_tile", 64}}}};
  drop_combine_fusion(other);  // no kv_block split left to merge
  const Program q = small_program(&other);
  try {
    read_profile_tsv(tsv_of(p, r), q, "prof.tsv");
    FAIL() << "a profile of another program was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("another program"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_profile_tsv("hello\tworld\n", p, "x.tsv"), std::invalid_argument);
  EXPECT_THROW(read_profile_tsv("task\tlabel\top\tsm\test_bytes\twait_begin_ns\top_begin_ns\top_end_ns\n0\tembed\t2\t0\t1\tx\t1\t2\n",
                                p, "x.tsv"),
               std::invalid_argument);
}

TEST(SimProfile, StepSummaryTakesPerStageMedians) {
  Program p;
  for (int i = 0; i < 3; ++i) {
    Task& t = p.add_task(Op::ADD, {}, {}, p.new_counter());
    t.label = "L" + std::to_string(i) + ".o_proj[t0]";
  }
  Task& t = p.add_task(Op::ADD, {}, {}, p.new_counter());
  t.label = "lm_head[t0]";
  const std::vector<eval::TaskStamps> s{{0, 1000, 2000}, {0, 1000, 5000}, {500, 1000, 4000}, {0, 0, 9000}};
  const StepSummary sum = summarize_step(p, s);
  ASSERT_EQ(sum.stages.size(), 2u);
  EXPECT_EQ(sum.stages[0].stage, "o_proj");
  EXPECT_EQ(sum.stages[0].tasks, 3);
  EXPECT_DOUBLE_EQ(sum.stages[0].op_us, 3.0);  // median of 1, 4, 3
  EXPECT_DOUBLE_EQ(sum.stages[0].body_us, -1.0);
  EXPECT_DOUBLE_EQ(sum.stages[1].op_us, 9.0);
  EXPECT_DOUBLE_EQ(sum.span_us, 9.0);
}

// ---- the fit ----

// Three configs of smollm2-135m "measured" by the simulator itself at `truth` (the first also
// with one profiled step, as the bench takes it).
std::vector<SimCase> cases_measured_at(const SimConstants& truth, bool with_profile = true) {
  std::vector<SimCase> cases;
  const ModelConfig m = parse_model_config(model_preset_config("smollm2-135m", "bfloat16"), "s");
  ScheduleConfig base = default_schedule_config(m, h100(), 512);
  // The fit is the subject, not the derived default: the landscape this test's evaluation
  // budget was set for (256 threads; the derived default gives smollm2 192 since 2026-11-24).
  base.threads_per_block = 256;
  drop_combine_fusion(base);  // and its fusions then (the derived default merges in o_proj since)
  std::vector<ScheduleConfig> configs{base};
  ScheduleConfig c = base;
  c.tiling = {{"gemv", {{"N_tile", 64}}}};
  configs.push_back(c);
  c = base;
  c.fusion_grouping.clear();
  set_integer_knob(c, "tiling.attention.qkv_by_group", std::nullopt);  // needs rope+attention
  configs.push_back(c);
  for (size_t i = 0; i < configs.size(); ++i) {
    SimCase sc;
    sc.name = "c" + std::to_string(i);
    sc.group = "smollm2";
    sc.target = h100();
    sc.program = lower(m, configs[i], h100(), 512, DType::BF16);
    sc.position = 192;
    const SimResult r = simulate_step(sc.program, h100(), truth, SimOptions{192, 2});
    sc.measured_us = r.step_us;
    if (i == 0 && with_profile) {  // one profiled step, as the bench takes it
      const SimResult prof = simulate_step(sc.program, h100(), truth, SimOptions{327, 2});
      MeasuredProfile mp = read_profile_tsv(tsv_of(sc.program, prof), sc.program, "synthetic");
      mp.position = 327;
      sc.profiles.push_back(std::move(mp));
    }
    cases.push_back(std::move(sc));
  }
  return cases;
}

// The h100 constants stored until 2026-11-27 (before gate_us), written out so that the fits
// below, one of them pinned to the bit, do not move with each refit of data/targets/.
SimConstants h100_constants_of_2026_11_27() {
  return constants_from_json(R"({"format": "amk.sim_constants/1", "target": "h100", "constants": {
      "ceiling_gbs": 3093.4295885098104,
      "per_sm_gbs": 147.65259836533966, "task_fixed_us": 1.7080524556840306,
      "hop_us": 0.380784662679585, "chunk_us": 0.3722719158532207,
      "copy_latency_us": 0.537220745792142, "rtt_us": 0.601652840688621,
      "rtt_us_per_kib": 0.0008669347133123894, "hop_trips": 20.63861136866621,
      "prologue_trips": 0.595018202210042, "act_gbs": 36.57793103603317,
      "attn_fixed_us": 3.1438218922697683, "attn_gbs": 9.891485639142932,
      "strip_slow_factor": 7.842729515354824, "epilogue_trips": 28.364769609034795,
      "body_fixed_us": 0.08166644294535763, "arrive_us": 0.009956961489688155,
      "epilogue_us_per_row": 0.012228030416332043}})",
                             "the stored h100 fit of 2026-11-27");
}

SimConstants known_truth() {
  SimConstants truth = h100_constants_of_2026_11_27();
  truth.per_sm_gbs = 31;
  truth.task_fixed_us = 1.3;
  truth.hop_us = 1.7;
  return truth;
}

TEST(SimFit, RecoversKnownConstantsFromMeasurementsTheSimulatorMade) {
  const SimConstants truth = known_truth();
  const std::vector<SimCase> cases = cases_measured_at(truth);
  SimConstants start = truth;
  start.per_sm_gbs *= 1.5;
  start.task_fixed_us *= 0.6;
  start.hop_us *= 1.4;
  FitOptions options;
  options.free = {"per_sm_gbs", "task_fixed_us", "hop_us"};
  options.max_evaluations = 300;
  const FitResult fit = fit_constants(cases, start, options);
  EXPECT_LT(fit.objective, fit.start_objective);
  EXPECT_LT(fit.objective, 1e-5);
  EXPECT_NEAR(fit.constants.per_sm_gbs / truth.per_sm_gbs, 1.0, 0.03);
  EXPECT_NEAR(fit.constants.task_fixed_us / truth.task_fixed_us, 1.0, 0.03);
  EXPECT_NEAR(fit.constants.hop_us / truth.hop_us, 1.0, 0.03);
  ASSERT_EQ(fit.predicted_us.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_NEAR(fit.predicted_us[i] / cases[i].measured_us, 1.0, 0.01);
}

// The objective weighs each model's knob effects apart from its level: a case set off by one
// factor everywhere costs only that factor's squared log; off by different factors, it costs
// their mean squared log plus relative_weight x their spread around the group's mean.
TEST(SimFit, KnobEffectTermSeesOnlyTheSpreadWithinAGroup) {
  const SimConstants c = constants_for(h100());
  const ModelConfig m = parse_model_config(model_preset_config("smollm2-135m", "bfloat16"), "s");
  ScheduleConfig base = default_schedule_config(m, h100(), 512);
  ScheduleConfig unfused = base;
  unfused.fusion_grouping.clear();
  // q/k/v per head group needs the fused attention (the lowering refuses it without).
  set_integer_knob(unfused, "tiling.attention.qkv_by_group", std::nullopt);
  std::vector<SimCase> cases;
  for (const ScheduleConfig& cfg : {base, unfused}) {
    SimCase sc;
    sc.name = "c" + std::to_string(cases.size());
    sc.group = "smollm2";
    sc.target = h100();
    sc.program = lower(m, cfg, h100(), 512, DType::BF16);
    sc.position = 192;
    sc.measured_us = simulate_step(sc.program, h100(), c, SimOptions{192, 2}).step_us;
    cases.push_back(std::move(sc));
  }
  ASSERT_NE(cases[0].measured_us, cases[1].measured_us);  // two different programs
  FitOptions o;
  o.free = {"hop_us"};
  o.max_evaluations = 2;
  o.relative_weight = 3.0;
  // Measured 1.2x the prediction on both: no spread, so no knob-effect cost.
  std::vector<SimCase> same = cases;
  for (SimCase& sc : same) sc.measured_us *= 1.2;
  const double l = std::log(1.2);
  EXPECT_NEAR(fit_constants(same, c, o).start_objective, l * l, 1e-9);
  // 1.1x and 1.3x: mean of the squares plus 3 x the squared deviations from their mean.
  std::vector<SimCase> apart = cases;
  apart[0].measured_us *= 1.1;
  apart[1].measured_us *= 1.3;
  const double a = std::log(1.1), b = std::log(1.3), mid = (a + b) / 2;
  const double expected =
      (a * a + b * b) / 2 + 3.0 * ((a - mid) * (a - mid) + (b - mid) * (b - mid)) / 2;
  EXPECT_NEAR(fit_constants(apart, c, o).start_objective, expected, 1e-9);
  o.relative_weight = 0;
  EXPECT_NEAR(fit_constants(apart, c, o).start_objective, (a * a + b * b) / 2, 1e-9);
}

// ---- multi-start ----

// A landscape with no exact fit: the three cases measured off the simulator by different factors.
std::vector<SimCase> cases_with_no_exact_fit() {
  std::vector<SimCase> cases = cases_measured_at(known_truth(), /*with_profile=*/false);
  const double off[] = {1.0, 1.25, 0.85};
  for (size_t i = 0; i < cases.size(); ++i) cases[i].measured_us *= off[i];
  return cases;
}

SimConstants a_wrong_start() {
  SimConstants start = known_truth();
  start.per_sm_gbs *= 1.5;
  start.task_fixed_us *= 0.6;
  start.hop_us *= 1.4;
  return start;
}

FitOptions few_evaluations(int starts, uint64_t seed = 1) {
  FitOptions o;
  o.free = {"per_sm_gbs", "task_fixed_us", "hop_us"};
  o.max_evaluations = 10;
  o.starts = starts;
  o.seed = seed;
  return o;
}

void expect_same_constants(const SimConstants& a, const SimConstants& b) {
  for (const std::string& name : fitted_constant_names())
    EXPECT_EQ(*constant_field(a, name), *constant_field(b, name)) << name;
}

// Start 0 of a multi-start fit is the single-start fit itself, so more starts are never worse;
// the result reports each start and returns the best.
TEST(SimFit, MoreStartsAreNeverWorseAndReportEachStart) {
  const std::vector<SimCase> cases = cases_with_no_exact_fit();
  const SimConstants start = a_wrong_start();
  const FitResult one = fit_constants(cases, start, few_evaluations(1));
  ASSERT_EQ(one.starts.size(), 1u);
  EXPECT_EQ(one.best_start, 0);
  EXPECT_EQ(one.starts[0].objective, one.objective);
  EXPECT_EQ(one.starts[0].evaluations, one.evaluations);
  // A simplex step begun under the budget finishes: at most 2 + 3 evaluations past it.
  EXPECT_LE(one.evaluations, 10 + 5);

  const FitResult three = fit_constants(cases, start, few_evaluations(3));
  ASSERT_EQ(three.starts.size(), 3u);
  EXPECT_LE(three.objective, one.objective);
  EXPECT_EQ(three.starts[0].objective, one.objective);  // the given start, run as before
  EXPECT_EQ(three.start_objective, one.start_objective);
  int evaluations = 0;
  for (const FitStart& s : three.starts) {
    EXPECT_GE(s.objective, three.objective);
    EXPECT_LE(s.objective, s.start_objective);
    EXPECT_LE(s.evaluations, 10 + 5);  // max_evaluations is per start
    evaluations += s.evaluations;
  }
  EXPECT_EQ(three.evaluations, evaluations);
  ASSERT_GE(three.best_start, 0);
  ASSERT_LT(three.best_start, 3);
  EXPECT_EQ(three.starts[size_t(three.best_start)].objective, three.objective);
  // The perturbed starts are other points: their objectives there differ from the given one's.
  EXPECT_NE(three.starts[1].start_objective, three.starts[0].start_objective);
  EXPECT_NE(three.starts[2].start_objective, three.starts[1].start_objective);
  FitOptions none = few_evaluations(0);
  EXPECT_THROW(fit_constants(cases, start, none), std::invalid_argument);
}

// The perturbations come from the seed alone: the same seed gives the same constants bit for bit
// whatever the thread count; another seed starts elsewhere and is still no worse than one start.
TEST(SimFit, TheSeedAloneDecidesAMultiStartFit) {
  const std::vector<SimCase> cases = cases_with_no_exact_fit();
  const SimConstants start = a_wrong_start();
  FitOptions o = few_evaluations(2, 7);
  o.threads = 1;
  const FitResult a = fit_constants(cases, start, o);
  o.threads = 2;
  const FitResult b = fit_constants(cases, start, o);
  expect_same_constants(a.constants, b.constants);
  EXPECT_EQ(a.objective, b.objective);
  EXPECT_EQ(a.best_start, b.best_start);
  EXPECT_EQ(a.starts[1].start_objective, b.starts[1].start_objective);

  const FitResult other = fit_constants(cases, start, few_evaluations(2, 8));
  EXPECT_NE(other.starts[1].start_objective, a.starts[1].start_objective);  // another point
  EXPECT_EQ(other.starts[0].objective, a.starts[0].objective);              // the same start 0
  EXPECT_LE(other.objective, other.starts[0].objective);                    // = one start's
}

// One start is the fit as it was before multi-start: the same constants, bit for bit, as the
// code before it (commit 7286fba, this build's compiler and flags) gave on the recovery test's
// cases with 40 evaluations, with no seed to set then. The objective re-pinned on 2026-11-29,
// when the simulator lost bulk_store_signal (these cases' truth had it at 1): the same constants,
// a lower residual; and again on 2026-11-30, when the derived default gave qwen3 and smollm2
// a q/k/v counter per head group (these cases' programs): the same constants again.
TEST(SimFit, OneStartIsTheFitAsBefore) {
  const std::vector<SimCase> cases = cases_measured_at(known_truth());
  FitOptions o;
  o.free = {"per_sm_gbs", "task_fixed_us", "hop_us"};
  o.max_evaluations = 40;
  o.seed = 12345;  // unused with one start
  const FitResult fit = fit_constants(cases, a_wrong_start(), o);
  ASSERT_EQ(fit.starts.size(), 1u);
  EXPECT_EQ(fit.evaluations, 40);
  EXPECT_DOUBLE_EQ(fit.objective, 0x1.120dd1bbb1374p-15);
  EXPECT_DOUBLE_EQ(fit.constants.per_sm_gbs, 0x1.f3e8975b4c805p+4);
  EXPECT_DOUBLE_EQ(fit.constants.task_fixed_us, 0x1.4f01344fb77a2p+0);
  EXPECT_DOUBLE_EQ(fit.constants.hop_us, 0x1.aa7fe7db540f6p+0);
}

TEST(SimFit, RefusesNothingToFitAndUnknownConstants) {
  std::vector<SimCase> none(1);
  none[0].program = small_program();
  none[0].target = h100();
  EXPECT_THROW(fit_constants(none, constants_for(h100())), std::invalid_argument);
  none[0].measured_us = 1000;
  FitOptions o;
  o.free = {"warp_speed"};
  EXPECT_THROW(fit_constants(none, constants_for(h100()), o), std::invalid_argument);
}

// ---- the score ----

double naive_pearson(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = double(x.size());
  double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    syy += y[i] * y[i];
    sxy += x[i] * y[i];
  }
  return (n * sxy - sx * sy) / std::sqrt((n * sxx - sx * sx) * (n * syy - sy * sy));
}

TEST(SimScore, SpearmanMatchesTheTextbookFormulaWithoutTies) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 20; ++trial) {
    const size_t n = 3 + size_t(trial);
    std::vector<double> a(n), b(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = u(rng);
      b[i] = a[i] + 0.5 * u(rng);
    }
    // rho = 1 - 6 sum d^2 / (n (n^2 - 1)), d the rank differences.
    auto rank = [&](const std::vector<double>& v, size_t i) {
      double r = 1;
      for (double w : v) r += w < v[i] ? 1 : 0;
      return r;
    };
    double d2 = 0;
    for (size_t i = 0; i < n; ++i) d2 += std::pow(rank(a, i) - rank(b, i), 2);
    const double expected = 1 - 6 * d2 / (double(n) * (double(n * n) - 1));
    EXPECT_NEAR(spearman(a, b), expected, 1e-12) << n;
  }
}

TEST(SimScore, SpearmanAveragesTiedRanks) {
  const std::vector<double> a{1, 2, 2, 3}, b{10, 30, 20, 40};
  // Ranks of a: 1, 2.5, 2.5, 4; of b: 1, 3, 2, 4.
  EXPECT_NEAR(spearman(a, b), naive_pearson({1, 2.5, 2.5, 4}, {1, 3, 2, 4}), 1e-12);
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3}, {30, 20, 10}), -1.0);
  EXPECT_TRUE(std::isnan(spearman({1}, {2})));
  EXPECT_TRUE(std::isnan(spearman({1, 1, 1}, {1, 2, 3})));
  EXPECT_THROW(spearman({1, 2}, {1}), std::invalid_argument);
}

TEST(SimScore, MedianAbsoluteRelativeError) {
  EXPECT_NEAR(median_abs_relative_error({110, 90, 150}, {100, 100, 100}), 0.1, 1e-12);
  EXPECT_NEAR(median_abs_relative_error({110, 80, 150, 100}, {100, 100, 100, 100}), 0.15, 1e-12);
  EXPECT_TRUE(std::isnan(median_abs_relative_error({}, {})));
}

}  // namespace
}  // namespace amk::sim
