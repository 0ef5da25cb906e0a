// A ScheduleConfig from its JSON text (the "config" object of the program format), checked
// against the knob space's ranges, and its content hash: the schedule id that names a config in
// results.tsv, corpus.jsonl and the search's caches.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "amk/ir.h"

namespace amk {

struct ConfigParse {
  std::optional<ScheduleConfig> config;  // set on success
  std::string error;                     // on failure: what is wrong, naming the field or knob
  std::vector<std::string> warnings;     // unknown fields (ignored), as "$.field: ..."
};

// `text` must be one JSON object; {} is the defaults. A value outside its knob's range
// (amk/knob_space.h, without target caps) is an error naming the knob and the range.
ConfigParse parse_schedule_config(std::string_view text);

// "sched-" + 16 hex digits of FNV-1a over config_to_json(config): equal configs, equal ids.
std::string schedule_id(const ScheduleConfig& config);

}  // namespace amk
