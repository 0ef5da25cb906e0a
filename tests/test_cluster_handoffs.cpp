// find_cluster_handoffs (src/ir/cluster_handoffs.h): which hand-offs of a program stay inside one
// cluster of SMs, against what docs/CLUSTER_TP.md's tensor-parallel step puts inside one, and
// the rules one by one on small programs.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include "amk/lowering.h"
#include "amk/model_config.h"
#include "amk/model_presets.h"
#include "amk/validate.h"
#include "ir/cluster_handoffs.h"
#include "support/tp_programs.h"

namespace {

using namespace amk;

const std::filesystem::path kFixtures = std::filesystem::path(AMK_TESTDATA_DIR) / "fixtures";

// tiny-llama (hidden 64, 4 / 2 heads of 16, 2 layers) in 2 clusters of 2 SMs, the attention on
// both (one KV head each), 3 split-KV blocks of 4 keys.
Program tp_program() {
  const ModelConfig m = load_model_config(kFixtures / "tiny-llama" / "config.json");
  return lower(m, amk::testing::tp_step_config(amk::testing::TpSplit{2, 2, 2}),
               *find_target("h100"), 12);
}

// The tensor-parallel step's five in-cluster hand-offs a layer (q/k/v -> attention -> o_proj;
// the attention's sum -> gate/up -> down; the MLP's sum -> the next layer's q/k/v), each on its
// cluster, and nothing else: o_proj's and down's partials go to every cluster's sum, the last
// layer's sum to the lm_head on every SM; but the last layer's down partial of cluster 0, which
// only cluster 0's sum reads (the one copy the final norm needs).
TEST(ClusterHandoffs, TheTensorParallelStepsFiveHopsALayerStayInTheirClusters) {
  const Program p = tp_program();
  ASSERT_TRUE(validate(p).ok);
  const ClusterHandoffs found = find_cluster_handoffs(p, 2);
  std::map<std::string, int64_t> kinds;  // counter note without its layer and cluster -> count
  for (const ClusterHandoff& h : found.handoffs) {
    const std::string& note = p.counters[size_t(h.counter)].note;
    std::string kind = note.substr(note.find('.') + 1);
    kind = kind.substr(0, kind.find('['));
    ++kinds[kind];
    for (const int64_t sm : h.receivers) EXPECT_EQ(sm / 2, h.cluster) << note;
  }
  // Per layer and cluster: q/k/v (one head group a cluster), the attention, the attention's
  // sum, gate/up; the MLP's sum but after the last layer.
  EXPECT_EQ(kinds, (std::map<std::string, int64_t>{{"q/k/v", 4},
                                                   {"attention partials", 4},
                                                   {"attn_residual", 4},
                                                   {"gate_up_proj", 4},
                                                   {"down_proj", 1},
                                                   {"mlp_residual", 2}}));
  EXPECT_GT(found.counters_across_clusters, 0);
}

// What a receiver's mailbox holds: for a head group's q/k/v, its heads' columns of q, k and v;
// for a cluster's attention, its heads' rows of each of the 3 slabs of the stack (3 pieces),
// beside the KV caches' new rows, which stay global.
TEST(ClusterHandoffs, ThePiecesAreTheRegionsTheSignallersWrite) {
  const Program p = tp_program();
  const ClusterHandoffs found = find_cluster_handoffs(p, 2);
  int64_t checked = 0;
  for (const ClusterHandoff& h : found.handoffs) {
    const std::string& note = p.counters[size_t(h.counter)].note;
    if (note == "L0.q/k/v[h1] tiles") {
      ASSERT_EQ(h.pieces.size(), 3u);
      // q: 2 query heads of 16 from head 2; k, v: KV head 1.
      EXPECT_EQ(p.buffers[size_t(h.pieces[0].buffer)].name, "L0.q");
      EXPECT_EQ(h.pieces[0].begin, 32);
      EXPECT_EQ(h.pieces[0].end, 64);
      EXPECT_EQ(p.buffers[size_t(h.pieces[1].buffer)].name, "L0.k");
      EXPECT_EQ(h.pieces[1].begin, 16);
      EXPECT_EQ(h.pieces[1].end, 32);
      EXPECT_EQ(h.bytes, (32 + 16 + 16) * 4);
      EXPECT_FALSE(h.writes_kv_cache);
      EXPECT_EQ(h.cluster, 1);
      ++checked;
    }
    if (note == "L1.attention partials[c0]") {
      // [3 slabs x 4 heads, 18]: cluster 0's heads 0-1 are rows 0-1, 4-5 and 8-9.
      ASSERT_EQ(h.pieces.size(), 3u);
      for (size_t s = 0; s < 3; ++s) {
        EXPECT_EQ(h.pieces[s].begin, int64_t(s) * 4 * 18);
        EXPECT_EQ(h.pieces[s].end, int64_t(s) * 4 * 18 + 2 * 18);
      }
      EXPECT_EQ(h.bytes, 3 * 2 * 18 * 4);
      EXPECT_TRUE(h.writes_kv_cache);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2);
}

// The rules on a chain a (SM 0) -> b (SM 1) -> c (SM 1): a's x is read by b, which waits for it,
// and by c, which waits only for b (ordered through it): so a's counter stays global while b's,
// read by its waiter alone, is in-cluster in clusters of 2, and nothing is in clusters of 1 (a
// and b on different SMs) but c's... which no one waits for.
TEST(ClusterHandoffs, EveryReaderMustWaitAndEveryoneBeOnTheCluster) {
  const auto program = [](bool c_waits_for_a) {
    Program p;
    const int64_t in = p.new_buffer("in", BufferKind::IO_INPUT, DType::F32, {1, 4});
    const int64_t x = p.new_buffer("x", BufferKind::ACTIVATION, DType::F32, {1, 4},
                                   MemSpace::GLOBAL_SCRATCH);
    const int64_t y = p.new_buffer("y", BufferKind::ACTIVATION, DType::F32, {1, 4},
                                   MemSpace::GLOBAL_SCRATCH);
    const int64_t out = p.new_buffer("out", BufferKind::IO_OUTPUT, DType::F32, {1, 4});
    const int64_t ca = p.new_counter("a"), cb = p.new_counter("b"), cc = p.new_counter("c");
    p.add_task(Op::COPY, {in}, {x}, ca, {}, {}, "a").sm = 0;
    p.add_task(Op::ADD, {x, x}, {y}, cb, {{ca, 1}}, {}, "b").sm = 1;
    std::vector<Wait> waits{{cb, 1}};
    if (c_waits_for_a) waits.push_back({ca, 1});
    p.add_task(Op::ADD, {x, y}, {out}, cc, waits, {}, "c").sm = 1;
    return p;
  };
  const Program transitive = program(false);
  ASSERT_TRUE(validate(transitive).ok) << validate(transitive).report();
  const ClusterHandoffs two = find_cluster_handoffs(transitive, 2);
  ASSERT_EQ(two.handoffs.size(), 1u);
  EXPECT_EQ(transitive.counters[size_t(two.handoffs[0].counter)].note, "b");
  EXPECT_EQ(two.handoffs[0].receivers, std::vector<int64_t>{1});
  EXPECT_EQ(two.handoffs[0].bytes, 16);
  // c's output is the host's: c's counter (no waiter) is global too.
  EXPECT_EQ(two.counters_across_clusters, 2);
  // When c waits for a as well, a's x is read by its waiters alone.
  const ClusterHandoffs direct = find_cluster_handoffs(program(true), 2);
  EXPECT_EQ(direct.handoffs.size(), 2u);
  // Clusters of one SM: a (SM 0) hands to SMs 1; b's hand-off to c stays on SM 1.
  const ClusterHandoffs one = find_cluster_handoffs(program(true), 1);
  ASSERT_EQ(one.handoffs.size(), 1u);
  EXPECT_EQ(program(true).counters[size_t(one.handoffs[0].counter)].note, "b");
  EXPECT_THROW(find_cluster_handoffs(transitive, 0), std::invalid_argument);
  // A second writer of a's elements under another counter (d, on SM 1, after c): a's x holds
  // two counters' writes, so a's hand-off stays global.
  Program rewritten = program(true);
  const int64_t cd = rewritten.new_counter("d");
  rewritten.add_task(Op::COPY, {0}, {1}, cd, {{2, 1}}, {}, "d").sm = 1;
  ASSERT_TRUE(validate(rewritten).ok) << validate(rewritten).report();
  for (const ClusterHandoff& h : find_cluster_handoffs(rewritten, 2).handoffs)
    EXPECT_NE(rewritten.counters[size_t(h.counter)].note, "a");
}

// The plain step of a real shape (every level over every SM) keeps every hand-off global in
// clusters of 16.
TEST(ClusterHandoffs, ThePlainStepHasNone) {
  const ModelConfig m =
      parse_model_config(model_preset_config("llama-3.2-1b", "bfloat16"), "llama-3.2-1b");
  const GpuTarget& t = *find_target("h200");
  const Program p = lower(m, default_schedule_config(m, t, 512), t, 512);
  const ClusterHandoffs found = find_cluster_handoffs(p, 16);
  for (const ClusterHandoff& h : found.handoffs)
    ADD_FAILURE() << p.counters[size_t(h.counter)].note << " is in-cluster";
}

}  // namespace
