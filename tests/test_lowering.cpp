// lower(): the decode-step program of a whole model, and every ScheduleConfig knob live.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <tuple>

#include "amk/checkpoint.h"
#include "amk/decoder.h"
#include "amk/lowering.h"
#include "amk/op_flags.h"
#include "amk/oracle.h"
#include "amk/validate.h"

namespace {

using namespace amk;

const std::filesystem::path kFixtures = std::filesystem::path(AMK_TESTDATA_DIR) / "fixtures";
const GpuTarget& h100() { return *find_target("h100"); }

ModelConfig fixture_config(const std::string& name) {
  return load_model_config(kFixtures / name / "config.json");
}

int64_t count_op(const Program& p, Op op) {
  return std::count_if(p.tasks.begin(), p.tasks.end(), [&](const Task& t) { return t.op == op; });
}

const Buffer& buffer_named(const Program& p, std::string_view name) {
  for (const Buffer& b : p.buffers)
    if (b.name == name) return b;
  throw std::out_of_range(std::string(name));
}

std::string lowering_error(const ModelConfig& m, const ScheduleConfig& c, int64_t ctx = 64) {
  try {
    lower(m, c, h100(), ctx);
  } catch (const LoweringError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Lowering, TinyLlamaHasTheWholeDecodeStep) {
  const ModelConfig m = fixture_config("tiny-llama");
  const Program p = lower(m, {}, h100(), 64);
  const ValidationResult v = validate(p);
  EXPECT_TRUE(v.ok) << v.report();
  EXPECT_TRUE(v.warnings.empty()) << v.report();
  const int64_t L = m.num_hidden_layers;
  EXPECT_EQ(count_op(p, Op::EMBED), 1);
  EXPECT_EQ(count_op(p, Op::RMSNORM), 2 * L + 1);
  EXPECT_EQ(count_op(p, Op::ROPE), 2 * L);
  EXPECT_EQ(count_op(p, Op::KV_APPEND), 2 * L);
  EXPECT_EQ(count_op(p, Op::ATTENTION_TILE), L);
  EXPECT_EQ(count_op(p, Op::ATTENTION_COMBINE), 0);
  EXPECT_EQ(count_op(p, Op::SILU_MUL), L);
  EXPECT_EQ(count_op(p, Op::ADD), 2 * L);
  EXPECT_EQ(count_op(p, Op::SAMPLE_ARGMAX), 1);

  // Every weight the model holds, by its state-dict key, in the checkpoint's dtype.
  std::set<std::string> sources, expected;
  for (const Buffer& b : p.buffers)
    if (b.kind == BufferKind::WEIGHT) {
      ASSERT_TRUE(b.source.has_value());
      EXPECT_EQ(b.dtype, DType::F32);
      sources.insert(*b.source);
    }
  for (const WeightSpec& w : expected_weights(m)) expected.insert(w.name);
  EXPECT_EQ(sources, expected);
  EXPECT_EQ(p.total_weight_bytes(), weight_bytes(m, DType::F32));

  const Buffer& k = buffer_named(p, kv_cache_name(1, 'k'));
  EXPECT_EQ(k.kind, BufferKind::KV_CACHE);
  EXPECT_EQ(k.shape, (std::vector<int64_t>{m.num_key_value_heads, 64, m.head_dim}));
  for (const Task& t : p.tasks) ASSERT_TRUE(t.sm.has_value());
  EXPECT_TRUE(p.pages.has_value());
  EXPECT_EQ(p.meta_string("step_position"), std::string(lowered_names::kPos));
}

TEST(Lowering, Qwen3HasHeadNormsAndATiedLmHead) {
  const ModelConfig m = fixture_config("tiny-qwen3");
  const Program p = lower(m, {}, h100(), 64);
  EXPECT_EQ(count_op(p, Op::RMSNORM), 4 * m.num_hidden_layers + 1);
  const int64_t embed = buffer_named(p, "model.embed_tokens.weight").id;
  for (const Buffer& b : p.buffers) EXPECT_NE(b.name, "lm_head.weight");
  const auto lm = std::find_if(p.tasks.begin(), p.tasks.end(),
                               [](const Task& t) { return t.label.starts_with("lm_head"); });
  ASSERT_NE(lm, p.tasks.end());
  EXPECT_EQ(lm->inputs[1], embed);
  EXPECT_EQ(p.total_weight_bytes(), weight_bytes(m, DType::F32));  // the tied table counted once
}

TEST(Lowering, BiasesBecomeTheGemvThirdInput) {
  ModelConfig m = fixture_config("tiny-llama");
  m.attention_qkv_bias = true;  // as Qwen2 has
  const Program p = lower(m, {}, h100(), 32, DType::BF16);
  int64_t with_bias = 0;
  for (const Task& t : p.tasks)
    if (t.op == Op::GEMV_TILE && t.inputs.size() == 3) {
      ++with_bias;
      EXPECT_TRUE(p.buffers[size_t(t.inputs[2])].source->ends_with("_proj.bias"));
    }
  EXPECT_EQ(with_bias, 3 * m.num_hidden_layers);  // q, k, v: one tile each at the default width
  EXPECT_EQ(buffer_named(p, "model.norm.weight").dtype, DType::BF16);
}

TEST(Lowering, GemvTileWidthIsLiveAndOverridablePerProjection) {
  const ModelConfig m = fixture_config("tiny-llama");
  const Program base = lower(m, {}, h100(), 64);
  ScheduleConfig c;
  c.tiling = {{"gemv", {{"N_tile", 16}}}};
  const Program small = lower(m, c, h100(), 64);
  EXPECT_GT(count_op(small, Op::GEMV_TILE), count_op(base, Op::GEMV_TILE));
  c.tiling.push_back({"lm_head", {{"N_tile", 128}}});
  const Program over = lower(m, c, h100(), 64);
  const auto lm_tiles = [](const Program& p) {
    return std::count_if(p.tasks.begin(), p.tasks.end(),
                         [](const Task& t) { return t.label.starts_with("lm_head"); });
  };
  EXPECT_EQ(lm_tiles(small), 256 / 16);
  EXPECT_EQ(lm_tiles(over), 256 / 128);
  EXPECT_EQ(count_op(small, Op::GEMV_TILE) - lm_tiles(small),
            count_op(over, Op::GEMV_TILE) - lm_tiles(over));
}

TEST(Lowering, KvBlockSplitsAttentionIntoPartialsAndACombine) {
  const ModelConfig m = fixture_config("tiny-llama");
  ScheduleConfig c;
  c.tiling = {{"attention", {{"kv_block", 16}}}};
  const Program p = lower(m, c, h100(), 64);
  EXPECT_EQ(count_op(p, Op::ATTENTION_TILE), 4 * m.num_hidden_layers);
  EXPECT_EQ(count_op(p, Op::ATTENTION_COMBINE), m.num_hidden_layers);
  EXPECT_TRUE(validate(p).ok);
  // More blocks than one combine merges: runs of up to 8 blocks, each merged into a partial,
  // then one combine of those (16 blocks: 2 runs of 8; 64 blocks: 8 runs of 8).
  for (const auto& [block, blocks, runs] : {std::tuple{4, 16, 2}, std::tuple{1, 64, 8}}) {
    c.tiling = {{"attention", {{"kv_block", block}}}};
    const Program tree = lower(m, c, h100(), 64);
    EXPECT_EQ(count_op(tree, Op::ATTENTION_TILE), blocks * m.num_hidden_layers);
    EXPECT_EQ(count_op(tree, Op::ATTENTION_COMBINE), (runs + 1) * m.num_hidden_layers);
    int64_t partial_combines = 0;
    for (const Task& t : tree.tasks)
      partial_combines += t.op == Op::ATTENTION_COMBINE &&
                          (t.params.get_int("flags", 0) & attention_flags::kPartial) != 0;
    EXPECT_EQ(partial_combines, runs * m.num_hidden_layers);
    EXPECT_TRUE(validate(tree).ok);
  }
  // More blocks than a two-level tree merges (65 > 8 x 8) is an error that says what to change.
  c.tiling = {{"attention", {{"kv_block", 1}}}};
  const std::string error = lowering_error(m, c, 65);
  EXPECT_NE(error.find("kv_block"), std::string::npos) << error;
  EXPECT_NE(error.find("at most 64"), std::string::npos) << error;
}

TEST(Lowering, KvHeadsSplitsAttentionByHeadGroup) {
  const ModelConfig m = fixture_config("tiny-llama");  // 4 query heads over 2 KV heads
  ScheduleConfig c;
  c.tiling = {{"attention", {{"kv_block", 16}, {"kv_heads", 1}}}};
  const Program p = lower(m, c, h100(), 64);
  // 2 groups x 4 blocks of partials and one combine per group, in every layer.
  EXPECT_EQ(count_op(p, Op::ATTENTION_TILE), 2 * 4 * m.num_hidden_layers);
  EXPECT_EQ(count_op(p, Op::ATTENTION_COMBINE), 2 * m.num_hidden_layers);
  EXPECT_TRUE(validate(p).ok);
  for (const Task& t : p.tasks)
    if (t.op == Op::ATTENTION_TILE || t.op == Op::ATTENTION_COMBINE) {
      EXPECT_EQ(t.params.get_int("N_tile", 0), 2) << t.label;  // one KV head = 2 query heads
      EXPECT_EQ(t.params.get_int("n_off", -1) % 2, 0) << t.label;
    }
  // Without a block split: one task a head group over the whole window, each writing its
  // heads' slice of the attention row (no combine), the slices disjoint for the race check.
  c.tiling = {{"attention", {{"kv_heads", 1}}}};
  const Program unsplit = lower(m, c, h100(), 64);
  EXPECT_EQ(count_op(unsplit, Op::ATTENTION_TILE), 2 * m.num_hidden_layers);
  EXPECT_EQ(count_op(unsplit, Op::ATTENTION_COMBINE), 0);
  EXPECT_TRUE(validate(unsplit).ok);
  for (const Task& t : unsplit.tasks)
    if (t.op == Op::ATTENTION_TILE) {
      EXPECT_EQ(t.params.get_int("N_tile", 0), 2) << t.label;
      EXPECT_EQ(unsplit.buffers[size_t(t.outputs[0])].numel(), m.q_dim()) << t.label;
      EXPECT_EQ(t.params.get_int("flags", 0) & attention_flags::kPartial, 0) << t.label;
    }
  // Two tasks of a layer writing the same heads' slice are a race validate() reports.
  Program clash = unsplit;
  for (Task& t : clash.tasks)
    if (t.op == Op::ATTENTION_TILE) t.params.set_int("n_off", 0);
  EXPECT_FALSE(validate(clash).ok);
  // A group size that does not divide the KV heads is an error that says what to change.
  c.tiling = {{"attention", {{"kv_block", 16}, {"kv_heads", 3}}}};
  EXPECT_NE(lowering_error(m, c).find("kv_heads 3 must divide"), std::string::npos);
  c.tiling = {{"attention", {{"kv_rows", 1}}}};
  EXPECT_NE(lowering_error(m, c).find("unknown key 'kv_rows'"), std::string::npos);
}

TEST(Lowering, SmAssignmentPoliciesAreLive) {
  const ModelConfig m = fixture_config("tiny-llama");
  // Fewer SMs than tasks, so that the policies must differ.
  GpuTarget small = h100();
  small.num_sms = 4;
  ScheduleConfig c;
  c.tiling = {{"gemv", {{"N_tile", 16}}}};
  const auto sms = [&](const ScheduleConfig& cfg) {
    std::vector<int64_t> out;
    for (const Task& t : lower(m, cfg, small, 64).tasks) out.push_back(*t.sm);
    return out;
  };
  const std::vector<int64_t> lb = sms(c);
  c.sm_assignment = std::string("round_robin");
  const std::vector<int64_t> rr = sms(c);
  EXPECT_NE(lb, rr);
  for (size_t i = 0; i < rr.size(); ++i) EXPECT_EQ(rr[i], int64_t(i) % small.num_sms);
  c.sm_assignment = ScheduleConfig::ExplicitSmMap{{0, 3}, {5, 3}};
  const std::vector<int64_t> ex = sms(c);
  EXPECT_EQ(ex[0], 3);
  EXPECT_EQ(ex[5], 3);
  EXPECT_NE(ex, lb);
  // Load balance: the heaviest SM carries no more than the lightest plus one task's bytes.
  const Program p = lower(m, ScheduleConfig{}, small, 64);
  std::vector<int64_t> load(size_t(small.num_sms), 0);
  int64_t biggest = 0;
  for (const Task& t : p.tasks) {
    load[size_t(*t.sm)] += std::max<int64_t>(t.est_bytes, 1);
    biggest = std::max(biggest, t.est_bytes);
  }
  EXPECT_LE(
      *std::max_element(load.begin(), load.end()) - *std::min_element(load.begin(), load.end()),
      biggest);
}

TEST(Lowering, PageAllocationPoliciesAreLiveAndSafe) {
  const ModelConfig m = fixture_config("tiny-qwen3");
  ScheduleConfig c;
  const Program colored = lower(m, c, h100(), 64);
  c.page_allocation = "linear";
  const Program linear = lower(m, c, h100(), 64);
  c.page_allocation = "none";
  const Program none = lower(m, c, h100(), 64);
  ASSERT_TRUE(colored.pages && linear.pages);
  EXPECT_FALSE(none.pages.has_value());
  EXPECT_LT(colored.pages->pages.size(), linear.pages->pages.size());
  EXPECT_LT(colored.pages->total_scratch_bytes(), linear.pages->total_scratch_bytes());
  EXPECT_EQ(colored.pages->buffer_to_page.size(), linear.pages->buffer_to_page.size());
  // Reuse only across a proven happens-before: validate()'s page-aliasing check stays silent.
  const ValidationResult v = validate(colored);
  EXPECT_TRUE(v.ok && v.warnings.empty()) << v.report();
}

TEST(Lowering, PipeliningDepthIsTheGemvPrefetchDistance) {
  const ModelConfig m = fixture_config("tiny-llama");
  ScheduleConfig c;
  c.pipelining_depth = 3;
  for (const Task& t : lower(m, c, h100(), 64).tasks)
    if (t.op == Op::GEMV_TILE) EXPECT_EQ(t.params.get_int("M_tile", -1), 3);
  c.pipelining_depth = 0;
  for (const Task& t : lower(m, c, h100(), 64).tasks) EXPECT_FALSE(t.params.contains("M_tile"));
}

TEST(Lowering, LaunchKnobsAreCheckedAgainstTheTargetAndRecorded) {
  const ModelConfig m = fixture_config("tiny-llama");
  ScheduleConfig c;
  c.threads_per_block = 512;
  c.smem_bytes_per_block = 100000;
  const Program p = lower(m, c, h100(), 64);
  ASSERT_TRUE(p.config.has_value());
  EXPECT_EQ(p.config->threads_per_block, 512);
  EXPECT_NE(p, lower(m, {}, h100(), 64));
  c.smem_bytes_per_block = h100().smem_bytes_per_block_optin + 1;
  EXPECT_NE(lowering_error(m, c).find("smem_bytes_per_block_optin"), std::string::npos);
  c.smem_bytes_per_block = 0;
  c.threads_per_block = 100;
  EXPECT_NE(lowering_error(m, c).find("threads_per_block 100"), std::string::npos);
  c.threads_per_block = 2048;
  EXPECT_NE(lowering_error(m, c).find("threads_per_block 2048"), std::string::npos);
}

TEST(Lowering, BadKnobsAreNamedNeverIgnored) {
  const ModelConfig m = fixture_config("tiny-llama");
  const auto err = [&](auto edit) {
    ScheduleConfig c;
    edit(c);
    return lowering_error(m, c);
  };
  EXPECT_NE(err([](ScheduleConfig& c) {
              c.tiling = {{"gemm", {{"N_tile", 8}}}};
            }).find("'gemm'"),
            std::string::npos);
  EXPECT_NE(err([](ScheduleConfig& c) {
              c.tiling = {{"gemv", {{"K_tile", 8}}}};
            }).find("'K_tile'"),
            std::string::npos);
  EXPECT_NE(err([](ScheduleConfig& c) {
              c.tiling = {{"gemv", {{"N_tile", 0}}}};
            }).find("N_tile"),
            std::string::npos);
  EXPECT_NE(err([](ScheduleConfig& c) {
              c.fusion_grouping = {{"rmsnorm", "gemv"}, {"gelu", "gemv"}};
            }).find("fusion_grouping cannot fuse [gelu, gemv]"),
            std::string::npos);
  EXPECT_NE(err([](ScheduleConfig& c) { c.page_allocation = "best"; }).find("'best'"),
            std::string::npos);
  EXPECT_NE(
      err([](ScheduleConfig& c) { c.sm_assignment = std::string("random"); }).find("'random'"),
      std::string::npos);
  EXPECT_NE(err([](ScheduleConfig& c) {
              c.sm_assignment = ScheduleConfig::ExplicitSmMap{{0, 999}};
            }).find("SM 999"),
            std::string::npos);
  EXPECT_NE(err([](ScheduleConfig& c) { c.pipelining_depth = -1; }).find("pipelining_depth"),
            std::string::npos);
  EXPECT_NE(err([](ScheduleConfig& c) { c.stream_chunk_bytes = 1000; }).find("stream_chunk_bytes"),
            std::string::npos);
  EXPECT_NE(err([](ScheduleConfig& c) { c.stream_bytes_in_flight = -1; })
                .find("stream_bytes_in_flight"),
            std::string::npos);
  EXPECT_NE(err([](ScheduleConfig& c) { c.stream_prefetch_bytes_in_flight = (1 << 24) + 1; })
                .find("stream_prefetch_bytes_in_flight"),
            std::string::npos);
  EXPECT_NE(lowering_error(m, {}, 0).find("max_context"), std::string::npos);
}

// Default RoPE keeps the spec's ROPE; a scaled rope type rotates with ROPE_FREQ and one CONST
// table that the loader computes from the config (kRopeInvFreqSource).
TEST(Lowering, ScaledRopeUsesRopeFreqWithAComputedTable) {
  ModelConfig m = fixture_config("tiny-llama");
  const int64_t L = m.num_hidden_layers;
  EXPECT_EQ(count_op(lower(m, {}, h100(), 64), Op::ROPE_FREQ), 0);
  for (RopeType type : {RopeType::Llama3, RopeType::Linear}) {
    m.rope.type = type;
    m.rope.factor = 8;
    m.rope.original_max_position_embeddings = 8192;
    const Program p = lower(m, {}, h100(), 64);
    EXPECT_EQ(count_op(p, Op::ROPE), 0);
    EXPECT_EQ(count_op(p, Op::ROPE_FREQ), 2 * L);
    std::vector<const Buffer*> consts;
    for (const Buffer& b : p.buffers)
      if (b.kind == BufferKind::CONST) consts.push_back(&b);
    ASSERT_EQ(consts.size(), 1u);
    EXPECT_EQ(consts[0]->source, std::string(kRopeInvFreqSource));
    EXPECT_EQ(consts[0]->dtype, DType::F32);
    EXPECT_EQ(consts[0]->shape, std::vector<int64_t>{m.head_dim / 2});
    for (const Task& t : p.tasks)
      if (t.op == Op::ROPE_FREQ) {
        EXPECT_EQ(t.inputs.at(2), consts[0]->id);
        EXPECT_FALSE(t.params.contains("theta"));
      }
  }
}

// One Program, lowered once, serves every position: the host only changes the step state.
TEST(Lowering, OneProgramServesEveryPosition) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-llama");
  const ExpectedOutputs e = load_expected(kFixtures / "tiny-llama" / "expected.safetensors");
  const Program p = lower(ck.config(), {}, h100(), 16);
  ReferenceDecoder dec(ck, p);
  for (int64_t i = 0; i < 16; ++i) {
    const std::vector<float> logits = dec.step(e.sequence_ids[size_t(i)]);
    double diff = 0, scale = 0;
    for (int64_t j = 0; j < e.vocab; ++j) {
      diff =
          std::max(diff, double(std::fabs(logits[size_t(j)] - e.logits[size_t(i * e.vocab + j)])));
      scale = std::max(scale, double(std::fabs(e.logits[size_t(i * e.vocab + j)])));
    }
    EXPECT_LE(diff / scale, kOracleTolerance) << "position " << i;
  }
  EXPECT_EQ(dec.vm().program(), p);        // never rebuilt
  EXPECT_THROW(dec.step(1), DecodeError);  // past max_context
}

// Split-KV and the whole window are the same attention; so are all tile widths.
TEST(Lowering, KnobsDoNotChangeTheLogits) {
  const Checkpoint ck = Checkpoint::open(kFixtures / "tiny-qwen3");
  const ExpectedOutputs e = load_expected(kFixtures / "tiny-qwen3" / "expected.safetensors");
  ScheduleConfig split;
  split.tiling = {{"attention", {{"kv_block", 5}}}, {"gemv", {{"N_tile", 24}}}};
  ScheduleConfig argmax_split;  // partial argmaxes of 7 logits + a reduce: the same tokens
  argmax_split.tiling = {{"sample_argmax", {{"N_tile", 7}}}};
  {
    const Program p = lower(ck.config(), argmax_split, h100(), 20);
    int64_t partials = 0;
    for (const Task& t : p.tasks) partials += t.op == Op::SAMPLE_ARGMAX && t.params.find("m_off");
    EXPECT_EQ(partials, (ck.config().vocab_size + 7) / 8);  // slices rounded up to 8 logits
  }
  ReferenceDecoder d(ck, lower(ck.config(), argmax_split, h100(), 20));
  ReferenceDecoder whole(ck, lower(ck.config(), {}, h100(), 20));
  for (int64_t i = 0; i < 20; ++i) {
    d.step(e.sequence_ids[size_t(i)]);
    whole.step(e.sequence_ids[size_t(i)]);
    ASSERT_EQ(d.last_next_token(), whole.last_next_token()) << "position " << i;
  }
  ScheduleConfig by_head = split;
  by_head.tiling = {{"attention", {{"kv_block", 5}, {"kv_heads", 1}}}, {"gemv", {{"N_tile", 24}}}};
  // Two-level combine trees: 20 one-key blocks (runs of 7, 7, 6), and 10 two-key blocks a head
  // group (runs of 5).
  ScheduleConfig tree;
  tree.tiling = {{"attention", {{"kv_block", 1}}}};
  ScheduleConfig tree_by_head;
  tree_by_head.tiling = {{"attention", {{"kv_block", 2}, {"kv_heads", 1}}}};
  // One task a KV head over the whole window, no combine: plain, and fused with the per-head
  // norm, RoPE and the KV append (ROPE_KV_ATTENTION_TILE).
  ScheduleConfig unsplit_by_head;
  unsplit_by_head.tiling = {{"attention", {{"kv_heads", 1}}}};
  ScheduleConfig unsplit_fused = unsplit_by_head;
  unsplit_fused.fusion_grouping = {{"rope", "attention"}};
  ReferenceDecoder a(ck, lower(ck.config(), {}, h100(), 20));
  ReferenceDecoder b(ck, lower(ck.config(), split, h100(), 20));
  ReferenceDecoder c(ck, lower(ck.config(), by_head, h100(), 20));
  ReferenceDecoder t1(ck, lower(ck.config(), tree, h100(), 20));
  ReferenceDecoder t2(ck, lower(ck.config(), tree_by_head, h100(), 20));
  ReferenceDecoder u(ck, lower(ck.config(), unsplit_by_head, h100(), 20));
  ReferenceDecoder uf(ck, lower(ck.config(), unsplit_fused, h100(), 20));
  for (int64_t i = 0; i < 20; ++i) {
    const std::vector<float> la = a.step(e.sequence_ids[size_t(i)]);
    const std::vector<float> lb = b.step(e.sequence_ids[size_t(i)]);
    const std::vector<float> lc = c.step(e.sequence_ids[size_t(i)]);
    const std::vector<float> l1 = t1.step(e.sequence_ids[size_t(i)]);
    const std::vector<float> l2 = t2.step(e.sequence_ids[size_t(i)]);
    const std::vector<float> lu = u.step(e.sequence_ids[size_t(i)]);
    const std::vector<float> luf = uf.step(e.sequence_ids[size_t(i)]);
    for (size_t j = 0; j < la.size(); ++j) {
      ASSERT_NEAR(la[j], lb[j], 1e-5) << "position " << i;
      ASSERT_NEAR(la[j], lc[j], 1e-5) << "position " << i << " (kv_heads 1)";
      ASSERT_NEAR(la[j], l1[j], 1e-5) << "position " << i << " (combine tree)";
      ASSERT_NEAR(la[j], l2[j], 1e-5) << "position " << i << " (combine tree, kv_heads 1)";
      ASSERT_NEAR(la[j], lu[j], 1e-5) << "position " << i << " (kv_heads 1, no split)";
      ASSERT_NEAR(la[j], luf[j], 1e-5) << "position " << i << " (kv_heads 1, no split, fused)";
    }
  }
}

}  // namespace

namespace {

// Llama-3.1-8B's shape, llama3 rope scaling included, lowers to a validated program whose
// weights are exactly the checkpoint's. Its time budget (3 s) is measured in
// bench/bench_lowering.cpp, not asserted here.
TEST(Lowering, Llama8bShapeLowersAndValidates) {
  const amk::ModelConfig m = amk::parse_model_config(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "tie_word_embeddings": false})");
  amk::ScheduleConfig c;
  c.tiling = {{"gemv", {{"N_tile", 128}}}, {"attention", {{"kv_block", 512}}}};
  const auto t0 = std::chrono::steady_clock::now();
  const amk::Program p = amk::lower(m, c, h100(), 4096);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "llama-3.1-8b shape: " << p.tasks.size() << " tasks lowered + validated in " << s
            << " s\n";
  EXPECT_EQ(p.total_weight_bytes(), amk::weight_bytes(m, amk::DType::BF16));
}

}  // namespace
