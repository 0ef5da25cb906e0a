// Proposals for the schedule search (PROGRAM.md §3, §5B, §8B): one-knob changes of the
// incumbent (the loop's rule: one focused change per experiment), random one-knob mutations,
// and fresh random points of the whole space, all drawn from the knob space (amk/knob_space.h)
// with each value kept inside its range and the model's limits.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "amk/ir.h"
#include "amk/model_config.h"

namespace amk::search {

struct Proposal {
  ScheduleConfig config;
  std::string knob;    // the knob changed; "*" for a point that changes several
  std::string change;  // "pipelining_depth 4 -> 2"
  std::string source;  // "baseline", "sweep", "mutation", "random point", "prior", "warm start"
};

// What the proposer needs to keep values legal for this model and target.
struct SearchContext {
  ModelConfig model;
  GpuTarget target;
  int64_t max_context = 512;
  ScheduleConfig defaults;  // default_schedule_config() for this model, target and context
};

// Every one-knob change of `incumbent`, in §5B tier order (pipelining first), each value the
// search tries for that knob other than the current one.
std::vector<Proposal> one_knob_neighbours(const ScheduleConfig& incumbent, const SearchContext& ctx);

// One knob (uniformly) set to one of its other values (uniformly).
Proposal random_mutation(const ScheduleConfig& incumbent, const SearchContext& ctx,
                         std::mt19937_64& rng);

// Every knob drawn independently from its search values (the defaults' tiles scaled).
Proposal random_point(const SearchContext& ctx, std::mt19937_64& rng);

// The knobs the search moves, in §5B tier order: the Integer and Choice knobs, the projection /
// lm_head / argmax tiles, the split-KV block and head group, and each fusion group as an on/off
// switch named "fusion_grouping.<group>".
std::vector<std::string> searched_knobs();

// The value of `knob` in `config` as the search spells it ("4", "graph_color", "on", "absent").
std::string knob_value_text(const ScheduleConfig& config, const std::string& knob);

}  // namespace amk::search
