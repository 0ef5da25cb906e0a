#include "amk/verdict.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace amk::eval {

std::string_view name_of(Correctness c) {
  switch (c) {
    case Correctness::PASS: return "PASS";
    case Correctness::FAIL: return "FAIL";
    case Correctness::REJECTED: return "REJECTED";
    case Correctness::TIMEOUT: return "TIMEOUT";
    case Correctness::CRASH: return "CRASH";
  }
  return "CRASH";
}

Correctness correctness_from_name(std::string_view n) {
  for (Correctness c : {Correctness::PASS, Correctness::FAIL, Correctness::REJECTED,
                        Correctness::TIMEOUT, Correctness::CRASH})
    if (name_of(c) == n) return c;
  throw std::invalid_argument(fmt::format("unknown correctness '{}'", n));
}

std::string_view name_of(LatencyKind k) {
  switch (k) {
    case LatencyKind::None: return "none";
    case LatencyKind::MeasuredGpu: return "measured-gpu";
    case LatencyKind::Predicted: return "predicted";
  }
  return "none";
}

LatencyKind latency_kind_from_name(std::string_view n) {
  for (LatencyKind k : {LatencyKind::None, LatencyKind::MeasuredGpu, LatencyKind::Predicted})
    if (name_of(k) == n) return k;
  throw std::invalid_argument(fmt::format("unknown latency kind '{}'", n));
}

Verdict failed_verdict(Correctness c, std::string schedule_id, std::string details) {
  Verdict v;
  v.correctness = c;
  v.schedule_id = std::move(schedule_id);
  v.details = std::move(details);
  return v;
}

namespace {

nlohmann::json opt(const std::optional<double>& x) { return x ? nlohmann::json(*x) : nlohmann::json(); }

std::optional<double> opt_from(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return j.at(key).get<double>();
}

}  // namespace

std::string verdict_to_json(const Verdict& v) {
  nlohmann::ordered_json j;
  j["correctness"] = name_of(v.correctness);
  const bool lat = v.has_latency();
  j["latency_us"] = lat ? opt(v.latency_us) : nlohmann::json();
  j["latency_kind"] = lat ? name_of(v.latency_kind) : "none";
  j["pct_of_roofline"] = lat ? opt(v.pct_of_roofline) : nlohmann::json();
  j["pct_of_measured_floor"] = lat ? opt(v.pct_of_measured_floor) : nlohmann::json();
  j["roofline_us"] = v.roofline_us;
  j["schedule_id"] = v.schedule_id;
  j["details"] = v.details;
  j["check_error"] = v.check_error;
  j["check_reduced_depth"] = v.check_reduced_depth;
  j["check_layers"] = v.check_layers;
  if (v.shares.known)
    j["critical_path_shares"] = {{"attention", v.shares.attention}, {"mlp", v.shares.mlp},
                                 {"lm_head", v.shares.lm_head}, {"other", v.shares.other}};
  j["simplicity"] = {{"tasks", v.simplicity.tasks},
                     {"pages", v.simplicity.pages},
                     {"scratch_bytes", v.simplicity.scratch_bytes},
                     {"pipelining_depth", v.simplicity.pipelining_depth},
                     {"fusion_groups", v.simplicity.fusion_groups}};
  j["eval_seconds"] = v.eval_seconds;
  return j.dump();
}

Verdict verdict_from_json(std::string_view text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    Verdict v;
    v.correctness = correctness_from_name(j.at("correctness").get<std::string>());
    v.schedule_id = j.value("schedule_id", "");
    v.details = j.value("details", "");
    v.roofline_us = j.value("roofline_us", 0.0);
    v.check_error = j.value("check_error", -1.0);
    v.check_reduced_depth = j.value("check_reduced_depth", false);
    v.check_layers = j.value("check_layers", int64_t{0});
    v.eval_seconds = j.value("eval_seconds", 0.0);
    if (v.pass()) {  // never a latency without a PASS, whatever the text says
      v.latency_us = opt_from(j, "latency_us");
      v.latency_kind = latency_kind_from_name(j.value("latency_kind", "none"));
      v.pct_of_roofline = opt_from(j, "pct_of_roofline");
      v.pct_of_measured_floor = opt_from(j, "pct_of_measured_floor");
    }
    if (j.contains("critical_path_shares")) {
      const auto& s = j.at("critical_path_shares");
      v.shares = {s.value("attention", 0.0), s.value("mlp", 0.0), s.value("lm_head", 0.0),
                  s.value("other", 0.0), true};
    }
    if (j.contains("simplicity")) {
      const auto& s = j.at("simplicity");
      v.simplicity = {s.value("tasks", int64_t{0}), s.value("pages", int64_t{0}),
                      s.value("scratch_bytes", int64_t{0}), s.value("pipelining_depth", int64_t{0}),
                      s.value("fusion_groups", int64_t{0})};
    }
    return v;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("malformed verdict: ") + e.what());
  }
}

}  // namespace amk::eval
