#include "amk/schedule_proposer.h"

#include <fmt/format.h>

#include <algorithm>

#include "amk/knob_space.h"
#include "amk/lowering.h"

namespace amk::search {

namespace {

// Output rows of the level a tile knob splits, the most a tile can usefully be.
int64_t tile_rows(const std::string& knob, const ModelConfig& m) {
  if (knob == "tiling.q_proj.N_tile") return m.q_dim();
  if (knob == "tiling.k_proj.N_tile" || knob == "tiling.v_proj.N_tile") return m.kv_dim();
  if (knob == "tiling.o_proj.N_tile" || knob == "tiling.down_proj.N_tile") return m.hidden_size;
  if (knob == "tiling.gate_proj.N_tile" || knob == "tiling.up_proj.N_tile")
    return m.intermediate_size;
  return m.vocab_size;  // lm_head, sample_argmax
}

const std::string kGemvSiluMul = "gemv+silu_mul", kSiluMulGemv = "silu_mul+gemv";
// attention_combine+gemv needs gemv+add and a kv_block split (the lowering refuses it alone).
const std::string kCombineGemv = "attention_combine+gemv", kGemvAdd = "gemv+add";
// gemv+silu_mul+gemv needs rmsnorm+gemv, gemv+silu_mul and gemv+add, and refuses a down_proj
// tile (its GLU tiles take down_proj's columns of their own features).
const std::string kGluDown = "gemv+silu_mul+gemv", kRmsnormGemv = "rmsnorm+gemv";
// tiling.attention.qkv_by_group needs rope+attention.
const std::string kRopeAttention = "rope+attention";

bool has_group(const ScheduleConfig& c, const std::string& spelled) {
  for (const auto& g : c.fusion_grouping)
    if (spell_group(g) == spelled) return true;
  return false;
}

std::string choice_value(const ScheduleConfig& c, const std::string& knob) {
  if (knob == "page_allocation") return c.page_allocation;
  if (const auto* s = std::get_if<std::string>(&c.sm_assignment)) return *s;
  return "explicit";
}

}  // namespace

std::vector<std::string> searched_knobs() {
  std::vector<std::string> names;
  for (const KnobSpec& k : schedule_knob_space()) {
    if (k.name == "tiling.gemv.N_tile") continue;  // every projection has its own
    // The tensor-parallel step is proposed once its clusters hand off in shared memory
    // (docs/CLUSTER_TP.md stage 3); through global memory it only measures the hops.
    if (k.name.starts_with("tiling.tp.")) continue;
    if (k.kind == KnobKind::GroupSet) {
      // gemv+silu_mul+gemv lowers and runs on the reference VM, but the CUDA VM has no device
      // code for it (bench/attempts/glu-down-device.patch: +9.4 % on the H200 as built), so a
      // search would only collect refusals.
      for (const auto& g : k.choices)
        if (g != kGluDown) names.push_back("fusion_grouping." + g);
      continue;
    }
    names.push_back(k.name);
  }
  return names;
}

namespace {

// The values `knob` may take in a search from `c`, the current one excluded.
std::vector<Proposal> values_of(const ScheduleConfig& c, const std::string& knob,
                                const SearchContext& ctx) {
  std::vector<Proposal> out;
  std::vector<std::string> values;  // each value once (scaled tiles clamp onto the same width)
  const auto add = [&](ScheduleConfig next, const std::string& to) {
    const std::string from = knob_value_text(c, knob);
    if (from == to || std::find(values.begin(), values.end(), to) != values.end()) return;
    values.push_back(to);
    out.push_back({std::move(next), knob, fmt::format("{} {} -> {}", knob, from, to), ""});
  };
  if (knob.starts_with("fusion_grouping.")) {
    const std::string g = knob.substr(16);
    // gemv+silu_mul replaces silu_mul+gemv (the lowering refuses both): the latter is no knob
    // while the former is on, and toggling the former swaps them, carrying the gate/up level's
    // tiling over (a GLU tile of n features reads 2n rows, as one 2n-row gate or up tile does:
    // the same tiles and bytes a tile), so the experiment changes one thing: where SwiGLU runs.
    if (g == kSiluMulGemv && has_group(c, kGemvSiluMul)) return out;
    // attention_combine+gemv is no knob without what it needs, and gemv+add off takes it along.
    if (g == kCombineGemv && !has_group(c, kCombineGemv) &&
        (!has_group(c, kGemvAdd) || !integer_knob(c, "tiling.attention.kv_block")))
      return out;
    if (g == kGluDown && !has_group(c, kGluDown) &&
        (!has_group(c, kGemvAdd) || !has_group(c, kGemvSiluMul) || !has_group(c, kRmsnormGemv)))
      return out;
    ScheduleConfig next = c;
    const auto drop = [&](const std::string& group) {
      std::erase_if(next.fusion_grouping,
                    [&](const std::vector<std::string>& x) { return spell_group(x) == group; });
    };
    const std::optional<int64_t> gate = integer_knob(c, "tiling.gate_proj.N_tile");
    if (has_group(c, g)) {
      drop(g);
      if (g == kGemvAdd) drop(kCombineGemv);
      // q/k/v per head group needs the fused attention: it goes along.
      if (g == kRopeAttention) set_integer_knob(next, "tiling.attention.qkv_by_group", std::nullopt);
      // Without what it needs the down fusion goes too, and down_proj gets its derived tile.
      if (has_group(c, kGluDown) && (g == kGluDown || g == kGemvAdd || g == kGemvSiluMul || g == kRmsnormGemv)) {
        drop(kGluDown);
        set_integer_knob(next, "tiling.down_proj.N_tile",
                         integer_knob(ctx.defaults, "tiling.down_proj.N_tile"));
      }
      if (g == kGemvSiluMul) {
        next.fusion_grouping.push_back(parse_group(kSiluMulGemv));
        if (gate) {
          set_integer_knob(next, "tiling.gate_proj.N_tile", 2 * *gate);
          set_integer_knob(next, "tiling.up_proj.N_tile", 2 * *gate);
        }
      }
      add(std::move(next), "off");
    } else {
      next.fusion_grouping.push_back(parse_group(g));
      if (g == kGluDown) set_integer_knob(next, "tiling.down_proj.N_tile", std::nullopt);
      if (g == kGemvSiluMul) {
        drop(kSiluMulGemv);
        if (gate) set_integer_knob(next, "tiling.gate_proj.N_tile", (*gate + 1) / 2);
        set_integer_knob(next, "tiling.up_proj.N_tile", std::nullopt);
      }
      add(std::move(next), "on");
    }
    return out;
  }
  // gate_proj sets the GLU tiles' width; up_proj is refused with them, down_proj with the down
  // fusion.
  if (knob == "tiling.up_proj.N_tile" && has_group(c, kGemvSiluMul)) return out;
  if (knob == "tiling.down_proj.N_tile" && has_group(c, kGluDown)) return out;
  const KnobSpec& k = knob_spec(knob);
  if (k.kind == KnobKind::Choice) {
    for (const auto& v : k.choices) {
      ScheduleConfig next = c;
      if (knob == "page_allocation") next.page_allocation = v;
      else next.sm_assignment = v;
      add(std::move(next), v);
    }
    return out;
  }
  if (k.kind == KnobKind::Integer) {
    for (int64_t v : k.search_values) {
      if (k.cap == TargetCap::SmemOptin && v > ctx.target.smem_bytes_per_block_optin) continue;
      if (k.cap == TargetCap::MaxThreadsPerSm && ctx.target.max_threads_per_sm > 0 &&
          v > ctx.target.max_threads_per_sm)
        continue;
      ScheduleConfig next = c;
      set_integer_knob(next, knob, v);
      add(std::move(next), std::to_string(v));
    }
    return out;
  }
  // Tile knobs.
  const int64_t ctxlen = ctx.max_context;
  if (knob == "tiling.attention.kv_block") {
    // Powers of two from 16 that split the context into 2..kMaxKvBlocks blocks (more than 8: a
    // two-level combine tree), or no split at all.
    for (int64_t b = 16; b < ctxlen; b *= 2) {
      const int64_t blocks = (ctxlen + b - 1) / b;
      if (blocks < 2 || blocks > kMaxKvBlocks) continue;
      ScheduleConfig next = c;
      set_integer_knob(next, knob, b);
      // A strided block's runs must divide the block, and the block the context.
      if (const auto run = integer_knob(next, "tiling.attention.kv_run");
          run && (b % *run != 0 || ctxlen % b != 0))
        set_integer_knob(next, "tiling.attention.kv_run", std::nullopt);
      add(std::move(next), std::to_string(b));
    }
    ScheduleConfig none = c;
    set_integer_knob(none, "tiling.attention.kv_block", std::nullopt);
    set_integer_knob(none, "tiling.attention.kv_heads", std::nullopt);
    set_integer_knob(none, "tiling.attention.kv_run", std::nullopt);
    std::erase_if(none.fusion_grouping, [](const std::vector<std::string>& g) {
      return spell_group(g) == kCombineGemv;  // no split, no combine to fuse
    });
    add(std::move(none), "absent");
    return out;
  }
  if (knob == "tiling.attention.kv_run") {
    // Runs of 64 keys and up (the CUDA VM's key blocks) that divide the block, or contiguous
    // blocks.
    const auto block = integer_knob(c, "tiling.attention.kv_block");
    if (!block || ctxlen % *block != 0) return out;
    for (int64_t r = 64; r < *block; r *= 2) {
      if (*block % r != 0) continue;
      ScheduleConfig next = c;
      set_integer_knob(next, knob, r);
      add(std::move(next), std::to_string(r));
    }
    // Blocks of one run (64 keys, a 512 context's default) stride nothing: half as many blocks
    // of two strided runs each.
    if (*block <= 64 && ctxlen % 128 == 0 && ctxlen / 128 >= 2) {
      ScheduleConfig next = c;
      set_integer_knob(next, "tiling.attention.kv_block", 128);
      set_integer_knob(next, knob, 64);
      add(std::move(next), "64 (kv_block 128)");
    }
    ScheduleConfig contiguous = c;
    set_integer_knob(contiguous, knob, std::nullopt);
    add(std::move(contiguous), "absent");
    return out;
  }
  if (knob == "tiling.attention.qkv_by_group") {
    // Only the fused attention reads q/k/v as the tiles wrote them (the lowering refuses it
    // otherwise): on or off.
    if (!has_group(c, kRopeAttention)) return out;
    const bool on = integer_knob(c, knob).value_or(0) == 1;
    ScheduleConfig next = c;
    set_integer_knob(next, knob, on ? std::nullopt : std::optional<int64_t>(1));
    add(std::move(next), on ? "absent" : "1");
    return out;
  }
  if (knob == "tiling.attention.kv_heads") {
    if (!integer_knob(c, "tiling.attention.kv_block")) return out;  // needs a split
    const int64_t nkv = std::max<int64_t>(ctx.model.num_key_value_heads, 1);
    for (int64_t g = 1; g <= nkv; ++g) {
      if (nkv % g != 0) continue;
      ScheduleConfig next = c;
      set_integer_knob(next, knob, g);
      add(std::move(next), std::to_string(g));
    }
    return out;
  }
  // A GEMV / argmax tile: the current width (or the default's) scaled by 1/4 .. 4, within the
  // level's rows; the argmax keeps multiples of 4 (16-byte loads).
  const int64_t rows = std::max<int64_t>(tile_rows(knob, ctx.model), 1);
  const int64_t base = integer_knob(c, knob).value_or(
      integer_knob(ctx.defaults, knob).value_or(std::min<int64_t>(256, rows)));
  for (double f : {0.25, 0.5, 2.0, 4.0}) {
    int64_t v = std::clamp<int64_t>(int64_t(double(base) * f + 0.5), 1, rows);
    if (knob == "tiling.sample_argmax.N_tile") v = std::max<int64_t>(4, (v + 3) / 4 * 4);
    ScheduleConfig next = c;
    set_integer_knob(next, knob, v);
    add(std::move(next), std::to_string(v));
  }
  return out;
}

}  // namespace

std::string knob_value_text(const ScheduleConfig& c, const std::string& knob) {
  if (knob.starts_with("fusion_grouping."))
    return has_group(c, knob.substr(16)) ? "on" : "off";
  const KnobSpec& k = knob_spec(knob);
  if (k.kind == KnobKind::Choice) return choice_value(c, knob);
  const auto v = integer_knob(c, knob);
  return v ? std::to_string(*v) : "absent";
}

std::vector<Proposal> one_knob_neighbours(const ScheduleConfig& incumbent, const SearchContext& ctx) {
  std::vector<Proposal> all;
  for (const std::string& knob : searched_knobs())
    for (Proposal& p : values_of(incumbent, knob, ctx)) all.push_back(std::move(p));
  for (Proposal& p : all) p.source = "sweep";
  return all;
}

Proposal random_mutation(const ScheduleConfig& incumbent, const SearchContext& ctx,
                         std::mt19937_64& rng) {
  const std::vector<std::string> knobs = searched_knobs();
  for (int attempt = 0; attempt < 64; ++attempt) {
    const std::string& knob = knobs[std::uniform_int_distribution<size_t>(0, knobs.size() - 1)(rng)];
    std::vector<Proposal> options = values_of(incumbent, knob, ctx);
    if (options.empty()) continue;
    Proposal p = std::move(options[std::uniform_int_distribution<size_t>(0, options.size() - 1)(rng)]);
    p.source = "mutation";
    return p;
  }
  Proposal p{incumbent, "pipelining_depth", "", "mutation"};
  p.config.pipelining_depth = incumbent.pipelining_depth == 0 ? 1 : 0;
  p.change = fmt::format("pipelining_depth {} -> {}", incumbent.pipelining_depth,
                         p.config.pipelining_depth);
  return p;
}

Proposal random_point(const SearchContext& ctx, std::mt19937_64& rng) {
  ScheduleConfig c = ctx.defaults;
  for (const std::string& knob : searched_knobs()) {
    std::vector<Proposal> options = values_of(c, knob, ctx);
    // Keep the current value with the same chance as each other one.
    const size_t pick = std::uniform_int_distribution<size_t>(0, options.size())(rng);
    if (pick < options.size()) c = std::move(options[pick].config);
  }
  return {std::move(c), "*", "a fresh random point of the space", "random point"};
}

}  // namespace amk::search
