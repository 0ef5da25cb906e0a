// default_schedule_config(): the config a model gets with no --config. Its rules are checked
// against numbers worked out by hand for a published shape, and on every preset the derived
// program validates and spreads each streaming level over (about) every SM.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <set>
#include <string>

#include "amk/lowering.h"
#include "amk/model_config.h"
#include "amk/model_presets.h"
#include "amk/op_traits.h"
#include "amk/validate.h"

namespace {

using namespace amk;

const GpuTarget& h100() { return *find_target("h100"); }

ModelConfig preset(const char* name) {
  return parse_model_config(model_preset_config(name, "bfloat16"), name);
}

int64_t n_tile(const ScheduleConfig& c, const std::string& archetype, const std::string& key) {
  for (const auto& [a, sizes] : c.tiling)
    if (a == archetype)
      for (const auto& [k, v] : sizes)
        if (k == key) return v;
  return -1;
}

// The N_tile of the seven projections, in the order q, k, v, o, gate, up, down.
void expect_projection_tiles(const ScheduleConfig& c, const std::array<int64_t, 7>& want) {
  static constexpr std::array<const char*, 7> kProjections{
      "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  for (size_t i = 0; i < kProjections.size(); ++i)
    EXPECT_EQ(n_tile(c, kProjections[i], "N_tile"), want[i]) << kProjections[i];
}

// Llama-3.2-1B on 132 SMs, by hand (rows in multiples of 4: whole 16-byte words of F32
// outputs): 512 keys -> 8 blocks of 64 x 8 KV heads = 64 attention block tasks (<= 66, half the
// SMs), so q/k/v 2048 + 2 x 512 rows go over the other 68: ceil(3072 / 68) = 46 -> 48 rows
// (43 + 11 + 11 = 65 tiles <= 68); gate/up 2 x 8192 ->
// ceil(16384 / 132) = 125 rows a SM -> GLU tiles of ceil(125 / 2) = 63 -> 64 features (128 rows:
// 128 tiles), up_proj absent (the GLU tiles are gate_proj's); o/down 2048 -> 16; lm_head
// min(ceil(128256 / 132) = 972, 32 KiB of partials / (4 bytes x 8 strips of a 4 KiB row) = 1024)
// = 972; argmax 972 (a multiple of 4).
TEST(DefaultScheduleConfig, Llama32_1bOnH100) {
  const ScheduleConfig c = default_schedule_config(preset("llama-3.2-1b"), h100(), 512);
  expect_projection_tiles(c, {48, 48, 48, 16, 64, -1, 16});
  EXPECT_EQ(n_tile(c, "lm_head", "N_tile"), 972);
  EXPECT_EQ(n_tile(c, "sample_argmax", "N_tile"), 972);
  EXPECT_EQ(n_tile(c, "attention", "kv_block"), 64);
  EXPECT_EQ(n_tile(c, "attention", "kv_heads"), 1);
  // Split KV: o_proj merges the partials, whatever the head width (qwen3-0.6b's 128) and however
  // many blocks (16 at 4,096 keys: no combine tree); one block: no combine at all.
  std::vector<std::vector<std::string>> groups{{"rmsnorm", "gemv"},
                                               {"gemv", "silu_mul"},
                                               {"gemv", "add"},
                                               {"rope", "attention"},
                                               {"attention_combine", "gemv"}};
  EXPECT_EQ(c.fusion_grouping, groups);
  EXPECT_EQ(default_schedule_config(preset("qwen3-0.6b"), h100(), 512).fusion_grouping, groups);
  EXPECT_EQ(default_schedule_config(preset("llama-3.2-1b"), h100(), 4096).fusion_grouping, groups);
  EXPECT_EQ(default_schedule_config(preset("qwen3-0.6b"), h100(), 4096).fusion_grouping, groups);
  EXPECT_EQ(default_schedule_config(preset("smollm2-135m"), h100(), 4096).fusion_grouping, groups);
  groups.pop_back();
  EXPECT_EQ(default_schedule_config(preset("llama-3.2-1b"), h100(), 64).fusion_grouping, groups);
  EXPECT_EQ(c.stream_bytes_in_flight, 65536);
  EXPECT_EQ(c.stream_prefetch_bytes_in_flight, 32768);
  // A long context doubles the block until the level's tasks (8 KV heads x blocks) fit the 132
  // SMs one each: 1,024 keys -> 16 blocks of 64 (128 tasks), 2,048 -> 16 of 128, 4,096 -> 16 of
  // 256, 8,192 -> 16 of 512; a model with fewer KV heads keeps shorter blocks (smollm2-135m's 3:
  // 4,096 -> 32 blocks of 128, 96 tasks); a one-block context is not split.
  for (const auto& [context, block] :
       std::vector<std::pair<int64_t, int64_t>>{{1024, 64}, {2048, 128}, {4096, 256}, {8192, 512}})
    EXPECT_EQ(n_tile(default_schedule_config(preset("llama-3.2-1b"), h100(), context),
                     "attention", "kv_block"),
              block)
        << context;
  EXPECT_EQ(n_tile(default_schedule_config(preset("smollm2-135m"), h100(), 4096), "attention",
                   "kv_block"),
            128);
  EXPECT_EQ(n_tile(default_schedule_config(preset("llama-3.2-1b"), h100(), 64), "attention",
                   "kv_block"),
            -1);
  // Blocks of more than 64 keys stride in runs of 64 where the blocks tile the context: the
  // 1B at 4,096 (4 runs every 1,024 positions), smollm2 at 4,096 (2 runs of its 128-key
  // blocks); 64-key blocks (1,024) have one run each, and a context the blocks do not divide
  // (4,000: 16 blocks of 256, the last clipped) keeps contiguous blocks.
  const auto kv_run = [&](const char* model, int64_t context) {
    return n_tile(default_schedule_config(preset(model), h100(), context), "attention", "kv_run");
  };
  EXPECT_EQ(kv_run("llama-3.2-1b", 4096), 64);
  EXPECT_EQ(kv_run("smollm2-135m", 4096), 64);
  EXPECT_EQ(kv_run("llama-3.2-1b", 1024), -1);
  EXPECT_EQ(kv_run("llama-3.2-1b", 4000), -1);
  EXPECT_EQ(kv_run("llama-3.2-1b", 512), -1);
  EXPECT_EQ(kv_run("llama-3.1-8b", 4096), 64);  // 4 query heads of 128 a task: 512 = 2 x 256
  // Only where the CUDA VM's block walk takes a task of one KV head: head_dim 96 is not a
  // multiple of 64 (BF16 rows of 8 vectors), so that shape keeps contiguous blocks.
  ModelConfig odd = preset("llama-3.2-1b");
  odd.head_dim = 96;
  EXPECT_EQ(n_tile(default_schedule_config(odd, h100(), 4096), "attention", "kv_run"), -1);
  EXPECT_EQ(n_tile(default_schedule_config(odd, h100(), 4096), "attention", "kv_block"), 256);
}

// q/k/v per head group where the derived tiles fall on the groups' boundaries anyway: the same
// tiles, a counter a group (qwen3-0.6b's 64-row tiles of 256 / 128-row groups, smollm2's 16 of
// 192 / 64), not where grouping would cut tiles (llama-3.2-1b's 48 of 256 / 64, the 8B's).
TEST(DefaultConfig, QkvByGroupWhereTheTilesFallOnTheGroups) {
  const GpuTarget& h200 = *find_target("h200");
  const auto grouped = [&](const char* model, int64_t context) {
    return n_tile(default_schedule_config(preset(model), h200, context), "attention",
                  "qkv_by_group");
  };
  EXPECT_EQ(grouped("qwen3-0.6b", 512), 1);
  EXPECT_EQ(grouped("smollm2-135m", 512), 1);
  EXPECT_EQ(grouped("qwen3-0.6b", 4096), 1);
  EXPECT_EQ(grouped("llama-3.2-1b", 512), -1);
  EXPECT_EQ(grouped("llama-3.2-1b", 4096), -1);
  EXPECT_EQ(grouped("llama-3.1-8b", 512), -1);
  EXPECT_EQ(grouped("qwen3-0.6b", 32), -1);  // one KV block: no split, no groups' tasks
  // The same tiles as per projection: only the counters change.
  const ModelConfig m = preset("qwen3-0.6b");
  ScheduleConfig c = default_schedule_config(m, h200, 512);
  const Program with = lower(m, c, h200, 512);
  for (auto& [archetype, sizes] : c.tiling)
    if (archetype == "attention") std::erase_if(sizes, [](const auto& kv) { return kv.first == "qkv_by_group"; });
  const Program without = lower(m, c, h200, 512);
  EXPECT_EQ(with.tasks.size(), without.tasks.size());
  EXPECT_LT(with.counters.size(), without.counters.size() + 8 * size_t(m.num_hidden_layers));
  EXPECT_GT(with.counters.size(), without.counters.size());
}

// The lm_head takes one tile per SM unless its strip partials would pass 32 KiB of scratch:
// qwen3-0.6b ceil(151936 / 132) = 1152 rows of 2 KiB (4 strips: 18 KiB of partials);
// llama-3.1-8b's 8 KiB rows have 16 strips, so 32 KiB / 64 bytes = 512 rows, not 972.
TEST(DefaultScheduleConfig, LmHeadTakesOneTileASmWithinItsPartialsBudget) {
  EXPECT_EQ(n_tile(default_schedule_config(preset("qwen3-0.6b"), h100(), 512), "lm_head",
                   "N_tile"),
            1152);
  EXPECT_EQ(n_tile(default_schedule_config(preset("llama-3.1-8b"), h100(), 512), "lm_head",
                   "N_tile"),
            512);
}

// Consumer threads: 6 warps only where a layer's BF16 weights per SM fit the ring's shared memory
// (196608 bytes on the H100) and every GEMV row keeps x in registers with 6 warps (strip period
// S / gcd(S, 6) <= 4 for S = 32-vector strips a BF16 row), 8 elsewhere.
// smollm2-135m: 2 x (576 x 960 + 576 x 576 + 3 x 576 x 1536 + 2 x 576 norm) = 7,080,192 bytes
// a layer, 53,638 a SM; hidden 576 and FFN 1536 -> S = 3, 6 -> P = 1, 1: 192.
// qwen3-0.6b: 2 x (1024 x 4096 + 2048 x 1024 + 3 x 1024 x 3072 + 2 x 1024 + 2 x 128 norms) =
// 31,461,888 bytes, 238,348 a SM (> 196608): 256, although its rows strip evenly (S = 4, 8,
// 12 -> P = 2, 4, 2).
// llama-3.2-1b: FFN 8192 -> S = 32 -> P = 16 (x from shared memory); llama-3.1-8b: hidden 4096
// -> S = 16 -> P = 8.
TEST(DefaultScheduleConfig, ChainBoundModelsWithEvenStripsTakeTheLeanBuild) {
  EXPECT_EQ(default_schedule_config(preset("smollm2-135m"), h100(), 512).threads_per_block, 192);
  EXPECT_EQ(default_schedule_config(preset("qwen3-0.6b"), h100(), 512).threads_per_block, 256);
  EXPECT_EQ(default_schedule_config(preset("llama-3.2-1b"), h100(), 512).threads_per_block, 256);
  EXPECT_EQ(default_schedule_config(preset("llama-3.1-8b"), h100(), 512).threads_per_block, 256);
  // The same smollm2 shape on a target whose shared memory cannot hold a layer a SM streams.
  GpuTarget small = h100();
  small.smem_bytes_per_block_optin = 80 * 1024;  // a 45 KiB ring
  EXPECT_EQ(default_schedule_config(preset("smollm2-135m"), small, 512).threads_per_block, 256);
}

// The weight ring: one 32 KiB stage short of the opt-in (232448 - 35840 = 196608 on the H100),
// but the whole opt-in (0) where a layer's BF16 weights per SM pass twice that (393216):
// llama-3.2-1b 2 x (2048 x 3072 + 2048 x 2048 + 3 x 2048 x 8192 + 2 x 2048) = 121,643,008 bytes
// a layer, 921,538 a SM; llama-3.1-8b 436,224,000 / 132 = 3,304,728; qwen3-0.6b 238,348 and
// smollm2-135m 53,638 keep the shorter ring. The rule reads the target: on a target whose
// opt-in is half the H100's the 1B's shorter ring would be 80,384, and qwen3 passes twice it.
TEST(DefaultScheduleConfig, StreamingBoundModelsTakeTheWholeOptIn) {
  for (const int64_t context : {int64_t{512}, int64_t{4096}}) {
    SCOPED_TRACE(context);
    EXPECT_EQ(default_schedule_config(preset("llama-3.2-1b"), h100(), context).smem_bytes_per_block,
              0);
    EXPECT_EQ(default_schedule_config(preset("llama-3.1-8b"), h100(), context).smem_bytes_per_block,
              0);
    EXPECT_EQ(default_schedule_config(preset("qwen3-0.6b"), h100(), context).smem_bytes_per_block,
              196608);
    EXPECT_EQ(
        default_schedule_config(preset("smollm2-135m"), h100(), context).smem_bytes_per_block,
        196608);
  }
  GpuTarget half = h100();
  half.smem_bytes_per_block_optin = 232448 / 2;
  EXPECT_EQ(default_schedule_config(preset("qwen3-0.6b"), half, 512).smem_bytes_per_block, 0);
  EXPECT_EQ(default_schedule_config(preset("smollm2-135m"), half, 512).smem_bytes_per_block,
            232448 / 2 - 35840);
}

// SmolLM2-135M by hand: one tile per SM would stream a few KiB a task (q/k/v ceil(960 / 132) =
// 8 rows of 1152 bytes); each GEMV tile streams at least 16 KiB instead: 16384 / 1152 -> 15 -> 16
// rows (a multiple of 4) for q/k/v, gate/up (K = 576: 16 < ceil(3072 / 132) = 24 rows -> GLU
// tiles of 12 features) and o_proj (K = q_dim 576), 16384 / 3072 -> 6 -> 8 for down_proj
// (K = 1536; one per SM would be 5). The lm_head: ceil(49152 / 132) = 373 -> 376 rows.
TEST(DefaultScheduleConfig, SmallModelTilesStreamAtLeast16KiB) {
  const ScheduleConfig c = default_schedule_config(preset("smollm2-135m"), h100(), 512);
  expect_projection_tiles(c, {16, 16, 16, 16, 12, -1, 8});
  EXPECT_EQ(n_tile(c, "lm_head", "N_tile"), 376);
}

// Every GEMV tile of the derived default writes a whole number of 16-byte words of F32 outputs
// at a 16-byte offset: rows, GLU features and lm_head rows in multiples of 4, or the whole
// projection.
TEST(DefaultScheduleConfig, TilesWriteWhole16ByteWords) {
  for (const char* name :
       {"llama-3.2-1b", "qwen3-0.6b", "smollm2-135m", "llama-3.1-8b", "qwen2.5-0.5b"}) {
    SCOPED_TRACE(name);
    const ScheduleConfig c = default_schedule_config(preset(name), h100(), 512);
    for (const char* a : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "down_proj",
                          "lm_head"})
      EXPECT_EQ(n_tile(c, a, "N_tile") % 4, 0) << a;
  }
}

// ... and so every GEMV tile of every preset's derived program does, the lm_head's included.
TEST(DefaultScheduleConfig, EveryGemvTileOfThePresetsWritesWhole16ByteWords) {
  for (const char* name :
       {"llama-3.2-1b", "qwen3-0.6b", "smollm2-135m", "llama-3.1-8b", "qwen2.5-0.5b"}) {
    SCOPED_TRACE(name);
    const ModelConfig m = preset(name);
    const Program p = lower(m, default_schedule_config(m, h100(), 512), h100(), 512);
    std::map<int64_t, const Buffer*> by_id;
    for (const Buffer& b : p.buffers) by_id[b.id] = &b;
    int gemv_tiles = 0;
    for (const Task& t : p.tasks) {
      if (!is_gemv_family(t.op)) continue;
      ++gemv_tiles;
      const Buffer& out = *by_id.at(t.outputs.at(0));
      const int64_t n_off = t.params.get_int("n_off", 0), n_tile = t.params.get_int("N_tile", 0);
      EXPECT_GT(n_tile, 0) << t.label;
      EXPECT_TRUE(dtype_nbytes(out.dtype, n_off) % 16 == 0 &&
                  dtype_nbytes(out.dtype, n_tile) % 16 == 0)
          << t.label << ": n_off " << n_off << ", N_tile " << n_tile;
    }
    EXPECT_GT(gemv_tiles, 0);
  }
}

// Every preset: the derived program validates, and each streaming level has between half the
// SMs (or as many tiles as 16 KiB a tile allows, if fewer) and the SMs plus one ragged tile per
// projection.
TEST(DefaultScheduleConfig, EveryLevelUsesAboutEverySm) {
  const int64_t sms = h100().num_sms;
  for (const char* name : {"llama-3.2-1b", "qwen3-0.6b", "smollm2-135m", "llama-3.1-8b"}) {
    SCOPED_TRACE(name);
    const bool split = std::string(name) != "llama-3.1-8b";
    const ModelConfig m = preset(name);
    const Program p = lower(m, default_schedule_config(m, h100(), 512), h100(), 512);
    EXPECT_TRUE(validate(p).ok);
    std::map<std::string, int64_t> tiles;  // level of layer 0 -> tiles
    for (const Task& t : p.tasks) {
      if (!t.label.starts_with("L0.")) continue;
      const std::string stage = t.label.substr(3, t.label.find('[') - 3);
      const std::string level = stage == "q_proj" || stage == "k_proj" || stage == "v_proj" ? "qkv"
                                : stage == "gate_up_proj"                                   ? "gate_up"
                                                                                            : stage;
      ++tiles[level];
    }
    // Weight bytes of each level (BF16) and its projections.
    const std::map<std::string, std::pair<int64_t, int64_t>> levels{
        {"qkv", {2 * m.hidden_size * (m.q_dim() + 2 * m.kv_dim()), 3}},
        {"gate_up", {2 * m.hidden_size * 2 * m.intermediate_size, 2}},
        {"o_proj", {2 * m.q_dim() * m.hidden_size, 1}},
        {"down_proj", {2 * m.intermediate_size * m.hidden_size, 1}}};
    for (const auto& [level, shape] : levels) {
      SCOPED_TRACE(level);
      const auto [bytes, projections] = shape;
      // q/k/v leave the attention's block tasks SMs of their own (at most half of them).
      const int64_t over = level == "qkv" ? sms - std::min(tiles["attention"], sms / 2) : sms;
      EXPECT_GE(tiles[level], std::min(over / 2, bytes / (16 * 1024) / 2));
      EXPECT_LE(tiles[level], sms + projections);
      EXPECT_LE(tiles[level], bytes / (16 * 1024) + projections);  // >= 16 KiB a tile
    }
  }
}

// The default context of run / generate / serve (4,096 tokens, 16 or 32 blocks a KV head): the
// derived program validates, and its o_proj tiles merge the partials (no ATTENTION_COMBINE
// task: a combine tree would add two levels a layer at every position).
TEST(DefaultScheduleConfig, ALongContextsPartialsAreMergedByOProj) {
  for (const char* name : {"llama-3.2-1b", "qwen3-0.6b", "smollm2-135m", "llama-3.1-8b"}) {
    SCOPED_TRACE(name);
    const ModelConfig m = preset(name);
    const Program p = lower(m, default_schedule_config(m, h100(), 4096), h100(), 4096);
    EXPECT_TRUE(validate(p).ok);
    int64_t combines = 0, merging_tiles = 0;
    for (const Task& t : p.tasks) {
      combines += t.op == Op::ATTENTION_COMBINE;
      merging_tiles += t.op == Op::COMBINE_GEMV_ADD_TILE;
    }
    EXPECT_EQ(combines, 0);
    EXPECT_GE(merging_tiles, m.num_hidden_layers);
  }
}

// Where the attention level's block tasks take at most half the SMs and the wider q/k/v tile
// still fits the weight ring, the q/k/v tiles leave them SMs of their own: in every layer of the
// round_robin program no SM that runs a q/k/v tile runs one of that layer's block tasks.
// qwen3-0.6b's q/k/v take 64 rows (32 + 16 + 16 tiles beside 64 block tasks; 32 rows was 128
// tiles; 64 x 2 KiB = 128 KiB <= the 192 KiB ring); the 1B's 48 rows of 4 KiB (192 KiB <= its
// whole-opt-in ring of 227 KiB); smollm2-135m's 24 block tasks leave its 16-row tiles as they
// were; at a 4,096 context the 1B's 128 block tasks are more than half the SMs, and q/k/v spread
// over every SM as before (24 rows). llama-3.1-8b's split tile would be 96 rows of 8 KiB (768
// KiB, past its 227 KiB ring): it keeps 48 rows on every SM.
TEST(DefaultScheduleConfig, QkvTilesLeaveTheAttentionBlocksSmsOfTheirOwn) {
  EXPECT_EQ(n_tile(default_schedule_config(preset("llama-3.2-1b"), h100(), 512), "q_proj", "N_tile"),
            48);
  EXPECT_EQ(n_tile(default_schedule_config(preset("llama-3.1-8b"), h100(), 512), "q_proj", "N_tile"),
            48);
  EXPECT_EQ(n_tile(default_schedule_config(preset("qwen3-0.6b"), h100(), 512), "q_proj", "N_tile"),
            64);
  EXPECT_EQ(
      n_tile(default_schedule_config(preset("smollm2-135m"), h100(), 512), "q_proj", "N_tile"), 16);
  EXPECT_EQ(
      n_tile(default_schedule_config(preset("llama-3.2-1b"), h100(), 4096), "q_proj", "N_tile"),
      24);
  for (const char* name : {"llama-3.2-1b", "qwen3-0.6b", "smollm2-135m", "llama-3.1-8b"}) {
    SCOPED_TRACE(name);
    const bool split = std::string(name) != "llama-3.1-8b";
    const ModelConfig m = preset(name);
    const Program p = lower(m, default_schedule_config(m, h100(), 512), h100(), 512);
    std::map<int64_t, std::set<int64_t>> qkv_sms, attention_sms;  // layer -> SMs
    for (const Task& t : p.tasks) {
      if (!t.label.starts_with("L") || !t.sm) continue;
      const int64_t layer = std::stoll(t.label.substr(1, t.label.find('.') - 1));
      const std::string stage = t.label.substr(t.label.find('.') + 1);
      if (stage.starts_with("q_proj[") || stage.starts_with("k_proj[") ||
          stage.starts_with("v_proj["))
        qkv_sms[layer].insert(*t.sm);
      if (stage.starts_with("attention[")) attention_sms[layer].insert(*t.sm);
    }
    ASSERT_EQ(qkv_sms.size(), size_t(m.num_hidden_layers));
    ASSERT_EQ(attention_sms.size(), size_t(m.num_hidden_layers));
    for (const auto& [layer, sms] : attention_sms) {
      SCOPED_TRACE(layer);
      int64_t shared = 0;
      for (const int64_t sm : sms) shared += qkv_sms[layer].contains(sm);
      if (split)
        EXPECT_EQ(shared, 0);
      else
        EXPECT_GT(shared, 0);  // q/k/v on every SM: the block tasks share theirs
    }
  }
}

}  // namespace
