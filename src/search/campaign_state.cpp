#include "amk/campaign_state.h"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace amk::search {

namespace {

nlohmann::ordered_json verdict_json(const std::optional<eval::Verdict>& v) {
  return v ? nlohmann::ordered_json::parse(eval::verdict_to_json(*v)) : nlohmann::ordered_json();
}

std::optional<eval::Verdict> verdict_from(const nlohmann::ordered_json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return eval::verdict_from_json(j.at(key).dump());
}

}  // namespace

std::string campaign_state_to_json(const CampaignState& s) {
  nlohmann::ordered_json j;
  j["version"] = s.version;
  j["tag"] = s.tag;
  j["model"] = s.model;
  j["model_path"] = s.model_path;
  j["gpu"] = s.gpu;
  j["device"] = s.device;
  j["strategy"] = s.strategy;
  j["seed"] = s.seed;
  j["cold"] = s.cold;
  j["next_experiment"] = s.next_experiment;
  j["elapsed_s"] = s.elapsed_s;
  j["iters_budget"] = s.iters_budget ? nlohmann::ordered_json(*s.iters_budget) : nlohmann::ordered_json();
  j["minutes_budget"] = s.minutes_budget ? nlohmann::ordered_json(*s.minutes_budget) : nlohmann::ordered_json();
  j["baseline"] = verdict_json(s.baseline);
  j["baseline_config"] = s.baseline_config_json.empty()
                             ? nlohmann::ordered_json()
                             : nlohmann::ordered_json::parse(s.baseline_config_json);
  j["incumbent"] = verdict_json(s.incumbent);
  j["incumbent_config"] = s.incumbent_config_json.empty()
                              ? nlohmann::ordered_json()
                              : nlohmann::ordered_json::parse(s.incumbent_config_json);
  j["incumbent_experiment"] = s.incumbent_experiment;
  j["consecutive_reverts"] = s.consecutive_reverts;
  j["kept"] = s.kept;
  j["screened"] = s.screened;
  j["worker_starts"] = s.worker_starts;
  j["counts"] = s.counts;
  j["tried"] = s.tried;
  j["knob_proposals"] = s.knob_proposals;
  nlohmann::ordered_json warm = nlohmann::ordered_json::array();
  for (const auto& w : s.warm_queue) warm.push_back(nlohmann::ordered_json::parse(w));
  j["warm_queue"] = warm;
  j["done"] = s.done;
  j["done_reason"] = s.done_reason;
  return j.dump(2);
}

CampaignState campaign_state_from_json(const std::string& text, const std::string& source) {
  try {
    // Ordered: stored configs keep their tiling order, and so their schedule ids.
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
    CampaignState s;
    s.version = j.at("version").get<int>();
    s.tag = j.at("tag").get<std::string>();
    s.model = j.at("model").get<std::string>();
    s.model_path = j.value("model_path", "");
    s.gpu = j.at("gpu").get<std::string>();
    s.device = j.at("device").get<std::string>();
    s.strategy = j.value("strategy", "autoresearch");
    s.seed = j.value("seed", uint64_t{0});
    s.cold = j.value("cold", false);
    s.next_experiment = j.at("next_experiment").get<int64_t>();
    s.elapsed_s = j.value("elapsed_s", 0.0);
    if (j.contains("iters_budget") && !j["iters_budget"].is_null())
      s.iters_budget = j["iters_budget"].get<int64_t>();
    if (j.contains("minutes_budget") && !j["minutes_budget"].is_null())
      s.minutes_budget = j["minutes_budget"].get<double>();
    s.baseline = verdict_from(j, "baseline");
    if (j.contains("baseline_config") && !j["baseline_config"].is_null())
      s.baseline_config_json = j["baseline_config"].dump();
    s.incumbent = verdict_from(j, "incumbent");
    if (j.contains("incumbent_config") && !j["incumbent_config"].is_null())
      s.incumbent_config_json = j["incumbent_config"].dump();
    s.incumbent_experiment = j.value("incumbent_experiment", int64_t{0});
    s.consecutive_reverts = j.value("consecutive_reverts", int64_t{0});
    s.kept = j.value("kept", int64_t{0});
    s.screened = j.value("screened", int64_t{0});
    s.worker_starts = j.value("worker_starts", int64_t{0});
    s.counts = j.value("counts", std::map<std::string, int64_t>{});
    s.tried = j.value("tried", std::set<std::string>{});
    s.knob_proposals = j.value("knob_proposals", std::map<std::string, int64_t>{});
    for (const auto& w : j.value("warm_queue", nlohmann::ordered_json::array())) s.warm_queue.push_back(w.dump());
    s.done = j.value("done", false);
    s.done_reason = j.value("done_reason", "");
    if (s.next_experiment < 1) throw std::invalid_argument("next_experiment < 1");
    return s;
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("{}: not a campaign state: {}", source, e.what()));
  }
}

std::optional<CampaignState> load_campaign_state(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot read '{}'", path.string()));
  std::ostringstream s;
  s << in.rdbuf();
  return campaign_state_from_json(s.str(), path.string());
}

void save_campaign_state(const std::filesystem::path& path, const CampaignState& s) {
  const std::filesystem::path tmp = path.string() + fmt::format(".tmp{}", getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << campaign_state_to_json(s) << "\n";
    out.flush();
    if (!out) throw std::runtime_error(fmt::format("cannot write '{}'", tmp.string()));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot replace '{}': {}", path.string(), ec.message()));
}

}  // namespace amk::search
