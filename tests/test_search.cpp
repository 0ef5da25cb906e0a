// The search's pure parts: §3's keep/revert rules on synthetic verdict sequences, results.tsv's
// exact header and rows, the proposer's one-knob rule, the kNN prior's ranking, the test-hook
// parser and `campaign next`'s move-on criteria.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "amk/campaign_report.h"
#include "amk/eval_worker.h"
#include "amk/keep_revert.h"
#include "amk/knob_space.h"
#include "amk/lowering.h"
#include "amk/model_presets.h"
#include "amk/results_tsv.h"
#include "amk/schedule_config_io.h"
#include "amk/schedule_prior.h"
#include "amk/schedule_proposer.h"

namespace amk::search {
namespace {

using eval::Correctness;
using eval::Verdict;

Verdict pass(double us, int64_t tasks = 100) {
  Verdict v;
  v.correctness = Correctness::PASS;
  v.latency_kind = eval::LatencyKind::Predicted;
  v.latency_us = us;
  v.simplicity.tasks = tasks;
  v.simplicity.pipelining_depth = 2;
  return v;
}

Verdict failed(Correctness c) {
  Verdict v;
  v.correctness = c;
  v.latency_us = 1.0;  // a latency beside a failure must never count
  return v;
}

TEST(KeepRevert, FailuresAreNeverKept) {
  const Verdict inc = pass(100);
  for (Correctness c : {Correctness::FAIL, Correctness::REJECTED, Correctness::TIMEOUT,
                        Correctness::CRASH}) {
    const KeepRevert d = decide(&inc, failed(c));
    EXPECT_FALSE(d.keep) << eval::name_of(c);
    EXPECT_NE(d.reason.find(eval::name_of(c)), std::string::npos);
  }
  EXPECT_FALSE(decide(nullptr, failed(Correctness::FAIL)).keep);
}

TEST(KeepRevert, KeepOnlyOnAtLeastOnePercent) {
  const Verdict inc = pass(100);
  EXPECT_TRUE(decide(&inc, pass(99.0)).keep);    // exactly 1 %
  EXPECT_TRUE(decide(&inc, pass(80.0)).keep);
  EXPECT_FALSE(decide(&inc, pass(99.5)).keep);   // noise, not simpler
  EXPECT_FALSE(decide(&inc, pass(100.5)).keep);
  EXPECT_FALSE(decide(&inc, pass(103.0)).keep);  // worse
  EXPECT_NE(decide(&inc, pass(103.0)).reason.find("worse"), std::string::npos);
}

TEST(KeepRevert, SimplerWinsWithinNoiseOnly) {
  const Verdict inc = pass(100, 100);
  EXPECT_TRUE(decide(&inc, pass(100.5, 90)).keep);   // +0.5 %, fewer tasks
  EXPECT_TRUE(decide(&inc, pass(99.5, 90)).keep);
  EXPECT_FALSE(decide(&inc, pass(101.5, 50)).keep);  // simpler but worse than noise
  Verdict mixed = pass(100.0, 90);
  mixed.simplicity.fusion_groups = 1;  // fewer tasks but one more fusion group: not simpler
  EXPECT_FALSE(decide(&inc, mixed).keep);
}

TEST(KeepRevert, SimplerKeepsCannotRatchetPastTheBest) {
  // The GPU campaign of 2026-11-24 drifted 1231.7 -> 1256.4 us over twelve "within noise and
  // simpler" keeps, each at most 1 % over the one before. Against the best measured, a simpler
  // candidate may only be kept within 1 % of it.
  Verdict inc = pass(100, 100);
  EXPECT_TRUE(decide(&inc, pass(100.8, 90), 100.0).keep);
  inc = pass(100.8, 90);
  const KeepRevert d = decide(&inc, pass(101.6, 80), 100.0);  // +0.8 % on the incumbent, +1.6 % on the best
  EXPECT_FALSE(d.keep);
  EXPECT_NE(d.reason.find("best"), std::string::npos) << d.reason;
  EXPECT_TRUE(decide(&inc, pass(100.5, 80), 100.0).keep);
  // Without a best, the incumbent is the reference (the old rule).
  EXPECT_TRUE(decide(&inc, pass(101.6, 80)).keep);
  // A real improvement is kept whatever the best was.
  EXPECT_TRUE(decide(&inc, pass(99.5, 200), 100.0).keep);
}

TEST(KeepRevert, ASequenceMovesTheIncumbentOnlyOnKeeps) {
  // Baseline FAIL, then the first PASS, then a noise change, an improvement, a crash, a win.
  std::vector<Verdict> seq = {failed(Correctness::FAIL), pass(200), pass(199), pass(190),
                              failed(Correctness::CRASH), pass(150), pass(151)};
  std::optional<Verdict> incumbent;
  std::vector<bool> kept;
  for (const Verdict& v : seq) {
    const KeepRevert d = decide(incumbent ? &*incumbent : nullptr, v);
    kept.push_back(d.keep);
    if (d.keep) incumbent = v;
  }
  EXPECT_EQ(kept, (std::vector<bool>{false, true, false, true, false, true, false}));
  EXPECT_EQ(*incumbent->latency_us, 150);
}

std::filesystem::path temp_file(const char* name) {
  return std::filesystem::temp_directory_path() / (std::string(name) + std::to_string(getpid()));
}

TEST(ResultsTsv, TheHeaderIsExactlyProgramMdSix) {
  // Typed here from PROGRAM.md §6, independently of the writer's constant.
  EXPECT_EQ(std::string(eval::kResultsHeader),
            "experiment\ttag\tloop\tmodel\tgpu\tregime\tkept\tcorrectness\tlatency_us\t"
            "pct_of_roofline\tschedule_or_kernel_id\tdescription");
}

TEST(ResultsTsv, RowsNeverCarryALatencyWithoutAPassAndIdsCountOn) {
  const auto path = temp_file("amk_results_");
  std::filesystem::remove(path);
  eval::ResultsRow row;
  row.tag = "t";
  row.model = "tiny";
  row.gpu = "h100";
  row.correctness = "FAIL";
  row.latency_us = 12.0;  // must not be written
  row.pct_of_roofline = 50;
  row.schedule_id = "sched-1";
  row.description = "tab\there\nnewline";
  row.kept = "revert";
  EXPECT_EQ(eval::append_results_row(path, row), 1);
  row.correctness = "PASS";
  row.kept = "keep";
  EXPECT_EQ(eval::append_results_row(path, row), 2);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(),
            std::string(eval::kResultsHeader) +
                "\n1\tt\t2\ttiny\th100\tsingle-stream\trevert\tFAIL\t\t\tsched-1\ttab here newline\n"
                "2\tt\t2\ttiny\th100\tsingle-stream\tkeep\tPASS\t12.00\t50.0\tsched-1\ttab here "
                "newline\n");
  const auto rows = eval::read_results(path);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_FALSE(rows[0].latency_us);
  EXPECT_EQ(rows[1].latency_us, 12.0);
  std::filesystem::remove(path);
  // A file that is not a results.tsv is never appended to.
  std::ofstream(path) << "something else\n";
  std::string why;
  EXPECT_FALSE(eval::append_results_row(path, row, &why));
  EXPECT_NE(why.find("header"), std::string::npos);
  std::filesystem::remove(path);
}

SearchContext tiny_context() {
  const ModelConfig m = parse_model_config(model_preset_config("tiny", "float32"));
  const GpuTarget& t = *find_target("h100");
  return {m, t, 512, default_schedule_config(m, t, 512)};
}

TEST(Proposer, NeighboursChangeExactlyOneKnobWithinItsRange) {
  const SearchContext ctx = tiny_context();
  const auto nbrs = one_knob_neighbours(ctx.defaults, ctx);
  ASSERT_GT(nbrs.size(), 30u);
  std::set<std::string> ids;
  for (const Proposal& p : nbrs) {
    SCOPED_TRACE(p.change);
    const auto changes = changes_from_default(p.config, ctx.defaults);
    // Removing the split-KV block also drops its head group: still one decision. So does
    // turning the GLU tiles off: silu_mul+gemv takes their place and the gate/up level keeps
    // its tiles (gate_proj and up_proj as wide as a GLU tile's rows).
    EXPECT_GE(changes.size(), 1u);
    if (p.knob == "fusion_grouping.gemv+silu_mul") {
      std::set<std::string> knobs;
      for (const auto& c : changes) knobs.insert(c.knob);
      EXPECT_EQ(knobs, (std::set<std::string>{"fusion_grouping.gemv+silu_mul",
                                              "fusion_grouping.silu_mul+gemv",
                                              "tiling.gate_proj.N_tile", "tiling.up_proj.N_tile"}));
    } else if (p.knob == "fusion_grouping.gemv+add" && changes.size() == 2u) {
      // gemv+add off also drops attention_combine+gemv, which needs it: one decision.
      std::set<std::string> knobs;
      for (const auto& c : changes) knobs.insert(c.knob);
      EXPECT_EQ(knobs, (std::set<std::string>{"fusion_grouping.gemv+add",
                                              "fusion_grouping.attention_combine+gemv"}));
    } else if (p.knob == "tiling.attention.kv_run" && changes.size() == 2u) {
      // Blocks of one 64-key run (the 512 context's default) stride nothing: kv_run 64 comes
      // with kv_block 128, one decision.
      std::set<std::string> knobs;
      for (const auto& c : changes) knobs.insert(c.knob);
      EXPECT_EQ(knobs, (std::set<std::string>{"tiling.attention.kv_block", "tiling.attention.kv_run"}));
    } else {
      EXPECT_EQ(changes.front().knob, p.knob);
    }
    if (p.knob == "fusion_grouping.gemv+add" || p.knob == "tiling.attention.kv_run") {
      EXPECT_LE(changes.size(), 2u);
    } else if (p.knob != "tiling.attention.kv_block" && p.knob != "fusion_grouping.gemv+silu_mul")
      EXPECT_EQ(changes.size(), 1u);
    EXPECT_TRUE(knob_range_problems(p.config, &ctx.target).empty());
    ids.insert(schedule_id(p.config));
  }
  EXPECT_EQ(ids.size(), nbrs.size());  // no duplicates
  EXPECT_EQ(nbrs.front().knob, "pipelining_depth");  // §5B: prefetch depth first
}

// The split-KV block sizes the search proposes: every power of two from 16 whose split of the
// 512-token context the lowering merges (up to 64 blocks with a two-level combine tree), each
// lowering to a validated program; 16 keys (32 blocks) is one only the tree allows.
TEST(Proposer, KvBlockProposalsAreTheSplitsTheLoweringMerges) {
  const SearchContext ctx = tiny_context();
  std::set<std::string> blocks;
  for (const Proposal& p : one_knob_neighbours(ctx.defaults, ctx)) {
    if (p.knob != "tiling.attention.kv_block") continue;
    SCOPED_TRACE(p.change);
    blocks.insert(p.change);
    EXPECT_NO_THROW(lower(ctx.model, p.config, ctx.target, ctx.max_context));
  }
  const int64_t current = integer_knob(ctx.defaults, "tiling.attention.kv_block").value_or(0);
  for (const int64_t b : {16, 32, 64, 128, 256})
    if (b != current)
      EXPECT_TRUE(std::any_of(blocks.begin(), blocks.end(), [&](const std::string& c) {
        return c.find("-> " + std::to_string(b)) != std::string::npos;
      })) << "kv_block " << b << " missing among " << blocks.size() << " proposals";
}

TEST(Proposer, RandomProposalsAreReproducibleFromTheSeed) {
  const SearchContext ctx = tiny_context();
  std::mt19937_64 a(42), b(42);
  EXPECT_EQ(schedule_id(random_point(ctx, a).config), schedule_id(random_point(ctx, b).config));
  EXPECT_EQ(random_mutation(ctx.defaults, ctx, a).change, random_mutation(ctx.defaults, ctx, b).change);
}

CorpusEntry entry(ModelShape shape, std::vector<KnobChange> changes, double speedup) {
  CorpusEntry e;
  e.model = "m";
  e.gpu = "h100";
  e.shape = shape;
  e.changes = std::move(changes);
  e.speedup = speedup;
  e.config_json = "{}";
  return e;
}

TEST(Prior, RanksWhatPaidOffOnTheNearestShapesFirst) {
  const SearchContext ctx = tiny_context();
  const ModelShape query = ModelShape::of(ctx.model);
  ModelShape near = query, far = query;
  near.layers *= 2;                          // distance 1
  far.hidden *= 64, far.intermediate *= 64;  // distance ~8.5
  // Near: depth 2 paid off 1.5x. Far: depth 8 paid off 2x, but on a very different model.
  const SchedulePrior prior({entry(near, {{"pipelining_depth", "2"}}, 1.5),
                             entry(far, {{"pipelining_depth", "8"}}, 2.0)});
  ScheduleConfig two = ctx.defaults, eight = ctx.defaults, six = ctx.defaults;
  two.pipelining_depth = 2;
  eight.pipelining_depth = 8;
  six.pipelining_depth = 6;
  const double s2 = prior.score(two, ctx.defaults, query, "h100");
  const double s8 = prior.score(eight, ctx.defaults, query, "h100");
  EXPECT_GT(s2, s8);
  EXPECT_GT(s8, 0);
  EXPECT_EQ(prior.score(six, ctx.defaults, query, "h100"), 0);  // nothing known about it
  const auto warm = prior.warm_start(query, "h100", ctx.defaults);
  ASSERT_EQ(warm.size(), 2u);
  EXPECT_EQ(warm.front().pipelining_depth, 2);
  // The neighbours are ordered by distance; another GPU is farther.
  EXPECT_EQ(prior.neighbours(query, "h100").front()->shape, near);
  EXPECT_EQ(shape_distance(query, query), 0);
  EXPECT_NEAR(shape_distance(query, near), 1.0, 1e-12);
}

TEST(Prior, ChangesMoveTilesByTheirFactorOntoAnotherShape) {
  ScheduleConfig from_default, from;
  set_integer_knob(from_default, "tiling.q_proj.N_tile", 8);
  from = from_default;
  set_integer_knob(from, "tiling.q_proj.N_tile", 16);
  const auto changes = changes_from_default(from, from_default);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].value, "x2");
  ScheduleConfig other_default;
  set_integer_knob(other_default, "tiling.q_proj.N_tile", 32);
  EXPECT_EQ(integer_knob(apply_changes(other_default, changes), "tiling.q_proj.N_tile"), 64);
}

TEST(Prior, CorpusLinesRoundTripAndBadLinesAreSkipped) {
  const auto path = temp_file("amk_corpus_");
  std::filesystem::remove(path);
  CorpusEntry e = entry(ModelShape{64, 128, 2, 4, 2, 16, 256}, {{"pipelining_depth", "2"}}, 1.2);
  e.config_json = "{\"pipelining_depth\": 2}";
  ASSERT_TRUE(append_corpus(path, e));
  std::ofstream(path, std::ios::app) << "not json\n";
  ASSERT_TRUE(append_corpus(path, e));
  const auto back = load_corpus(path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].shape, e.shape);
  EXPECT_EQ(back[0].changes, e.changes);
  EXPECT_DOUBLE_EQ(back[0].speedup, 1.2);
  std::filesystem::remove(path);
}

TEST(WorkerHooks, InjectedFaultsAreKeyedByExperiment) {
  EXPECT_EQ(injected_fault(nullptr, 3), InjectedFault::None);
  EXPECT_EQ(injected_fault("hang@3,crash@5,fail@7,reject@9", 3), InjectedFault::Hang);
  EXPECT_EQ(injected_fault("hang@3,crash@5,fail@7,reject@9", 5), InjectedFault::Crash);
  EXPECT_EQ(injected_fault("hang@3,crash@5,fail@7,reject@9", 7), InjectedFault::Fail);
  EXPECT_EQ(injected_fault("hang@3,crash@5,fail@7,reject@9", 9), InjectedFault::Reject);
  EXPECT_EQ(injected_fault("hang@3,crash@x,bogus", 4), InjectedFault::None);
}

CampaignStatus status(int64_t reverts, std::optional<double> baseline, std::optional<double> best,
                      double floor_us) {
  CampaignStatus s;
  s.state.consecutive_reverts = reverts;
  s.baseline_us = baseline;
  s.best_us = best;
  s.floor_us = floor_us;
  if (baseline && best) s.speedup = *baseline / *best;
  return s;
}

TEST(CampaignNext, StopsOnEachMoveOnCriterion) {
  EXPECT_FALSE(campaign_next(status(7, 100, 90, 10)).stop);
  EXPECT_TRUE(campaign_next(status(8, 100, 90, 10)).stop);   // plateau
  EXPECT_TRUE(campaign_next(status(0, 20, 10.9, 10)).stop);  // within 10 % of the floor
  EXPECT_FALSE(campaign_next(status(0, 20, 11.2, 10)).stop);
  EXPECT_TRUE(campaign_next(status(0, 100, 33, 1)).stop);     // >= 3x the baseline
  CampaignStatus timed = status(0, 100, 90, 10);
  timed.state.minutes_budget = 1;
  timed.state.elapsed_s = 61;
  EXPECT_TRUE(campaign_next(timed).stop);
  timed.state.elapsed_s = 30;
  EXPECT_FALSE(campaign_next(timed).stop);
  const NextAdvice plateau = campaign_next(status(9, 100, 90, 10));
  EXPECT_NE(plateau.reasons.front().find("plateau"), std::string::npos);
}

}  // namespace
}  // namespace amk::search
