// ScheduleConfig.fusion_grouping: each group changes the lowered program (its fused opcode in,
// the tasks and counters it removes out), still validates, and decodes to the unfused logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/decoder.h"
#include "amk/lowering.h"
#include "amk/oracle.h"
#include "amk/validate.h"

namespace {

using namespace amk;

const std::filesystem::path kFixtures = std::filesystem::path(AMK_TESTDATA_DIR) / "fixtures";
const GpuTarget& h100() { return *find_target("h100"); }
constexpr int64_t kContext = 12;

// validate() proves the program and warns about nothing; otherwise its report.
::testing::AssertionResult valid_without_warnings(const Program& p) {
  const ValidationResult v = validate(p);
  if (v.ok && v.warnings.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << v.report();
}

int64_t count_op(const Program& p, Op op) {
  return std::count_if(p.tasks.begin(), p.tasks.end(), [&](const Task& t) { return t.op == op; });
}

// max |got - want| / max |want| over one step's logits; +inf where `got` has a NaN or an inf.
double relative_gap(const std::vector<float>& want, const std::vector<float>& got) {
  double diff = 0, scale = 0;
  for (size_t j = 0; j < want.size() && j < got.size(); ++j) {
    if (!std::isfinite(got[j])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, double(std::fabs(want[j] - got[j])));
    scale = std::max(scale, double(std::fabs(want[j])));
  }
  return diff / scale;
}

// Decodes the fixture's sequence teacher-forced with both programs; every position's logits of
// `b` within 1e-5 (relative_gap) of `a`'s. Returns the largest gap.
double expect_teacher_forced_within(const Checkpoint& ck, const ExpectedOutputs& e,
                                    const Program& a_prog, const Program& b_prog) {
  ReferenceDecoder a(ck, a_prog), b(ck, b_prog);
  double widest = 0;
  for (int64_t i = 0; i < kContext; ++i) {
    const std::vector<float> la = a.step(e.sequence_ids[size_t(i)]);
    const std::vector<float> lb = b.step(e.sequence_ids[size_t(i)]);
    EXPECT_EQ(la.size(), lb.size()) << "position " << i;
    const double gap = relative_gap(la, lb);
    EXPECT_LE(gap, 1e-5) << "position " << i;
    widest = std::max(widest, gap);
  }
  return widest;
}

using Groups = std::vector<std::vector<std::string>>;

int64_t buffer_id(const Program& p, std::string_view name) {
  for (const Buffer& b : p.buffers)
    if (b.name == name) return b.id;
  return -1;
}

// Sets int param `key` of the task labelled `label`; false when the program has no such task.
bool set_task_param(Program& p, const std::string& label, const std::string& key, int64_t value) {
  for (Task& t : p.tasks)
    if (t.label == label) {
      t.params.set_int(key, value);
      return true;
    }
  return false;
}

ScheduleConfig with(const Groups& groups) {
  ScheduleConfig c;
  c.tiling = {{"gemv", {{"N_tile", 24}}}};  // several tiles per projection
  c.fusion_grouping = groups;
  return c;
}

// What a fusion must change: the fused op appears `fused` times (per the unfused program's
// tiles), and `removed` tasks and counters disappear with `gone` (the op it folds in).
struct Expect {
  Groups groups;
  Op fused;
  Op gone;
  int64_t gone_left;  // how many `gone` tasks stay (per layer count resolved in the test)
  int64_t removed;
  int64_t removed_counters = -1;  // -1: as many as tasks
};

std::vector<Expect> expectations(const ModelConfig& m) {
  const int64_t L = m.num_hidden_layers;
  const int64_t head_norms = m.qk_norm ? 2 * L : 0;  // Qwen3's q/k norms are not GEMV inputs
  // [gemv, silu_mul]: a layer's gate tiles and up tiles (24 rows each) become as many GLU tiles
  // as there were gate tiles (24 features each), and the SILU_MUL task goes; of the counters,
  // gate's, up's and SILU_MUL's leave one.
  const int64_t glu_tiles = (m.intermediate_size + 23) / 24;
  return {
      {{{"rmsnorm", "gemv"}}, Op::RMSNORM_GEMV_TILE, Op::RMSNORM, head_norms, 2 * L + 1},
      {{{"silu_mul", "gemv"}}, Op::SILU_MUL_GEMV_TILE, Op::SILU_MUL, 0, L},
      {{{"gemv", "add"}}, Op::GEMV_ADD_TILE, Op::ADD, 0, 2 * L},
      // silu_mul and add together: down_proj is SILU_MUL_GEMV_ADD_TILE, no ADD and no SILU_MUL.
      {{{"silu_mul", "gemv"}, {"gemv", "add"}}, Op::SILU_MUL_GEMV_ADD_TILE, Op::ADD, 0, L + 2 * L},
      // All three.
      {{{"rmsnorm", "gemv"}, {"silu_mul", "gemv"}, {"gemv", "add"}}, Op::GEMV_ADD_TILE, Op::ADD,
       0, (2 * L + 1) + L + 2 * L},
      // The attention prologue: rope_q, rope_k and both KV_APPENDs go, and for Qwen3 also the
      // two heads COPYs and the two per-head RMSNORMs.
      {{{"rope", "attention"}}, Op::ROPE_KV_ATTENTION_TILE, Op::KV_APPEND, 0,
       4 * L + (m.qk_norm ? 4 * L : 0)},
      {{{"gemv", "silu_mul"}}, Op::GEMV_GLU_TILE, Op::SILU_MUL, 0, (glu_tiles + 1) * L, 2 * L},
      // With the norm folded in too: RMSNORM_GEMV_GLU_TILE, and the norm tasks go.
      {{{"gemv", "silu_mul"}, {"rmsnorm", "gemv"}}, Op::RMSNORM_GEMV_GLU_TILE, Op::SILU_MUL, 0,
       (glu_tiles + 1) * L + 2 * L + 1, 2 * L + 2 * L + 1},
      // The derived default's set: down_proj is a plain GEMV_ADD_TILE of the GLU tiles' output.
      {{{"rmsnorm", "gemv"}, {"gemv", "silu_mul"}, {"gemv", "add"}, {"rope", "attention"}},
       Op::RMSNORM_GEMV_GLU_TILE, Op::ADD, 0,
       (2 * L + 1) + (glu_tiles + 1) * L + 2 * L + 4 * L + (m.qk_norm ? 4 * L : 0),
       (2 * L + 1) + 2 * L + 2 * L + 4 * L + (m.qk_norm ? 4 * L : 0)},
  };
}

class Fusion : public ::testing::TestWithParam<const char*> {};

TEST_P(Fusion, ChangesTheProgramAndKeepsTheLogits) {
  const std::string name = GetParam();
  const Checkpoint ck = Checkpoint::open(kFixtures / name);
  const ExpectedOutputs e = load_expected(kFixtures / name / "expected.safetensors");
  const Program base = lower(ck.config(), with({}), h100(), kContext);
  for (const Expect& x : expectations(ck.config())) {
    SCOPED_TRACE(name + " fusing " + std::to_string(x.groups.size()) + " group(s), first [" +
                 x.groups[0][0] + ", " + x.groups[0][1] + "]");
    const Program p = lower(ck.config(), with(x.groups), h100(), kContext);
    EXPECT_TRUE(valid_without_warnings(p));
    EXPECT_EQ(count_op(base, x.fused), 0);
    EXPECT_GT(count_op(p, x.fused), 0);
    EXPECT_EQ(count_op(p, x.gone), x.gone_left);
    EXPECT_EQ(base.tasks.size() - p.tasks.size(), size_t(x.removed));
    EXPECT_EQ(base.counters.size() - p.counters.size(),
              size_t(x.removed_counters >= 0 ? x.removed_counters : x.removed));

    // Teacher-forced decode: the fused program's logits are the unfused one's.
    ReferenceDecoder a(ck, base), b(ck, p);
    for (int64_t i = 0; i < kContext; ++i) {
      const std::vector<float> la = a.step(e.sequence_ids[size_t(i)]);
      const std::vector<float> lb = b.step(e.sequence_ids[size_t(i)]);
      EXPECT_LE(relative_gap(la, lb), 1e-5) << "position " << i;
      // Stronger than asked: the fused ops run the unfused ops' code on the same F32
      // intermediates, so the reference VM's logits agree bit for bit.
      EXPECT_EQ(la, lb) << "position " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fusion, ::testing::Values("tiny-llama", "tiny-qwen3"));

// [gemv, silu_mul] leaves [silu_mul, gemv] nothing to fuse and shares its tiles between gate
// and up: both that pairing and an up_proj width are refused, naming the knob.
TEST(Fusion, GluRefusesWhatWouldChangeNothing) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  const auto error = [&](const ScheduleConfig& c) {
    try {
      (void)lower(ck.config(), c, h100(), kContext);
    } catch (const LoweringError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error(with({{"gemv", "silu_mul"}, {"silu_mul", "gemv"}})).find("nothing to fuse"),
            std::string::npos);
  ScheduleConfig up = with({{"gemv", "silu_mul"}});
  up.tiling.push_back({"up_proj", {{"N_tile", 8}}});
  EXPECT_NE(error(up).find("tiling.up_proj"), std::string::npos);
  up.fusion_grouping.clear();
  EXPECT_EQ(error(up), "");  // without the group, up_proj is a knob again
  // tiling.gate_proj sets the GLU tiles' width in features: 8 features -> ceil(F / 8) tiles.
  ScheduleConfig gate = with({{"gemv", "silu_mul"}});
  gate.tiling.push_back({"gate_proj", {{"N_tile", 8}}});
  const Program p = lower(ck.config(), gate, h100(), kContext);
  EXPECT_EQ(count_op(p, Op::GEMV_GLU_TILE),
            (ck.config().intermediate_size + 7) / 8 * ck.config().num_hidden_layers);
}

// The fused attention split by KV block and by KV head (one counter per head group, so the
// caches have writers under several counters whose rows/heads are disjoint): the program
// validates, no unfused attention op is left, and the logits equal the unfused program's at
// positions inside, at and past block boundaries.
class FusedAttentionSplit : public ::testing::TestWithParam<const char*> {};

TEST_P(FusedAttentionSplit, KeepsTheLogitsAcrossBlocks) {
  const std::string name = GetParam();
  const Checkpoint ck = Checkpoint::open(kFixtures / name);
  const ExpectedOutputs e = load_expected(kFixtures / name / "expected.safetensors");
  ScheduleConfig plain = with({{"rmsnorm", "gemv"}, {"silu_mul", "gemv"}, {"gemv", "add"}});
  plain.tiling.push_back({"attention", {{"kv_block", 4}, {"kv_heads", 1}}});
  ScheduleConfig fused = plain;
  fused.fusion_grouping.push_back({"rope", "attention"});
  const Program a_prog = lower(ck.config(), plain, h100(), kContext);
  const Program b_prog = lower(ck.config(), fused, h100(), kContext);
  ASSERT_TRUE(valid_without_warnings(b_prog));
  EXPECT_EQ(count_op(b_prog, Op::ATTENTION_TILE), 0);
  EXPECT_EQ(count_op(b_prog, Op::ROPE) + count_op(b_prog, Op::ROPE_FREQ), 0);
  EXPECT_EQ(count_op(b_prog, Op::COPY), 0);
  // 3 blocks of 4 keys x 2 KV heads a layer.
  EXPECT_EQ(count_op(b_prog, Op::ROPE_KV_ATTENTION_TILE), 6 * ck.config().num_hidden_layers);
  ReferenceDecoder a(ck, a_prog), b(ck, b_prog);
  for (int64_t i = 0; i < kContext; ++i) {
    const std::vector<float> la = a.step(e.sequence_ids[size_t(i)]);
    const std::vector<float> lb = b.step(e.sequence_ids[size_t(i)]);
    ASSERT_EQ(la.size(), lb.size());
    for (size_t j = 0; j < la.size(); ++j) ASSERT_TRUE(std::isfinite(lb[j])) << "position " << i;
    EXPECT_EQ(la, lb) << "position " << i;
  }
  // Late positions through seek(): the same seeded cache on both sides. Against the unsplit,
  // unfused program too (another summation order: a bound, not bit equality), and a
  // different seed must change the logits (the seeded state is really read).
  const Program whole = lower(ck.config(), with({}), h100(), kContext);
  ReferenceDecoder c(ck, whole);
  const int64_t token = e.sequence_ids[0];
  for (int64_t position : {5, 9, 11}) {
    a.seek(position, 42);
    b.seek(position, 42);
    c.seek(position, 42);
    const std::vector<float> la = a.step(token), lb = b.step(token), lc = c.step(token);
    EXPECT_EQ(la, lb) << "position " << position;
    EXPECT_LE(relative_gap(lc, lb), 1e-5) << "position " << position;
    b.seek(position, 43);
    EXPECT_NE(b.step(token), lb) << "position " << position;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FusedAttentionSplit,
                         ::testing::Values("tiny-llama", "tiny-qwen3"));

// The rule that admits the split: writers of one buffer under different counters are fine when
// their regions are disjoint, and still a WAW race when two windows overlap.
TEST(FusedAttentionSplit, OverlappingWindowsUnderTwoCountersAreAWawRace) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  ScheduleConfig c = with({{"rope", "attention"}});
  c.tiling.push_back({"attention", {{"kv_block", 4}, {"kv_heads", 1}}});
  Program p = lower(ck.config(), c, h100(), kContext);
  ASSERT_TRUE(validate(p).ok);
  // Head group 1's first block of layer 0 now claims head group 0's columns: its window
  // [0, 4) overlaps group 0's block 0, under another counter.
  ASSERT_TRUE(set_task_param(p, "L0.attention[h1][kv0]", "n_off", 0));
  const ValidationResult v = validate(p);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.report().find("WAW race"), std::string::npos) << v.report();
}

// [attention_combine, gemv]: the block tasks write slabs of one stack of partials and the o_proj
// tiles merge it, so no ATTENTION_COMBINE and no attention row remain; the logits stay within
// fp32 noise of the combine's program (the merge is the same arithmetic, in another order)
// at positions inside, at and past block boundaries, with the plain and the fused attention.
TEST_P(FusedAttentionSplit, OprojMergesThePartials) {
  const std::string name = GetParam();
  const Checkpoint ck = Checkpoint::open(kFixtures / name);
  const ExpectedOutputs e = load_expected(kFixtures / name / "expected.safetensors");
  for (bool rope_attention : {false, true}) {
    SCOPED_TRACE(rope_attention ? "fused attention" : "plain attention");
    ScheduleConfig plain = with({{"rmsnorm", "gemv"}, {"silu_mul", "gemv"}, {"gemv", "add"}});
    if (rope_attention) plain.fusion_grouping.push_back({"rope", "attention"});
    plain.tiling.push_back({"attention", {{"kv_block", 4}, {"kv_heads", 1}}});
    ScheduleConfig merged = plain;
    merged.fusion_grouping.push_back({"attention_combine", "gemv"});
    const Program a_prog = lower(ck.config(), plain, h100(), kContext);
    const Program b_prog = lower(ck.config(), merged, h100(), kContext);
    ASSERT_TRUE(valid_without_warnings(b_prog));
    const int64_t layers = ck.config().num_hidden_layers;
    EXPECT_EQ(count_op(b_prog, Op::ATTENTION_COMBINE), 0);
    EXPECT_GT(count_op(a_prog, Op::ATTENTION_COMBINE), 0);
    // o_proj is the only GEMV_ADD_TILE here (down_proj is SILU_MUL_GEMV_ADD_TILE): every one
    // of its tiles becomes a COMBINE_GEMV_ADD_TILE.
    EXPECT_EQ(count_op(b_prog, Op::GEMV_ADD_TILE), 0);
    EXPECT_EQ(count_op(b_prog, Op::COMBINE_GEMV_ADD_TILE), count_op(a_prog, Op::GEMV_ADD_TILE));
    EXPECT_EQ(count_op(b_prog, Op::COMBINE_GEMV_ADD_TILE) % layers, 0);
    expect_teacher_forced_within(ck, e, a_prog, b_prog);
  }
}

// Strided blocks (tiling.attention.kv_run 2 of kv_block 4 at 12 keys: block b holds positions
// 2b, 2b + 1, 2b + 6, 2b + 7): the program validates, each block task carries the window's
// stride, and the logits stay within fp32 noise of the contiguous blocks' program (the same
// keys, merged in another grouping) at every position, with the plain and the fused attention,
// merged by ATTENTION_COMBINE or by o_proj.
TEST_P(FusedAttentionSplit, StridedBlocksKeepTheLogits) {
  const std::string name = GetParam();
  const Checkpoint ck = Checkpoint::open(kFixtures / name);
  const ExpectedOutputs e = load_expected(kFixtures / name / "expected.safetensors");
  for (bool rope_attention : {false, true})
    for (bool merge_in_oproj : {false, true}) {
      SCOPED_TRACE(std::string(rope_attention ? "fused" : "plain") + " attention, " +
                   (merge_in_oproj ? "o_proj merges" : "combine"));
      ScheduleConfig contiguous = with({{"rmsnorm", "gemv"}, {"silu_mul", "gemv"}, {"gemv", "add"}});
      if (rope_attention) contiguous.fusion_grouping.push_back({"rope", "attention"});
      if (merge_in_oproj) contiguous.fusion_grouping.push_back({"attention_combine", "gemv"});
      ScheduleConfig strided = contiguous;
      contiguous.tiling.push_back({"attention", {{"kv_block", 4}, {"kv_heads", 1}}});
      strided.tiling.push_back({"attention", {{"kv_block", 4}, {"kv_heads", 1}, {"kv_run", 2}}});
      const Program a_prog = lower(ck.config(), contiguous, h100(), kContext);
      const Program b_prog = lower(ck.config(), strided, h100(), kContext);
      ASSERT_TRUE(valid_without_warnings(b_prog));
      int64_t strided_tasks = 0;
      for (const Task& t : b_prog.tasks)
        if (t.op == Op::ATTENTION_TILE || t.op == Op::ROPE_KV_ATTENTION_TILE) {
          EXPECT_EQ(t.params.get_int("kv_stride", 0), 6) << t.label;
          EXPECT_EQ(t.params.get_int("kv_len", 0), 2) << t.label;
          ++strided_tasks;
        }
      EXPECT_EQ(strided_tasks, 3 * ck.config().num_key_value_heads * ck.config().num_hidden_layers);
      expect_teacher_forced_within(ck, e, a_prog, b_prog);
    }
}

// The strided runs are what keeps the fused attention's cache writes race-free: a block moved
// onto another block's runs (one counter for all of a head group's blocks) is reported, and a
// stride shorter than a run is refused by the param check.
TEST(FusedAttentionSplit, OverlappingStridedRunsAreReported) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  ScheduleConfig c = with({{"rope", "attention"}});
  c.tiling.push_back({"attention", {{"kv_block", 4}, {"kv_heads", 1}, {"kv_run", 2}}});
  const Program good = lower(ck.config(), c, h100(), kContext);
  ASSERT_TRUE(validate(good).ok) << validate(good).report();
    // Block 1's runs [2, 4) and [8, 10) moved to [6, 8) and [12, ...): its second run would pass
  // the cache, so it has one run, [6, 8), block 0's second.
  Program shifted = good;
  ASSERT_TRUE(set_task_param(shifted, "L0.attention[h0][kv1]", "kv_start", 6));
  const ValidationResult v = validate(shifted);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.report().find("WAW race on buffer #13 ('layers.0.k_cache'): writers 9 "
                            "(L0.attention[h0][kv0]) and 10 (L0.attention[h0][kv1])"),
            std::string::npos)
      << v.report();
  // Runs of 2 every 1 position would overlap themselves.
  Program short_stride = good;
  ASSERT_TRUE(set_task_param(short_stride, "L0.attention[h0][kv1]", "kv_stride", 1));
  const ValidationResult w = validate(short_stride);
  EXPECT_FALSE(w.ok);
  EXPECT_NE(w.report().find("kv_stride 1"), std::string::npos) << w.report();
}

// kv_run needs a split it divides, and a split that divides the context.
TEST(FusedAttentionSplit, KvRunOutsideItsRangeIsNamed) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  const auto error = [&](int64_t block, int64_t run) {
    ScheduleConfig c = with({});
    c.tiling.push_back({"attention", {{"kv_block", block}, {"kv_run", run}}});
    try {
      lower(ck.config(), c, h100(), kContext);
    } catch (const LoweringError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(4, 2), "");
  EXPECT_NE(error(4, 3).find("tiling.attention.kv_run 3"), std::string::npos);   // 3 does not divide 4
  EXPECT_NE(error(5, 5).find("tiling.attention.kv_run 5"), std::string::npos);   // 5 does not divide 12
  EXPECT_NE(error(12, 4).find("tiling.attention.kv_run 4"), std::string::npos);  // one block
  ScheduleConfig no_block = with({});
  no_block.tiling.push_back({"attention", {{"kv_heads", 1}, {"kv_run", 2}}});
  EXPECT_THROW(lower(ck.config(), no_block, h100(), kContext), LoweringError);
}

// The block tasks' slabs of the stack are what keeps them race-free under one counter: two
// tasks claiming one slab's rows are reported.
TEST(FusedAttentionSplit, TwoBlocksOnOneSlabOfTheStackAreAReportedOverlap) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  ScheduleConfig c = with({{"gemv", "add"}, {"attention_combine", "gemv"}});
  c.tiling.push_back({"attention", {{"kv_block", 4}, {"kv_heads", 1}}});
  Program p = lower(ck.config(), c, h100(), kContext);
  ASSERT_TRUE(validate(p).ok);
  // Block 0's slab, which L0.attention[h1][kv0] writes.
  ASSERT_TRUE(set_task_param(p, "L0.attention[h1][kv1]", "m_off", 0));
  const ValidationResult v = validate(p);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.report().find("L0.attn_partials"), std::string::npos) << v.report();
}

// validate() checks the merge's params on the program, before any VM runs it.
TEST(FusedAttentionSplit, BadMergeParamsAreNamedByTheValidator) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  ScheduleConfig c = with({{"gemv", "add"}, {"attention_combine", "gemv"}});
  c.tiling.push_back({"attention", {{"kv_block", 4}, {"kv_heads", 1}}});
  const Program good = lower(ck.config(), c, h100(), kContext);
  ASSERT_TRUE(validate(good).ok);
  const auto report_with = [&](const std::string& label, const std::string& key, int64_t value) {
    Program p = good;
    EXPECT_TRUE(set_task_param(p, label, key, value)) << label;
    const ValidationResult v = validate(p);
    EXPECT_FALSE(v.ok) << key;
    return v.report();
  };
  EXPECT_NE(report_with("L0.o_proj[t0]", "n_heads", 3).find("within n_heads 3"),
            std::string::npos);
  EXPECT_NE(report_with("L0.o_proj[t0]", "flags", 1).find("unknown bits"), std::string::npos);
  EXPECT_NE(report_with("L0.o_proj[t0]", "kv_len", 0).find("kv_len"), std::string::npos);
  // A block task's slab past the stack.
  EXPECT_NE(report_with("L0.attention[h0][kv0]", "m_off", 99).find("is not a slab of output 0"),
            std::string::npos);
  // The stack is F32 (the CUDA merge reads floats).
  Program bf16 = good;
  for (Buffer& b : bf16.buffers)
    if (b.name == "L0.attn_partials") b.dtype = DType::BF16;
  const ValidationResult v = validate(bf16);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.report().find("input 0 (partials)"), std::string::npos) << v.report();
  EXPECT_NE(v.report().find("is BF16, not F32"), std::string::npos) << v.report();
}

// [gemv, silu_mul, gemv]: each GLU tile multiplies its features by their columns of down_proj
// and adds the row into the layer's output (RMSNORM_GEMV_GLU_DOWN_TILE), which o_proj's tiles
// initialise with a second copy of their output; the down level goes. The logits stay within
// fp32 noise of the down level's program (the same products, summed tile by tile), with and
// without the split-KV merge in o_proj.
TEST_P(FusedAttentionSplit, MlpTilesAddTheDownProjection) {
  const std::string name = GetParam();
  const Checkpoint ck = Checkpoint::open(kFixtures / name);
  const ExpectedOutputs e = load_expected(kFixtures / name / "expected.safetensors");
  for (bool combine : {false, true}) {
    SCOPED_TRACE(combine ? "o_proj merges the partials" : "combine level");
    ScheduleConfig plain =
        with({{"rmsnorm", "gemv"}, {"gemv", "silu_mul"}, {"gemv", "add"}, {"rope", "attention"}});
    plain.tiling.push_back({"attention", {{"kv_block", 4}, {"kv_heads", 1}}});
    if (combine) plain.fusion_grouping.push_back({"attention_combine", "gemv"});
    ScheduleConfig fused = plain;
    fused.fusion_grouping.push_back({"gemv", "silu_mul", "gemv"});
    const Program a_prog = lower(ck.config(), plain, h100(), kContext);
    const Program b_prog = lower(ck.config(), fused, h100(), kContext);
    ASSERT_TRUE(valid_without_warnings(b_prog));
    const int64_t layers = ck.config().num_hidden_layers;
    const int64_t glu_tiles = count_op(a_prog, Op::RMSNORM_GEMV_GLU_TILE);
    EXPECT_EQ(count_op(b_prog, Op::RMSNORM_GEMV_GLU_TILE), 0);
    EXPECT_EQ(count_op(b_prog, Op::RMSNORM_GEMV_GLU_DOWN_TILE), glu_tiles);
    // down_proj's tiles (the GEMV_ADD_TILEs but o_proj's) are gone, and o_proj's write twice.
    const Op o_op = combine ? Op::COMBINE_GEMV_ADD_TILE : Op::GEMV_ADD_TILE;
    int64_t copies = 0;
    for (const Task& t : b_prog.tasks) copies += t.op == o_op && t.outputs.size() == 2;
    EXPECT_EQ(copies, count_op(b_prog, o_op));
    const int64_t o_tiles = std::count_if(a_prog.tasks.begin(), a_prog.tasks.end(), [](const Task& t) {
      return t.label.find(".o_proj[") != std::string::npos;
    });
    EXPECT_EQ(count_op(b_prog, Op::GEMV_ADD_TILE) + count_op(b_prog, Op::COMBINE_GEMV_ADD_TILE), o_tiles);
    EXPECT_EQ(b_prog.counters.size() + size_t(layers), a_prog.counters.size());
    // The sums run in another order: not the same program.
    EXPECT_GT(expect_teacher_forced_within(ck, e, a_prog, b_prog), 0.0);
  }
}

// tiling.attention.qkv_by_group: q/k/v's tiles per head group, each group's rows under one
// counter, and each attention task waiting for its own group's counter alone. The program
// validates (the attention reads only its heads' columns of q, k and v), every attention
// task's one q/k/v wait is its group's, and the logits are the per-projection program's exactly
// (the same rows, computed alike), for every way the attention is split.
TEST_P(FusedAttentionSplit, QkvByGroupWaitsForItsOwnHeads) {
  const std::string name = GetParam();
  const Checkpoint ck = Checkpoint::open(kFixtures / name);
  const ExpectedOutputs e = load_expected(kFixtures / name / "expected.safetensors");
  const ModelConfig& m = ck.config();
  struct Split {
    const char* what;
    ScheduleConfig::TileSizes attention;
    bool merge_in_oproj;
    int64_t groups;
  };
  const Split splits[] = {
      {"split by block and head, o_proj merges", {{"kv_block", 4}, {"kv_heads", 1}}, true, 2},
      {"split by block and head, combines", {{"kv_block", 4}, {"kv_heads", 1}}, false, 2},
      {"one task a head", {{"kv_heads", 1}}, false, 2},
      {"split by block, every head a task", {{"kv_block", 4}}, false, 1},
      {"one task", {}, false, 1},
  };
  for (const Split& split : splits) {
    SCOPED_TRACE(split.what);
    ScheduleConfig plain =
        with({{"rmsnorm", "gemv"}, {"gemv", "silu_mul"}, {"gemv", "add"}, {"rope", "attention"}});
    plain.tiling.push_back({"attention", split.attention});
    if (split.merge_in_oproj) plain.fusion_grouping.push_back({"attention_combine", "gemv"});
    ScheduleConfig grouped = plain;
    grouped.tiling.back().second.push_back({"qkv_by_group", 1});
    if (split.attention.empty()) plain.tiling.pop_back();  // an empty attention dict is refused
    const Program a_prog = lower(m, plain, h100(), kContext);
    const Program b_prog = lower(m, grouped, h100(), kContext);
    ASSERT_TRUE(valid_without_warnings(b_prog));
    // Which counter each q/k/v tile of layer 0 signals, by the group of the rows it writes.
    const int64_t q_rows = m.num_attention_heads / split.groups * m.head_dim;
    const int64_t kv_rows = m.num_key_value_heads / split.groups * m.head_dim;
    std::map<int64_t, int64_t> group_counter;  // group -> counter
    std::map<int64_t, int64_t> tiles_of;        // counter -> tiles
    for (const Task& t : b_prog.tasks) {
      if (!t.label.starts_with("L0.") || t.op != Op::RMSNORM_GEMV_TILE) continue;
      const bool is_q = t.label.starts_with("L0.q_proj"), is_kv = t.label.starts_with("L0.k_proj") ||
                                                                   t.label.starts_with("L0.v_proj");
      if (!is_q && !is_kv) continue;
      const int64_t off = t.params.get_int("n_off", -1), width = t.params.get_int("N_tile", -1);
      const int64_t rows = is_q ? q_rows : kv_rows, gi = off / rows;
      EXPECT_EQ((off + width - 1) / rows, gi) << t.label << ": a tile across two head groups";
      const auto [it, fresh] = group_counter.emplace(gi, t.out_counter);
      EXPECT_EQ(it->second, t.out_counter) << t.label << ": group " << gi << " under two counters";
      ++tiles_of[t.out_counter];
    }
    ASSERT_EQ(int64_t(group_counter.size()), split.groups);
    // Each layer-0 attention task waits for one q/k/v counter: its group's, all its tiles.
    int64_t attention_tasks = 0;
    for (const Task& t : b_prog.tasks) {
      if (!t.label.starts_with("L0.") || t.op != Op::ROPE_KV_ATTENTION_TILE) continue;
      ++attention_tasks;
      const int64_t gi = t.params.get_int("n_off", 0) * m.head_dim / q_rows;
      ASSERT_EQ(t.waits.size(), 1u) << t.label;
      EXPECT_EQ(t.waits[0].counter, group_counter.at(gi)) << t.label;
      EXPECT_EQ(t.waits[0].threshold, tiles_of.at(group_counter.at(gi))) << t.label;
    }
    EXPECT_GT(attention_tasks, 0);
    EXPECT_NE(a_prog.counters.size(), b_prog.counters.size());
    ReferenceDecoder a(ck, a_prog), b(ck, b_prog);
    for (int64_t i = 0; i < kContext; ++i) {
      const std::vector<float> la = a.step(e.sequence_ids[size_t(i)]);
      const std::vector<float> lb = b.step(e.sequence_ids[size_t(i)]);
      for (const float x : lb) ASSERT_TRUE(std::isfinite(x)) << "position " << i;
      ASSERT_EQ(la, lb) << "position " << i;
    }
    if (split.groups < 2) continue;
    // Group 1's first attention task made to wait for group 0's q/k/v instead: it reads rows no
    // wait orders before it, which the race check names.
    Program broken = b_prog;
    for (Task& t : broken.tasks)
      if (t.label.starts_with("L0.attention[h1]")) {
        t.waits[0] = Wait{group_counter.at(0), tiles_of.at(group_counter.at(0))};
        break;
      }
    const ValidationResult v = validate(broken);
    EXPECT_FALSE(v.ok);
    EXPECT_NE(v.report().find("reads buffer #" + std::to_string(buffer_id(b_prog, "L0.q")) +
                              " ('L0.q') but writer task(s)"),
              std::string::npos)
        << v.report();
  }
}

TEST(FusedAttentionSplit, QkvByGroupIsCheckedAndNeedsTheFusedAttention) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  ScheduleConfig c = with({{"rmsnorm", "gemv"}});
  c.tiling.push_back({"attention", {{"kv_heads", 1}, {"qkv_by_group", 1}}});
  const auto error = [&](const ScheduleConfig& config) -> std::string {
    try {
      lower(ck.config(), config, h100(), kContext);
    } catch (const LoweringError& e) {
      return e.what();
    }
    return "<no error>";
  };
  EXPECT_NE(error(c).find("qkv_by_group needs fusion group [rope, attention]"), std::string::npos)
      << error(c);
  c.fusion_grouping.push_back({"rope", "attention"});
  EXPECT_EQ(error(c), "<no error>");
  c.tiling.back().second.back().second = 2;
  EXPECT_NE(error(c).find("tiling.attention.qkv_by_group must be <= 1, got 2"), std::string::npos)
      << error(c);
  // With a bias on q/k/v (as Qwen2 has), each tile carries its rows' bias.
  ModelConfig biased = ck.config();
  biased.attention_qkv_bias = true;
  c.tiling.back().second.back().second = 1;
  const Program p = lower(biased, c, h100(), kContext, DType::BF16);
  ASSERT_TRUE(valid_without_warnings(p));
  int64_t with_bias = 0;
  for (const Task& t : p.tasks)
    with_bias += t.op == Op::RMSNORM_GEMV_TILE && t.inputs.size() == 4 &&
                 p.buffers[size_t(t.inputs[3])].source->ends_with("_proj.bias");
  EXPECT_GT(with_bias, 0);
}

// The accumulation rule (docs/IR.md): what validate() refuses about the MLP tiles' adds.
TEST(FusionGrouping, TheAccumulationRuleIsProvedAndItsBreachesNamed) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  ScheduleConfig c =
      with({{"rmsnorm", "gemv"}, {"gemv", "silu_mul"}, {"gemv", "add"}, {"gemv", "silu_mul", "gemv"}});
  const Program good = lower(ck.config(), c, h100(), kContext);
  ASSERT_TRUE(validate(good).ok) << validate(good).report();
  const auto find = [](Program& p, const std::string& label) -> Task& {
    for (Task& t : p.tasks)
      if (t.label == label) return t;
    ADD_FAILURE() << "no task " << label;
    return p.tasks.front();
  };
  const auto report = [](const Program& p) {
    const ValidationResult v = validate(p);
    EXPECT_FALSE(v.ok);
    return v.report();
  };
  {  // one adder signals a counter of its own
    Program p = good;
    find(p, "L0.mlp[t1]").out_counter = p.new_counter("stray");
    EXPECT_NE(report(p).find("do not all signal one counter"), std::string::npos) << report(p);
  }
  {  // o_proj no longer initialises the sum
    Program p = good;
    for (Task& t : p.tasks)
      if (t.label.rfind("L0.o_proj", 0) == 0) t.outputs.resize(1);
    EXPECT_NE(report(p).find("uninitialized accumulator"), std::string::npos) << report(p);
  }
  {  // a reader of the sum that waits for o_proj only: ordered neither before nor after the adds
    Program p = good;
    const int64_t o_counter = find(p, "L0.o_proj[t0]").out_counter;
    const int64_t o_tiles = std::count_if(p.tasks.begin(), p.tasks.end(),
                                          [&](const Task& t) { return t.out_counter == o_counter; });
    find(p, "L1.q_proj[t0]").waits = {Wait{o_counter, o_tiles}};
    EXPECT_NE(report(p).find("ordered neither before nor after all"), std::string::npos) << report(p);
  }
}

TEST(FusionGrouping, GluDownNeedsTheGluTheNormAndTheResidualFusions) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  const auto error = [&](const ScheduleConfig& c) {
    try {
      lower(ck.config(), c, h100(), kContext);
    } catch (const LoweringError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const Groups all{{"rmsnorm", "gemv"}, {"gemv", "silu_mul"}, {"gemv", "add"}, {"gemv", "silu_mul", "gemv"}};
  for (size_t drop = 0; drop < 3; ++drop) {
    Groups g = all;
    g.erase(g.begin() + int64_t(drop));
    EXPECT_NE(error(with(g)).find("[gemv, silu_mul, gemv] needs [rmsnorm, gemv], [gemv, silu_mul] "
                                  "and [gemv, add]"),
              std::string::npos)
        << error(with(g));
  }
  ScheduleConfig down_tile = with(all);
  down_tile.tiling.push_back({"down_proj", {{"N_tile", 8}}});
  EXPECT_NE(error(down_tile).find("tiling.down_proj does nothing"), std::string::npos) << error(down_tile);
  EXPECT_EQ(error(with(all)), "");
}

TEST(FusionGrouping, CombineGemvNeedsASplitAndTheResidualFusion) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  const auto error = [&](const ScheduleConfig& c) {
    try {
      lower(ck.config(), c, h100(), kContext);
    } catch (const LoweringError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  ScheduleConfig no_add = with({{"attention_combine", "gemv"}});
  no_add.tiling.push_back({"attention", {{"kv_block", 4}}});
  EXPECT_NE(error(no_add).find("needs [gemv, add]"), std::string::npos) << error(no_add);
  const ScheduleConfig no_split = with({{"gemv", "add"}, {"attention_combine", "gemv"}});
  EXPECT_NE(error(no_split).find("needs tiling.attention.kv_block"), std::string::npos)
      << error(no_split);
  ScheduleConfig one_block = no_split;
  one_block.tiling.push_back({"attention", {{"kv_block", kContext}}});
  EXPECT_NE(error(one_block).find("one KV block has no combine"), std::string::npos)
      << error(one_block);
  ScheduleConfig ok = one_block;
  ok.tiling = {{"attention", {{"kv_block", 4}}}};  // every head in one group: ranged to all heads
  EXPECT_EQ(error(ok), "");
}

TEST(FusionGrouping, FusedTilesCarryTheirOperandsInOpcodeOrder) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  const Program p =
      lower(ck.config(), with({{"rmsnorm", "gemv"}, {"gemv", "add"}}), h100(), kContext);
  for (const Task& t : p.tasks) {
    if (t.op == Op::RMSNORM_GEMV_TILE) {
      EXPECT_TRUE(p.buffers[size_t(t.inputs[1])].name.ends_with("layernorm.weight") ||
                  p.buffers[size_t(t.inputs[1])].name == "model.norm.weight")
          << t.label;
      EXPECT_TRUE(t.params.find("eps") && t.params.find("hidden")) << t.label;
    }
    if (t.op == Op::GEMV_ADD_TILE)
      EXPECT_EQ(p.buffers[size_t(t.inputs[2])].kind, BufferKind::ACTIVATION) << t.label;
  }
}

TEST(FusionGrouping, UnknownGroupsAreNamed) {
  const ModelConfig m = load_model_config(kFixtures / "tiny-llama" / "config.json");
  try {
    lower(m, with({{"gemv", "add"}, {"add", "rmsnorm"}, {"rope"}}), h100(), kContext);
    ADD_FAILURE() << "no LoweringError";
  } catch (const LoweringError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot fuse [add, rmsnorm], [rope]"), std::string::npos)
        << e.what();
  }
}

}  // namespace
