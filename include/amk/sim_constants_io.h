// The timing simulator's constants as data (docs/SIMULATOR.md): the JSON file that `amk sim-fit`
// writes and data/targets/<target>.sim.json keeps, compiled into the binary so that
// constants_for() needs no source tree on the GPU machine.
//
// Format:
//   {"format": "amk.sim_constants/1", "target": "h100",
//    "constants": {"per_sm_gbs": 26.0, ..., "ceiling_gbs": 3090},   // every fitted constant
//    "fit": {...}}                                                     // optional, informational
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "amk/timing_sim.h"

namespace amk::sim {

inline constexpr std::string_view kConstantsFormat = "amk.sim_constants/1";

// Parses the format above. Every constant of fitted_constant_names() must be there, a finite
// number within its range (rates > 0, the rest >= 0); ceiling_gbs is optional (0: the target's).
// Throws std::invalid_argument naming `source` and the offending key on anything else (not JSON,
// another format, an unknown or missing constant, a string where a number belongs).
SimConstants constants_from_json(std::string_view text, std::string_view source);

// The file's text for `c`; `fit_json` (a JSON object's text, or empty) becomes its "fit".
std::string constants_to_json(const SimConstants& c, const std::string& fit_json = {});

// constants_from_json of a file; throws std::invalid_argument when it cannot be read.
SimConstants load_constants(const std::string& path);

// The stored fits compiled into this binary: (target name, file text), one per
// data/targets/*.sim.json at build time.
std::vector<std::pair<std::string, std::string>> embedded_constants();

// The fit stored for `target_name`, parsed; nullopt when none is compiled in.
std::optional<SimConstants> stored_constants(std::string_view target_name);

}  // namespace amk::sim
