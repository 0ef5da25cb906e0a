// The Loop-2 search space as data (PROGRAM.md §5B, issue 13): every ScheduleConfig knob's type,
// legal range, default rule and meaning, in one table. The lowering (check_launch_config,
// tiling, fusion), the config loader (`--config` files), the CUDA loader's launch layout and the
// schedule search all read their ranges from here, so a knob is never checked against two
// different ranges again. `amk propose` prints this table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "amk/ir.h"

namespace amk {

enum class KnobKind {
  Integer,   // one integer field of ScheduleConfig
  Choice,    // one string out of a fixed list
  GroupSet,  // a set of named groups (fusion_grouping)
  Tile,      // one entry of the tiling map: tiling.<archetype>.<key>
};

// Where a knob's value lands in the lowered Program: the task graph itself, or the launch
// (Program.config, which the CUDA loader reads to lay out the persistent kernel).
enum class KnobEffect { Tasks, Launch };

// A bound that depends on the GPU, checked only when a target is known.
enum class TargetCap { None, SmemOptin, MaxThreadsPerSm };

struct KnobSpec {
  std::string name;          // "pipelining_depth", "tiling.q_proj.N_tile", "fusion_grouping"
  KnobKind kind = KnobKind::Integer;
  KnobEffect effect = KnobEffect::Tasks;
  int tier = 0;              // PROGRAM.md §5B order: 1 (pipelining) is tried first
  std::string range;         // the legal values, spelled for people
  std::string default_rule;  // what default_schedule_config() picks, in words
  std::string meaning;
  // Integer and Tile knobs: the legal interval, a step, and 0 as a separate "auto" value.
  int64_t min = 0, max = 0, multiple_of = 1;
  bool zero_is_auto = false;
  TargetCap cap = TargetCap::None;
  // Choice and GroupSet knobs: the legal values ("rmsnorm+gemv" spells the group [rmsnorm, gemv]).
  std::vector<std::string> choices;
  // Integer knobs: the values the search tries (Tile knobs scale the current tile instead).
  std::vector<int64_t> search_values;
};

// Every knob, in §5B tier order. The tiling knobs are listed per archetype and key.
const std::vector<KnobSpec>& schedule_knob_space();
// The knob named `name`; throws std::out_of_range for an unknown one.
const KnobSpec& knob_spec(std::string_view name);

// An Integer or Tile knob's value in `config` (a Tile knob absent from the tiling map: nullopt,
// the lowering's default applies). Throws std::out_of_range for a name that is neither.
std::optional<int64_t> integer_knob(const ScheduleConfig& config, std::string_view name);
// Sets an Integer knob, or a Tile knob (nullopt removes the tiling entry's key, and the
// archetype when it is left empty).
void set_integer_knob(ScheduleConfig& config, std::string_view name, std::optional<int64_t> v);

// fusion_grouping's groups as the space spells them ("rmsnorm+gemv"), and back.
std::string spell_group(const std::vector<std::string>& group);
std::vector<std::string> parse_group(std::string_view spelled);

// Every value of `config` outside its knob's range, each as one message naming the knob, the
// value and the range ("threads_per_block 100 must be a multiple of 32 in [64, 992]"). With a
// target, the GPU-dependent caps are checked too (smem opt-in, threads per SM). Model-dependent
// limits (a tile wider than its projection, kv_heads dividing the KV heads) are the lowering's.
std::vector<std::string> knob_range_problems(const ScheduleConfig& config,
                                             const GpuTarget* target = nullptr);

// The CUDA VM's block: threads_per_block consumer threads plus one producer warp that streams
// the weights, so the legal range is narrower than CUDA's 1024 (the loader and the lowering both
// read these).
inline constexpr int64_t kMinThreadsPerBlock = 64;
inline constexpr int64_t kMaxThreadsPerBlock = 992;

}  // namespace amk
