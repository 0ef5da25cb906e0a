// ScheduleConfig.fusion_grouping: each group changes the lowered program (its fused opcode in,
// the tasks and counters it removes out), still validates, and decodes to the unfused logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
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

int64_t count_op(const Program& p, Op op) {
  return std::count_if(p.tasks.begin(), p.tasks.end(), [&](const Task& t) { return t.op == op; });
}

using Groups = std::vector<std::vector<std::string>>;

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
};

std::vector<Expect> expectations(const ModelConfig& m) {
  const int64_t L = m.num_hidden_layers;
  const int64_t head_norms = m.qk_norm ? 2 * L : 0;  // Qwen3's q/k norms are not GEMV inputs
  return {
      {{{"rmsnorm", "gemv"}}, Op::RMSNORM_GEMV_TILE, Op::RMSNORM, head_norms, 2 * L + 1},
      {{{"silu_mul", "gemv"}}, Op::SILU_MUL_GEMV_TILE, Op::SILU_MUL, 0, L},
      {{{"gemv", "add"}}, Op::GEMV_ADD_TILE, Op::ADD, 0, 2 * L},
      // All three: down_proj takes SILU_MUL_GEMV_TILE, so its residual stays an ADD.
      {{{"rmsnorm", "gemv"}, {"silu_mul", "gemv"}, {"gemv", "add"}}, Op::GEMV_ADD_TILE, Op::ADD,
       L, (2 * L + 1) + L + L},
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
    const ValidationResult v = validate(p);
    EXPECT_TRUE(v.ok) << v.report();
    EXPECT_TRUE(v.warnings.empty()) << v.report();
    EXPECT_EQ(count_op(base, x.fused), 0);
    EXPECT_GT(count_op(p, x.fused), 0);
    EXPECT_EQ(count_op(p, x.gone), x.gone_left);
    EXPECT_EQ(base.tasks.size() - p.tasks.size(), size_t(x.removed));
    EXPECT_EQ(base.counters.size() - p.counters.size(), size_t(x.removed));

    // Teacher-forced decode: the fused program's logits are the unfused one's.
    ReferenceDecoder a(ck, base), b(ck, p);
    for (int64_t i = 0; i < kContext; ++i) {
      const std::vector<float> la = a.step(e.sequence_ids[size_t(i)]);
      const std::vector<float> lb = b.step(e.sequence_ids[size_t(i)]);
      double diff = 0, scale = 0;
      for (size_t j = 0; j < la.size(); ++j) {
        diff = std::max(diff, double(std::fabs(la[j] - lb[j])));
        scale = std::max(scale, double(std::fabs(la[j])));
      }
      EXPECT_LE(diff / scale, 1e-5) << "position " << i;
      // Stronger than asked: the fused ops run the unfused ops' code on the same F32
      // intermediates, so the reference VM's logits agree bit for bit.
      EXPECT_EQ(la, lb) << "position " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fusion, ::testing::Values("tiny-llama", "tiny-qwen3"));

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
