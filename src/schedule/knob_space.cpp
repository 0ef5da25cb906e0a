// The table behind amk/knob_space.h. Ranges are the truth for every reader: changing one here
// changes what the lowering accepts, what a --config file may hold, what the CUDA loader lays
// out and what the search proposes.
#include "amk/knob_space.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "amk/lowering.h"

namespace amk {

namespace {

constexpr int64_t kMaxParam = (int64_t{1} << 31) - 1;  // params are marshalled as int32

KnobSpec integer(std::string name, KnobEffect effect, int tier, int64_t min, int64_t max,
                 int64_t multiple_of, bool zero_is_auto, TargetCap cap, std::string range,
                 std::string default_rule, std::string meaning, std::vector<int64_t> search) {
  KnobSpec k;
  k.name = std::move(name);
  k.kind = KnobKind::Integer;
  k.effect = effect;
  k.tier = tier;
  k.min = min;
  k.max = max;
  k.multiple_of = multiple_of;
  k.zero_is_auto = zero_is_auto;
  k.cap = cap;
  k.range = std::move(range);
  k.default_rule = std::move(default_rule);
  k.meaning = std::move(meaning);
  k.search_values = std::move(search);
  return k;
}

KnobSpec tile(std::string archetype, std::string key, std::string default_rule,
              std::string meaning) {
  KnobSpec k;
  k.name = fmt::format("tiling.{}.{}", archetype, key);
  k.kind = KnobKind::Tile;
  k.effect = KnobEffect::Tasks;
  k.tier = 2;
  k.min = 1;
  k.max = kMaxParam;
  k.range = ">= 1 (at most the rows of the level; the lowering checks the model's limits)";
  k.default_rule = std::move(default_rule);
  k.meaning = std::move(meaning);
  return k;
}

KnobSpec choice(std::string name, int tier, std::vector<std::string> choices,
                std::string default_rule, std::string meaning) {
  KnobSpec k;
  k.name = std::move(name);
  k.kind = KnobKind::Choice;
  k.effect = KnobEffect::Tasks;
  k.tier = tier;
  k.choices = std::move(choices);
  std::string list;
  for (const auto& c : k.choices) list += (list.empty() ? "" : " | ") + c;
  k.range = list;
  k.default_rule = std::move(default_rule);
  k.meaning = std::move(meaning);
  return k;
}

std::vector<KnobSpec> make_space() {
  std::vector<KnobSpec> s;
  s.push_back(integer(
      "pipelining_depth", KnobEffect::Tasks, 1, 0, 16, 1, false, TargetCap::None, "[0, 16]", "4",
      "weight prefetch distance: a GEMV tile's weights start streaming once the consumers have "
      "started the tile this many places earlier on its SM (lowered into GEMV tiles' M_tile "
      "param, the slot the loader reads it from)",
      {0, 1, 2, 3, 4, 6, 8}));
  const char* per_sm =
      "the level's rows split evenly over the target's SMs, but at least 16 KiB of BF16 rows, "
      "in multiples of 4";
  const char* qkv_rule =
      "q/k/v's rows split evenly over the SMs the attention's block tasks leave free where those "
      "take at most half the SMs and such a tile fits the weight ring, else over every SM; at "
      "least 16 KiB of BF16 rows, in multiples of 4";
  const auto projection = [&](const char* proj, const char* rule) {
    s.push_back(tile(proj, "N_tile", rule,
                     fmt::format("output rows per {} GEMV tile: more tiles = more SMs busy, "
                                 "fewer = less per-tile overhead",
                                 proj)));
  };
  for (const char* proj : {"q_proj", "k_proj", "v_proj"}) projection(proj, qkv_rule);
  projection("o_proj", per_sm);
  // Gate and up share the GLU tiles of gemv+silu_mul, which gate_proj sizes.
  s.push_back(tile("gate_proj", "N_tile",
                   "half the gate/up level's rows per SM (features; gemv+silu_mul)",
                   "output rows per gate_proj GEMV tile; with gemv+silu_mul, features per GLU "
                   "tile (each reads that many gate rows and up rows)"));
  s.push_back(tile("up_proj", "N_tile", "absent (gemv+silu_mul: gate_proj sets the shared tiles)",
                   "output rows per up_proj GEMV tile (refused with gemv+silu_mul, whose tiles "
                   "gate_proj sets)"));
  projection("down_proj", per_sm);
  s.push_back(tile("lm_head", "N_tile",
                   "rows per SM (a multiple of 4), fewer where the strip partials would pass "
                   "32 KiB of scratch",
                   "output rows per lm_head tile (the level that streams the most bytes)"));
  s.push_back(tile("gemv", "N_tile", "absent (each projection has its own)",
                   "the N_tile of every projection not named on its own"));
  s.push_back(tile("sample_argmax", "N_tile", "one partial argmax per SM (a multiple of 4)",
                   "logits per partial argmax before the final reduce"));
  s.push_back(tile("attention", "kv_block",
                   "64 keys, doubled until the context is at most 8 blocks (absent: one block)",
                   "keys per split-KV attention task; blocks are merged by ATTENTION_COMBINE (more "
                   "than 8: a two-level tree, at most 64 blocks)"));
  s.push_back(tile("attention", "kv_run",
                   "64 where kv_block is larger and divides the context (a 4,096 context: 16 "
                   "blocks of 4 runs), else absent",
                   "keys per run of a strided split-KV block (needs kv_block, which it divides): "
                   "block b's keys are the runs starting at b x kv_run, one every blocks x kv_run "
                   "positions, so a short position's keys spread over the blocks (absent: each "
                   "block's keys are contiguous; the CUDA VM needs multiples of 64)"));
  s.push_back(tile("attention", "kv_heads", "1 (with a kv_block split)",
                   "KV heads per attention task; must divide the model's KV heads (without a "
                   "kv_block split each group's task covers the whole window: no combine)"));
  {
    KnobSpec k = tile("attention", "qkv_by_group", "absent (per projection)",
                      "1: q/k/v's tiles per attention head group (the kv_heads groups), each "
                      "group's rows under a counter of its own that only its attention tasks "
                      "wait for (needs rope+attention); absent or 0: a counter per projection");
    k.min = 0;
    k.max = 1;
    k.range = "0 or 1";
    s.push_back(std::move(k));
  }
  for (const auto& [key, meaning] : {
           std::pair{"clusters", "P: clusters of the tensor-parallel step (at most 8: one "
                                 "ALLREDUCE_SHARD sums their partials); the MLP's features are "
                                 "split over all of them"},
           std::pair{"size", "C: SMs a cluster (P x C at most the target's SMs); each sums "
                             "its slice of the hidden vector"},
           std::pair{"attention", "Pa: the clusters holding the attention, n_kv_heads / Pa KV "
                                  "heads each (Pa divides the KV heads, at most P)"}}) {
    KnobSpec k = tile("tp", key, "absent (no tensor-parallel step; docs/CLUSTER_TP.md)", meaning);
    k.range = ">= 1, all three keys together (needs the default's fusions and round_robin; the "
              "CUDA VM runs it through global memory, the search does not propose it)";
    s.push_back(std::move(k));
  }
  {
    KnobSpec f;
    f.name = "fusion_grouping";
    f.kind = KnobKind::GroupSet;
    f.effect = KnobEffect::Tasks;
    f.tier = 3;
    f.choices = {"rmsnorm+gemv",   "silu_mul+gemv", "gemv+add",
                 "rope+attention", "gemv+silu_mul", "attention_combine+gemv",
                 "gemv+silu_mul+gemv"};
    f.range =
        "any subset of: rmsnorm+gemv, silu_mul+gemv, gemv+add, rope+attention, gemv+silu_mul, "
        "attention_combine+gemv (needs gemv+add and a kv_block split), gemv+silu_mul+gemv "
        "(needs rmsnorm+gemv, gemv+silu_mul and gemv+add; no tiling.down_proj; the reference VM "
        "runs it, the CUDA VM refuses it, the search does not propose it)";
    f.default_rule =
        "all but silu_mul+gemv (which gemv+silu_mul leaves nothing to fuse); "
        "attention_combine+gemv only with at most 8 KV blocks";
    f.meaning =
        "adjacent ops fused into one task so the activation never round-trips to memory (norm "
        "per GEMV tile, SwiGLU per down tile, residual add per tile, rope+KV append per "
        "attention task, gate and up rows in one tile with SwiGLU in its epilogue, the split-KV "
        "combine per o_proj tile, down_proj's slice of each gate/up tile's features added "
        "into the layer's output by that tile)";
    s.push_back(std::move(f));
  }
  s.push_back(choice("sm_assignment", 4, {"critical_path", "load_balance", "round_robin"},
                     "round_robin",
                     "which SM runs each task: a list scheduler over a bandwidth model, greedy "
                     "least-loaded, or round robin (an explicit {task_id: sm} map is also legal "
                     "but never searched)"));
  s.push_back(choice("page_allocation", 5, {"graph_color", "linear", "none"}, "graph_color",
                     "activation scratch: pages reused across disjoint live ranges, one page "
                     "per buffer, or no pages"));
  s.push_back(integer("threads_per_block", KnobEffect::Launch, 6, kMinThreadsPerBlock,
                      kMaxThreadsPerBlock, 32, false, TargetCap::MaxThreadsPerSm,
                      fmt::format("multiple of 32 in [{}, {}] (plus one producer warp)",
                                  kMinThreadsPerBlock, kMaxThreadsPerBlock),
                      "256", "consumer threads per persistent block", {128, 192, 256, 384, 512}));
  s.push_back(integer("smem_bytes_per_block", KnobEffect::Launch, 6, 0, kMaxParam, 1, true,
                      TargetCap::SmemOptin, "0 (the opt-in maximum) or [1, the target's opt-in cap]",
                      fmt::format("the opt-in cap - {} (one ring stage short); 0 where a "
                                  "layer's weights per SM pass twice that, or the cap is under {}",
                                  kRingHeadroomBytes, 2 * kRingHeadroomBytes),
                      "dynamic shared memory per block (bounds the weight ring)",
                      {0, 65536, 131072, 196608}));
  // Multiples of 128: every stage starts 128-byte aligned (vm/cuda/megakernel_layout.h).
  s.push_back(integer("stream_chunk_bytes", KnobEffect::Launch, 6, 1024, (1 << 20) - 128, 128,
                      true, TargetCap::None,
                      "0 (auto: 32 KiB) or a multiple of 128 in [1024, 1048448]",
                      "0", "bytes of one weight-ring stage (one bulk copy)",
                      // 32768 is what 0 picks: searching it would measure the default again.
                      {0, 8192, 16384, 65536}));
  s.push_back(integer("stream_bytes_in_flight", KnobEffect::Launch, 6, 1, int64_t(1) << 24, 1,
                      true, TargetCap::None, "0 (the whole ring) or [1, 16777216]", "65536",
                      "bulk-copy bytes one SM keeps in flight for the tile it runs",
                      // Whole 32 KiB stages (the default chunk): a bound under one stage is one
                      // copy, so 8 or 16 KiB would measure 32 KiB again.
                      {0, 32768, 65536, 98304, 131072}));
  s.push_back(integer("stream_prefetch_bytes_in_flight", KnobEffect::Launch, 6, 1,
                      int64_t(1) << 24, 1, true, TargetCap::None,
                      "0 (as stream_bytes_in_flight) or [1, 16777216]", "32768",
                      "the same bound while copies run ahead of a tile not yet started",
                      {0, 32768, 65536, 98304}));
  return s;
}

// tiling.<archetype>.<key> -> (archetype, key)
std::pair<std::string, std::string> tile_parts(std::string_view name) {
  const size_t a = name.find('.'), b = name.rfind('.');
  return {std::string(name.substr(a + 1, b - a - 1)), std::string(name.substr(b + 1))};
}

int64_t* scalar_field(ScheduleConfig& c, std::string_view name) {
  if (name == "pipelining_depth") return &c.pipelining_depth;
  if (name == "threads_per_block") return &c.threads_per_block;
  if (name == "smem_bytes_per_block") return &c.smem_bytes_per_block;
  if (name == "stream_chunk_bytes") return &c.stream_chunk_bytes;
  if (name == "stream_bytes_in_flight") return &c.stream_bytes_in_flight;
  if (name == "stream_prefetch_bytes_in_flight") return &c.stream_prefetch_bytes_in_flight;
  return nullptr;
}

std::string integer_problem(const KnobSpec& k, int64_t v, const GpuTarget* target) {
  if (k.zero_is_auto && v == 0) return "";
  const bool ok = v >= k.min && v <= k.max && v % k.multiple_of == 0;
  if (!ok) return fmt::format("{} {} must be {}", k.name, v, k.range);
  if (target != nullptr) {
    if (k.cap == TargetCap::SmemOptin && v > target->smem_bytes_per_block_optin)
      return fmt::format("{} {} exceeds {}'s smem_bytes_per_block_optin {}", k.name, v,
                         target->name, target->smem_bytes_per_block_optin);
    if (k.cap == TargetCap::MaxThreadsPerSm && target->max_threads_per_sm > 0 &&
        v > target->max_threads_per_sm)
      return fmt::format("{} {} exceeds {}'s max_threads_per_sm {}", k.name, v, target->name,
                         target->max_threads_per_sm);
  }
  return "";
}

}  // namespace

const std::vector<KnobSpec>& schedule_knob_space() {
  static const std::vector<KnobSpec> space = make_space();
  return space;
}

const KnobSpec& knob_spec(std::string_view name) {
  for (const KnobSpec& k : schedule_knob_space())
    if (k.name == name) return k;
  throw std::out_of_range(fmt::format("no schedule knob named '{}'", name));
}

std::optional<int64_t> integer_knob(const ScheduleConfig& config, std::string_view name) {
  if (int64_t* f = scalar_field(const_cast<ScheduleConfig&>(config), name)) return *f;
  if (!name.starts_with("tiling."))
    throw std::out_of_range(fmt::format("'{}' is not an integer knob", name));
  const auto [arch, key] = tile_parts(name);
  for (const auto& [a, sizes] : config.tiling)
    if (a == arch)
      for (const auto& [k, v] : sizes)
        if (k == key) return v;
  return std::nullopt;
}

void set_integer_knob(ScheduleConfig& config, std::string_view name, std::optional<int64_t> v) {
  if (int64_t* f = scalar_field(config, name)) {
    if (!v) throw std::invalid_argument(fmt::format("{} cannot be removed", name));
    *f = *v;
    return;
  }
  if (!name.starts_with("tiling."))
    throw std::out_of_range(fmt::format("'{}' is not an integer knob", name));
  // Named, not structured bindings: clang 14 (the fuzz build) refuses lambdas capturing those.
  const auto parts = tile_parts(name);
  const auto& arch = parts.first;
  const auto& key = parts.second;
  auto it = std::find_if(config.tiling.begin(), config.tiling.end(),
                         [&](const auto& e) { return e.first == arch; });
  if (it == config.tiling.end()) {
    if (!v) return;
    config.tiling.push_back({arch, {{key, *v}}});
    return;
  }
  auto& sizes = it->second;
  auto kt = std::find_if(sizes.begin(), sizes.end(), [&](const auto& e) { return e.first == key; });
  if (v) {
    if (kt == sizes.end()) sizes.push_back({key, *v});
    else kt->second = *v;
  } else if (kt != sizes.end()) {
    sizes.erase(kt);
    if (sizes.empty()) config.tiling.erase(it);
  }
}

std::string spell_group(const std::vector<std::string>& group) {
  std::string s;
  for (const auto& n : group) s += (s.empty() ? "" : "+") + n;
  return s;
}

std::vector<std::string> parse_group(std::string_view spelled) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= spelled.size()) {
    const size_t plus = spelled.find('+', start);
    out.emplace_back(spelled.substr(start, plus == std::string_view::npos ? spelled.npos : plus - start));
    if (plus == std::string_view::npos) break;
    start = plus + 1;
  }
  return out;
}

std::vector<std::string> knob_range_problems(const ScheduleConfig& config,
                                             const GpuTarget* target) {
  std::vector<std::string> problems;
  for (const KnobSpec& k : schedule_knob_space()) {
    if (k.kind == KnobKind::Integer) {
      if (auto p = integer_problem(k, *integer_knob(config, k.name), target); !p.empty())
        problems.push_back(std::move(p));
    } else if (k.kind == KnobKind::Choice) {
      if (k.name == "page_allocation" &&
          std::find(k.choices.begin(), k.choices.end(), config.page_allocation) == k.choices.end())
        problems.push_back(fmt::format("page_allocation '{}' is unknown ({})",
                                       config.page_allocation, k.range));
      if (k.name == "sm_assignment")
        if (const auto* s = std::get_if<std::string>(&config.sm_assignment);
            s && std::find(k.choices.begin(), k.choices.end(), *s) == k.choices.end())
          problems.push_back(fmt::format(
              "sm_assignment '{}' is unknown ({}, or a {{task_id: sm}} map)", *s, k.range));
    } else if (k.kind == KnobKind::GroupSet) {
      // One message naming every group the space does not know, and the ones it does.
      const auto spell = [](const std::vector<std::string>& g) {
        std::string names;
        for (const auto& n : g) names += (names.empty() ? "" : ", ") + n;
        return "[" + names + "]";
      };
      std::string unknown, known;
      for (const auto& g : config.fusion_grouping)
        if (std::find(k.choices.begin(), k.choices.end(), spell_group(g)) == k.choices.end())
          unknown += (unknown.empty() ? "" : ", ") + spell(g);
      for (const auto& c : k.choices) known += (known.empty() ? "" : ", ") + spell(parse_group(c));
      if (!unknown.empty())
        problems.push_back(
            fmt::format("fusion_grouping cannot fuse {} (known groups: {})", unknown, known));
    }
  }
  // Tiling: every archetype and key must be a Tile knob of the space, with a value in range.
  for (const auto& [arch, sizes] : config.tiling)
    for (const auto& [key, v] : sizes) {
      const std::string name = fmt::format("tiling.{}.{}", arch, key);
      const auto& space = schedule_knob_space();
      const auto it = std::find_if(space.begin(), space.end(),
                                   [&](const KnobSpec& k) { return k.name == name; });
      if (it == space.end()) continue;  // unknown keys: the lowering names them precisely
      if (v < it->min)
        problems.push_back(fmt::format("{} must be >= {}, got {}", name, it->min, v));
      else if (v > it->max)
        problems.push_back(fmt::format("{} must be <= {}, got {}", name, it->max, v));
    }
  return problems;
}

}  // namespace amk
