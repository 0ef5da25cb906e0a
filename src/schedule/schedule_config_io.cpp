#include "amk/schedule_config_io.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "amk/hash.h"
#include "amk/json.h"
#include "amk/knob_space.h"

namespace amk {

ConfigParse parse_schedule_config(std::string_view text) {
  ConfigParse r;
  // The text must be one JSON object on its own: spliced into a program below, "{}, \"x\": 1"
  // would otherwise parse as something else.
  if (!nlohmann::json::accept(text)) {  // syntax only; the parse below just finds the message
    std::string what = "a syntax error";
    try {
      const nlohmann::json::parser_callback_t no_dom = [](int, nlohmann::json::parse_event_t,
                                                          nlohmann::json&) { return false; };
      const nlohmann::json ignored = nlohmann::json::parse(text, no_dom);
    } catch (const nlohmann::json::parse_error& e) {
      what = e.what();
      if (const size_t at = what.find("] "); at != std::string::npos) what = what.substr(at + 2);
    }
    r.error = "not valid JSON: " + what;
    return r;
  }
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || text[first] != '{') {
    r.error = "expected a JSON object ({} for the defaults)";
    return r;
  }
  // The program loader owns the config's JSON decoding; a program holding only the config
  // reuses it exactly.
  const LoadResult loaded = program_from_json("{\"config\": " + std::string(text) + "\n}");
  if (!loaded) {
    r.error = loaded.error;
    return r;
  }
  if (loaded.program->tasks.size() + loaded.program->buffers.size() +
              loaded.program->counters.size() > 0 ||
      loaded.program->target || loaded.program->pages) {
    r.error = "expected one JSON object (a ScheduleConfig)";
    return r;
  }
  // The loader's note that {} reads as null is not a warning here: {} is the defaults.
  for (const std::string& w : loaded.warnings)
    if (w.find("empty object read as null") == std::string::npos)
      r.warnings.push_back(w.starts_with("$.config") ? "$" + w.substr(8) : w);
  ScheduleConfig config = loaded.program->config.value_or(ScheduleConfig{});
  if (const auto problems = knob_range_problems(config); !problems.empty()) {
    r.error = problems.front();
    return r;
  }
  r.config = std::move(config);
  return r;
}

std::string schedule_id(const ScheduleConfig& config) {
  return fmt::format("sched-{:016x}", fnv1a64(config_to_json(config)));
}

}  // namespace amk
