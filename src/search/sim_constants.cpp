// The timing model's constants: their names, the JSON file they are stored in, the fits compiled
// into the binary, and constants_for() (a stored fit, else defaults scaled to the target).
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "amk/sim_constants_io.h"
#include "amk/timing_sim.h"
#include "amk/sim_targets_embedded.h"

namespace amk::sim {

namespace {

// Rates divide: they must be positive. Every other constant is a time or a count, >= 0.
bool is_rate(const std::string& name) { return name.ends_with("_gbs"); }

// The H100 (132 SMs) the default constants describe; other targets scale their rates by their
// bandwidth per SM against it.
constexpr double kReferenceGbsPerSm = 3090.0 / 132.0;

}  // namespace

const std::vector<std::string>& fitted_constant_names() {
  static const std::vector<std::string> names{
      "per_sm_gbs",      "task_fixed_us", "hop_us",         "chunk_us",
      "copy_latency_us", "rtt_us",        "rtt_us_per_kib", "hop_trips",
      "prologue_trips",  "act_gbs",       "attn_fixed_us",  "attn_gbs",
      "strip_slow_factor", "epilogue_trips", "body_fixed_us", "arrive_us",
      "epilogue_us_per_row", "gate_us", "stream_start_latencies"};
  return names;
}

double* constant_field(SimConstants& c, const std::string& name) {
  return const_cast<double*>(constant_field(static_cast<const SimConstants&>(c), name));
}

const double* constant_field(const SimConstants& c, const std::string& name) {
  if (name == "ceiling_gbs") return &c.ceiling_gbs;
  if (name == "per_sm_gbs") return &c.per_sm_gbs;
  if (name == "task_fixed_us") return &c.task_fixed_us;
  if (name == "hop_us") return &c.hop_us;
  if (name == "chunk_us") return &c.chunk_us;
  if (name == "copy_latency_us") return &c.copy_latency_us;
  if (name == "rtt_us") return &c.rtt_us;
  if (name == "rtt_us_per_kib") return &c.rtt_us_per_kib;
  if (name == "hop_trips") return &c.hop_trips;
  if (name == "prologue_trips") return &c.prologue_trips;
  if (name == "act_gbs") return &c.act_gbs;
  if (name == "attn_fixed_us") return &c.attn_fixed_us;
  if (name == "attn_gbs") return &c.attn_gbs;
  if (name == "strip_slow_factor") return &c.strip_slow_factor;
  if (name == "epilogue_trips") return &c.epilogue_trips;
  if (name == "body_fixed_us") return &c.body_fixed_us;
  if (name == "arrive_us") return &c.arrive_us;
  if (name == "epilogue_us_per_row") return &c.epilogue_us_per_row;
  if (name == "gate_us") return &c.gate_us;
  if (name == "stream_start_latencies") return &c.stream_start_latencies;
  return nullptr;
}

SimConstants constants_from_json(std::string_view text, std::string_view source) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument(fmt::format("simulator constants '{}': {}", source, why));
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw bad(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw bad("expected a JSON object");
  if (!j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != kConstantsFormat)
    throw bad(fmt::format("\"format\" must be \"{}\"", kConstantsFormat));
  for (const auto& [key, value] : j.items())
    if (key != "format" && key != "target" && key != "constants" && key != "fit")
      throw bad(fmt::format("unknown key \"{}\" (format, target, constants, fit)", key));
  SimConstants c;
  if (j.contains("target")) {
    if (!j["target"].is_string()) throw bad("\"target\" must be a string");
    c.target = j["target"].get<std::string>();
  }
  if (!j.contains("constants") || !j["constants"].is_object())
    throw bad("\"constants\" must be an object of numbers");
  const nlohmann::json& k = j["constants"];
  for (const auto& [key, value] : k.items()) {
    double* field = constant_field(c, key);
    if (field == nullptr) throw bad(fmt::format("unknown constant \"{}\"", key));
    if (!value.is_number()) throw bad(fmt::format("constant \"{}\" must be a number", key));
    const double v = value.get<double>();
    if (!std::isfinite(v) || v < 0 || (is_rate(key) && key != "ceiling_gbs" && v <= 0))
      throw bad(fmt::format("constant \"{}\" = {} is out of range ({})", key, v,
                            is_rate(key) && key != "ceiling_gbs" ? "> 0" : ">= 0"));
    *field = v;
  }
  // These came later: a file without them keeps the defaults.
  static const std::set<std::string> kOptional{"strip_slow_factor", "epilogue_trips",
                                               "body_fixed_us", "arrive_us",
                                               "epilogue_us_per_row", "gate_us",
                                               "stream_start_latencies"};
  for (const std::string& name : fitted_constant_names())
    if (!k.contains(name) && !kOptional.contains(name))
      throw bad(fmt::format("constant \"{}\" is missing", name));
  return c;
}

std::string constants_to_json(const SimConstants& c, const std::string& fit_json) {
  nlohmann::ordered_json j;
  j["format"] = kConstantsFormat;
  j["target"] = c.target;
  nlohmann::ordered_json k = nlohmann::ordered_json::object();
  k["ceiling_gbs"] = c.ceiling_gbs;
  for (const std::string& name : fitted_constant_names()) k[name] = *constant_field(c, name);
  j["constants"] = k;
  if (!fit_json.empty()) j["fit"] = nlohmann::ordered_json::parse(fit_json);
  return j.dump(2) + "\n";
}

SimConstants load_constants(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(fmt::format("cannot read simulator constants '{}'", path));
  std::ostringstream s;
  s << in.rdbuf();
  return constants_from_json(s.str(), path);
}

std::vector<std::pair<std::string, std::string>> embedded_constants() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : generated::kEmbeddedConstants)
    if (!e.target.empty()) out.emplace_back(std::string(e.target), std::string(e.json));
  return out;
}

std::optional<SimConstants> stored_constants(std::string_view target_name) {
  for (const auto& e : generated::kEmbeddedConstants)
    if (!e.target.empty() && e.target == target_name)
      return constants_from_json(e.json, fmt::format("data/targets/{}.sim.json", e.target));
  return std::nullopt;
}

SimConstants constants_for(const GpuTarget& target) {
  const double bw = target.measured_bw_gbs > 0 ? target.measured_bw_gbs : target.hbm_bandwidth_gbs;
  if (auto stored = stored_constants(target.name)) {
    if (stored->ceiling_gbs <= 0) stored->ceiling_gbs = bw;
    return *stored;
  }
  // No fit for this target: the H100's (stored, else the built-in defaults), its rates scaled by
  // the bandwidth per SM, its latencies kept.
  SimConstants c = stored_constants("h100").value_or(SimConstants{});
  const double per_sm = target.num_sms > 0 && bw > 0 ? bw / double(target.num_sms) : 0;
  if (per_sm > 0) {
    const double scale = per_sm / kReferenceGbsPerSm;
    c.per_sm_gbs *= scale;
    c.act_gbs *= scale;
    c.attn_gbs *= scale;
  }
  c.target = target.name;
  c.ceiling_gbs = bw;
  return c;
}

}  // namespace amk::sim
