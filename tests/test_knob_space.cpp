// The knob space (amk/knob_space.h) as the one source of truth: a value out of a knob's range is
// refused with the same message by the config loader and by the lowering, and every knob the
// search moves changes the lowered program.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "amk/json.h"
#include "amk/knob_space.h"
#include "amk/lowering.h"
#include "amk/model_presets.h"
#include "amk/schedule_config_io.h"
#include "amk/schedule_proposer.h"
#include "vm/cuda/marshal.h"

namespace amk {
namespace {

ModelConfig tiny() { return parse_model_config(model_preset_config("tiny", "float32")); }

std::string lowering_error(const ScheduleConfig& c) {
  try {
    (void)lower(tiny(), c, *find_target("h100"), 512);
  } catch (const LoweringError& e) {
    return e.what();
  }
  return "";
}

std::string loader_error(const std::string& json) {
  const ConfigParse p = parse_schedule_config(json);
  return p.config ? "" : p.error;
}

TEST(KnobSpace, EveryIntegerKnobIsRefusedOutOfRangeByTheLoaderAndTheLoweringAlike) {
  int checked = 0;
  for (const KnobSpec& k : schedule_knob_space()) {
    if (k.kind != KnobKind::Integer) continue;
    SCOPED_TRACE(k.name);
    // Just past the top, and just below the bottom (0 is legal where it means "auto").
    for (int64_t bad : {k.max + 1, k.zero_is_auto ? int64_t{-1} : k.min - 1}) {
      const std::string from_loader = loader_error(fmt::format("{{\"{}\": {}}}", k.name, bad));
      ScheduleConfig c;
      set_integer_knob(c, k.name, bad);
      const std::string from_lowering = lowering_error(c);
      EXPECT_NE(from_loader.find(k.name), std::string::npos) << from_loader;
      EXPECT_NE(from_loader.find(std::to_string(bad)), std::string::npos) << from_loader;
      EXPECT_EQ(from_loader, from_lowering);
      ++checked;
    }
  }
  EXPECT_GE(checked, 12);
}

TEST(KnobSpace, ThreadsPerBlockHasOneRangeTheCudaLoaderShares) {
  // 32 and 1024 are CUDA blocks, but the CUDA VM needs a producer warp on top: both refused.
  for (int64_t t : {32, 1024, 100}) {
    EXPECT_FALSE(loader_error(fmt::format("{{\"threads_per_block\": {}}}", t)).empty()) << t;
  }
  EXPECT_EQ(loader_error("{\"threads_per_block\": 64}"), "");
  EXPECT_EQ(loader_error("{\"threads_per_block\": 992}"), "");
  EXPECT_EQ(knob_spec("threads_per_block").min, kMinThreadsPerBlock);
  EXPECT_EQ(knob_spec("threads_per_block").max, kMaxThreadsPerBlock);
}

TEST(KnobSpace, ChoicesAndGroupsOutsideTheSpaceAreRefused) {
  EXPECT_NE(loader_error("{\"page_allocation\": \"buddy\"}").find("page_allocation 'buddy'"),
            std::string::npos);
  EXPECT_NE(loader_error("{\"sm_assignment\": \"random\"}").find("sm_assignment 'random'"),
            std::string::npos);
  EXPECT_NE(loader_error("{\"fusion_grouping\": [[\"gelu\", \"gemv\"]]}").find("[gelu, gemv]"),
            std::string::npos);
  EXPECT_NE(loader_error("{\"tiling\": {\"q_proj\": {\"N_tile\": 0}}}").find("tiling.q_proj.N_tile"),
            std::string::npos);
  // In range: accepted, and a target cap is a lowering matter (the loader knows no target).
  EXPECT_EQ(loader_error("{\"smem_bytes_per_block\": 300000}"), "");
  ScheduleConfig c;
  c.smem_bytes_per_block = 300000;
  EXPECT_NE(lowering_error(c).find("smem_bytes_per_block_optin"), std::string::npos);
}

TEST(KnobSpace, TileKnobsReadAndWriteTheTilingMap) {
  ScheduleConfig c;
  EXPECT_FALSE(integer_knob(c, "tiling.q_proj.N_tile"));
  set_integer_knob(c, "tiling.q_proj.N_tile", 8);
  set_integer_knob(c, "tiling.attention.kv_block", 64);
  set_integer_knob(c, "tiling.attention.kv_heads", 1);
  EXPECT_EQ(integer_knob(c, "tiling.q_proj.N_tile"), 8);
  ASSERT_EQ(c.tiling.size(), 2u);
  set_integer_knob(c, "tiling.q_proj.N_tile", std::nullopt);
  EXPECT_EQ(c.tiling.size(), 1u);
  EXPECT_THROW(knob_spec("no_such_knob"), std::out_of_range);
}

// Program minus its config: what the tasks, buffers and pages are.
std::string without_config(Program p) {
  p.config.reset();
  return program_to_json(p);
}

TEST(KnobSpace, EveryKnobTheSearchMovesChangesTheLoweredProgram) {
  const ModelConfig m = tiny();
  const GpuTarget& t = *find_target("h100");
  const ScheduleConfig defaults = default_schedule_config(m, t, 512);
  const search::SearchContext ctx{m, t, 512, defaults};
  std::set<std::string> knobs_seen;
  // From the default, and from its gemv+silu_mul neighbour without the GLU tiles, where
  // silu_mul+gemv and tiling.up_proj are knobs again (the default refuses them: they would
  // change nothing there).
  std::vector<std::pair<ScheduleConfig, search::Proposal>> moves;
  for (search::Proposal& p : search::one_knob_neighbours(defaults, ctx)) {
    if (p.knob == "fusion_grouping.gemv+silu_mul") {
      EXPECT_TRUE(std::none_of(p.config.fusion_grouping.begin(), p.config.fusion_grouping.end(),
                               [](const auto& g) { return spell_group(g) == "gemv+silu_mul"; }));
      for (search::Proposal& q : search::one_knob_neighbours(p.config, ctx))
        moves.emplace_back(p.config, std::move(q));
    }
    moves.emplace_back(defaults, std::move(p));
  }
  for (const auto& [from, p] : moves) {
    SCOPED_TRACE(p.change);
    const Program base = lower(m, from, t, 512);
    Program changed;
    try {
      changed = lower(m, p.config, t, 512);
    } catch (const LoweringError&) {
      continue;  // a value this model cannot take (the search logs it as REJECTED)
    }
    knobs_seen.insert(p.knob);
    const std::string name =
        p.knob.starts_with("fusion_grouping.") ? std::string("fusion_grouping") : p.knob;
    if (knob_spec(name).effect == KnobEffect::Tasks) {
      EXPECT_NE(without_config(changed), without_config(base));
    } else {  // a launch knob: the config the CUDA loader lays the kernel out from
      EXPECT_NE(config_to_json(*changed.config), config_to_json(*base.config));
      // ... and the layout it lays out: a value the loader rounds to the default's (a bound
      // under one ring stage, the auto chunk spelled out) would measure the default again. A
      // value whose layout the loader refuses (a ring that does not fit) is REJECTED there.
      const auto layout = [](const Program& p) {
        const cuda::MegakernelLayout l = cuda::marshal(p, cuda::MarshalLimits{}).layout;
        return std::vector<int>{l.consumer_threads, l.scratch_bytes, l.chunk_bytes,
                                l.ring_stages, l.inflight_chunks, l.prefetch_chunks};
      };
      try {
        EXPECT_NE(layout(changed), layout(base));
      } catch (const cuda::MarshalError&) {
      }
    }
  }
  // Every searched knob had at least one value this model lowers, kv_heads included: both KV
  // heads in one task beside the default's [rope, attention] fusion lowers and validates (the
  // fused attention writes its partial whole and only its window's rows of the caches; the
  // validator once read the caches' region for the partial and refused the program).
  for (const std::string& k : search::searched_knobs()) EXPECT_TRUE(knobs_seen.contains(k)) << k;
  // gemv+silu_mul+gemv is a group the lowering knows (so a config naming it is valid) but the
  // search leaves alone: the CUDA VM has no device code for it.
  const std::vector<std::string> searched = search::searched_knobs();
  EXPECT_EQ(std::count(searched.begin(), searched.end(), "fusion_grouping.gemv+silu_mul+gemv"), 0);
  EXPECT_EQ(std::count(searched.begin(), searched.end(), "fusion_grouping.gemv+silu_mul"), 1);
  ScheduleConfig two_heads = defaults;
  set_integer_knob(two_heads, "tiling.attention.kv_heads", 2);
  EXPECT_NE(without_config(lower(m, two_heads, t, 512)), without_config(lower(m, defaults, t, 512)));
}

// Toggling gemv+silu_mul swaps it with silu_mul+gemv and carries the gate/up level's tiling
// over (GLU tiles of n features read 2n rows, as 2n-row gate and up tiles do), so the
// experiment moves one thing; from the default, up_proj and silu_mul+gemv are not proposed
// (the lowering refuses them beside the GLU tiles).
TEST(KnobSpace, GluToggleCarriesTheGateUpTiling) {
  const ModelConfig m =
      parse_model_config(model_preset_config("llama-3.2-1b", "bfloat16"), "llama-3.2-1b");
  const GpuTarget& t = *find_target("h100");
  const ScheduleConfig defaults = default_schedule_config(m, t, 512);
  const search::SearchContext ctx{m, t, 512, defaults};
  const auto has = [](const ScheduleConfig& c, const std::string& g) {
    return std::any_of(c.fusion_grouping.begin(), c.fusion_grouping.end(),
                       [&](const auto& x) { return spell_group(x) == g; });
  };
  const auto neighbours = search::one_knob_neighbours(defaults, ctx);
  std::optional<ScheduleConfig> off;
  for (const search::Proposal& p : neighbours) {
    EXPECT_NE(p.knob, "tiling.up_proj.N_tile");
    EXPECT_NE(p.knob, "fusion_grouping.silu_mul+gemv");
    if (p.knob == "fusion_grouping.gemv+silu_mul") off = p.config;
  }
  ASSERT_TRUE(off.has_value());
  EXPECT_FALSE(has(*off, "gemv+silu_mul"));
  EXPECT_TRUE(has(*off, "silu_mul+gemv"));
  EXPECT_EQ(integer_knob(*off, "tiling.gate_proj.N_tile"), 128);
  EXPECT_EQ(integer_knob(*off, "tiling.up_proj.N_tile"), 128);
  for (const search::Proposal& p : search::one_knob_neighbours(*off, ctx)) {
    if (p.knob != "fusion_grouping.gemv+silu_mul") continue;
    EXPECT_TRUE(has(p.config, "gemv+silu_mul"));
    EXPECT_FALSE(has(p.config, "silu_mul+gemv"));
    EXPECT_EQ(integer_knob(p.config, "tiling.gate_proj.N_tile"), 64);
    EXPECT_EQ(integer_knob(p.config, "tiling.up_proj.N_tile"), std::nullopt);
    (void)lower(m, p.config, t, 512);  // lowers: nothing the GLU tiles refuse is left
  }
}

}  // namespace
}  // namespace amk
