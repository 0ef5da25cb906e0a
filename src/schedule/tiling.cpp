#include "schedule/tiling.h"

#include <fmt/format.h>

#include <algorithm>

#include "amk/lowering.h"

namespace amk::schedule {

namespace {

bool is_projection(std::string_view name) {
  return std::find(std::begin(kProjections), std::end(kProjections), name) !=
         std::end(kProjections);
}

std::string known_archetypes() {
  std::string s = "gemv, attention, sample_argmax, tp";
  for (std::string_view p : kProjections) s += fmt::format(", {}", p);
  return s;
}

// The one key an archetype takes; anything else in its dict is an error, never ignored.
int64_t only_key(const std::string& archetype, const ScheduleConfig::TileSizes& sizes,
                 std::string_view key) {
  std::optional<int64_t> value;
  for (const auto& [k, v] : sizes) {
    if (k != key)
      throw LoweringError(
          fmt::format("tiling.{}: unknown key '{}' (it takes only '{}')", archetype, k, key));
    if (v < 1)
      throw LoweringError(fmt::format("tiling.{}.{} must be >= 1, got {}", archetype, k, v));
    value = v;
  }
  if (!value) throw LoweringError(fmt::format("tiling.{}: missing '{}'", archetype, key));
  return *value;
}

}  // namespace

int64_t Tiling::n_tile(std::string_view projection) const {
  for (const auto& [name, n] : projection_n_tile)
    if (name == projection) return n;
  return gemv_n_tile;
}

bool Tiling::has_override(std::string_view projection) const {
  for (const auto& [name, n] : projection_n_tile)
    if (name == projection) return true;
  return false;
}

Tiling resolve_tiling(const ScheduleConfig& config, int64_t default_n_tile) {
  Tiling t;
  t.gemv_n_tile = default_n_tile;
  for (const auto& [archetype, sizes] : config.tiling) {
    if (archetype == "gemv") {
      t.gemv_n_tile = only_key(archetype, sizes, "N_tile");
    } else if (archetype == "attention") {
      // kv_block splits the window into KV blocks, kv_heads the heads into groups of that many
      // KV heads; either or both. kv_run (with kv_block) strides each block's keys over the
      // context in runs of that many.
      // qkv_by_group 1 emits q/k/v's tiles per head group (0: per projection, the default).
      if (sizes.empty())
        throw LoweringError(
            "tiling.attention: give 'kv_block', 'kv_heads', 'kv_run' and/or 'qkv_by_group'");
      for (const auto& [k, v] : sizes) {
        if (k == "qkv_by_group") {
          if (v != 0 && v != 1)
            throw LoweringError(fmt::format(
                "tiling.attention.qkv_by_group must be 0 (per projection) or 1 (per head "
                "group), got {}",
                v));
          t.qkv_by_group = v == 1;
          continue;
        }
        if (k != "kv_block" && k != "kv_heads" && k != "kv_run")
          throw LoweringError(fmt::format(
              "tiling.attention: unknown key '{}' (it takes 'kv_block', 'kv_heads', 'kv_run' and "
              "'qkv_by_group')",
              k));
        if (v < 1)
          throw LoweringError(fmt::format("tiling.attention.{} must be >= 1, got {}", k, v));
        (k == "kv_block" ? t.kv_block : k == "kv_heads" ? t.kv_heads : t.kv_run) = v;
      }
      if (t.kv_run && !t.kv_block)
        throw LoweringError("tiling.attention.kv_run strides a split-KV block's keys: it needs "
                            "kv_block");
    } else if (archetype == "tp") {
      Tiling::TensorParallel tp;
      for (const auto& [k, v] : sizes) {
        if (k != "clusters" && k != "size" && k != "attention")
          throw LoweringError(fmt::format(
              "tiling.tp: unknown key '{}' (it takes 'clusters', 'size' and 'attention')", k));
        if (v < 1) throw LoweringError(fmt::format("tiling.tp.{} must be >= 1, got {}", k, v));
        (k == "clusters" ? tp.clusters : k == "size" ? tp.size : tp.attention) = v;
      }
      if (tp.clusters == 0 || tp.size == 0 || tp.attention == 0)
        throw LoweringError("tiling.tp: give 'clusters', 'size' and 'attention'");
      t.tp = tp;
    } else if (archetype == "sample_argmax") {
      t.argmax_n_tile = only_key(archetype, sizes, "N_tile");
    } else if (is_projection(archetype)) {
      t.projection_n_tile.emplace_back(archetype, only_key(archetype, sizes, "N_tile"));
    } else {
      throw LoweringError(
          fmt::format("tiling: unknown archetype '{}' (known: {})", archetype, known_archetypes()));
    }
  }
  return t;
}

}  // namespace amk::schedule
