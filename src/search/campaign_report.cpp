#include "amk/campaign_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "amk/campaign.h"

namespace amk::search {

namespace {

nlohmann::json opt(const std::optional<double>& x) { return x ? nlohmann::json(*x) : nlohmann::json(); }

std::string num(const std::optional<double>& x, const char* unit = "") {
  return x ? fmt::format("{:.2f}{}", *x, unit) : "-";
}

}  // namespace

CampaignStatus campaign_status(const std::filesystem::path& workdir) {
  CampaignStatus st;
  auto s = load_campaign_state(workdir / kStateFile);
  if (!s)
    throw std::runtime_error(fmt::format("'{}' holds no campaign ({} is missing)", workdir.string(),
                                         kStateFile));
  st.state = std::move(*s);
  if (std::filesystem::exists(workdir / kResultsFile)) st.rows = eval::read_results(workdir / kResultsFile);
  st.experiments = int64_t(st.rows.size());
  if (st.state.baseline && st.state.baseline->has_latency()) st.baseline_us = st.state.baseline->latency_us;
  for (const auto& r : st.rows)
    if (r.correctness == "PASS" && r.latency_us && (!st.best_us || *r.latency_us < *st.best_us)) {
      st.best_us = r.latency_us;
      st.best_pct_of_roofline = r.pct_of_roofline;
      st.best_schedule_id = r.schedule_id;
      st.best_experiment = r.experiment;
    }
  if (st.baseline_us && st.best_us) st.speedup = *st.baseline_us / *st.best_us;
  if (st.state.incumbent) {
    if (st.state.incumbent->roofline_us > 0) st.floor_us = st.state.incumbent->roofline_us;
    st.latency_kind = std::string(eval::name_of(st.state.incumbent->latency_kind));
  }
  return st;
}

NextAdvice campaign_next(const CampaignStatus& st) {
  NextAdvice n;
  const CampaignState& s = st.state;
  if (s.consecutive_reverts >= kStopConsecutiveReverts)
    n.reasons.push_back(fmt::format("plateau: {} consecutive reverts (>= {})",
                                    s.consecutive_reverts, kStopConsecutiveReverts));
  if (st.best_us && st.floor_us && *st.best_us <= kStopWithinFloor * *st.floor_us)
    n.reasons.push_back(fmt::format("near the floor: best {:.2f} us is within 10% of the {:.2f} us "
                                    "bandwidth floor",
                                    *st.best_us, *st.floor_us));
  if (s.minutes_budget && s.elapsed_s >= *s.minutes_budget * 60)
    n.reasons.push_back(fmt::format("time budget: {:.1f} of {:.1f} minutes spent",
                                    s.elapsed_s / 60, *s.minutes_budget));
  if (st.speedup && *st.speedup >= kStopSpeedup)
    n.reasons.push_back(fmt::format("speed-up {:.2f}x over the baseline (>= {:g}x)", *st.speedup,
                                    kStopSpeedup));
  if (s.done) n.reasons.push_back("the search is exhausted: " + s.done_reason);
  n.stop = !n.reasons.empty();
  if (!n.stop)
    n.reasons.push_back(fmt::format("no move-on criterion holds ({} consecutive reverts of {}; "
                                    "speed-up {})",
                                    s.consecutive_reverts, kStopConsecutiveReverts,
                                    st.speedup ? fmt::format("{:.2f}x", *st.speedup) : "-"));
  if (s.incumbent && s.incumbent->shares.known) {
    const auto& sh = s.incumbent->shares;
    const std::pair<double, const char*> regions[] = {
        {sh.attention, "attention"}, {sh.mlp, "mlp"}, {sh.lm_head, "lm_head"}, {sh.other, "other"}};
    n.hottest_region = std::max_element(std::begin(regions), std::end(regions))->second;
  }
  return n;
}

std::string status_json(const CampaignStatus& st) {
  const CampaignState& s = st.state;
  nlohmann::ordered_json j;
  j["tag"] = s.tag;
  j["model"] = s.model;
  j["gpu"] = s.gpu;
  j["device"] = s.device;
  j["strategy"] = s.strategy;
  j["experiments"] = st.experiments;
  j["next_experiment"] = s.next_experiment;
  j["latency_kind"] = st.latency_kind;
  j["baseline_us"] = opt(st.baseline_us);
  j["best_us"] = opt(st.best_us);
  j["best_experiment"] = st.best_experiment;
  j["best_schedule_id"] = st.best_schedule_id;
  j["speedup"] = opt(st.speedup);
  j["best_pct_of_roofline"] = opt(st.best_pct_of_roofline);
  j["floor_us"] = opt(st.floor_us);
  j["consecutive_reverts"] = s.consecutive_reverts;
  j["kept"] = s.kept;
  j["screened"] = s.screened;
  j["worker_starts"] = s.worker_starts;
  j["counts"] = s.counts;
  j["elapsed_s"] = s.elapsed_s;
  if (s.incumbent && s.incumbent->shares.known)
    j["critical_path_shares"] = {{"attention", s.incumbent->shares.attention},
                                 {"mlp", s.incumbent->shares.mlp},
                                 {"lm_head", s.incumbent->shares.lm_head},
                                 {"other", s.incumbent->shares.other}};
  else
    j["critical_path_shares"] = nullptr;
  return j.dump();
}

std::string next_json(const NextAdvice& n) {
  nlohmann::ordered_json j;
  j["decision"] = n.stop ? "STOP" : "CONTINUE";
  j["reasons"] = n.reasons;
  j["hottest_region"] = n.hottest_region.empty() ? nlohmann::json() : nlohmann::json(n.hottest_region);
  return j.dump();
}

std::string status_text(const CampaignStatus& st) {
  const CampaignState& s = st.state;
  std::string t = fmt::format("campaign     {} ({} of {} on {}, --device {})\n", s.tag, s.strategy,
                              s.model, s.gpu, s.device);
  t += fmt::format("experiments  {} (next id {}); kept {}; screened {}; worker starts {}\n",
                   st.experiments, s.next_experiment, s.kept, s.screened, s.worker_starts);
  std::string counts;
  for (const auto& [k, v] : s.counts) counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", k, v);
  t += fmt::format("verdicts     {}\n", counts.empty() ? "-" : counts);
  const std::string kind = st.latency_kind == "predicted" ? " [predicted]" : "";
  t += fmt::format("baseline     {}{}\n", num(st.baseline_us, " us"), kind);
  t += fmt::format("best         {}{} (experiment {}, {}), {} of roofline\n", num(st.best_us, " us"),
                   kind, st.best_experiment, st.best_schedule_id.empty() ? "-" : st.best_schedule_id,
                   num(st.best_pct_of_roofline, "%"));
  t += fmt::format("speed-up     {}\n", st.speedup ? fmt::format("{:.3f}x", *st.speedup) : "-");
  if (s.incumbent && s.incumbent->shares.known)
    t += fmt::format("critical path  attention {:.0f}%  mlp {:.0f}%  lm_head {:.0f}%  other {:.0f}%\n",
                     100 * s.incumbent->shares.attention, 100 * s.incumbent->shares.mlp,
                     100 * s.incumbent->shares.lm_head, 100 * s.incumbent->shares.other);
  else
    t += "critical path  - (no PASS with stamps yet)\n";
  t += fmt::format("plateau      {} consecutive reverts (stop at {})\n", s.consecutive_reverts,
                   kStopConsecutiveReverts);
  t += fmt::format("elapsed      {:.1f} min{}\n", s.elapsed_s / 60,
                   s.minutes_budget ? fmt::format(" of {:.1f}", *s.minutes_budget) : "");
  return t;
}

std::string report_json(const CampaignStatus& st, const NextAdvice& n) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(status_json(st));
  j["next"] = nlohmann::ordered_json::parse(next_json(n));
  nlohmann::ordered_json kept = nlohmann::ordered_json::array();
  for (const auto& r : st.rows)
    if (r.kept == "keep")
      kept.push_back({{"experiment", r.experiment},
                      {"correctness", r.correctness},
                      {"latency_us", opt(r.latency_us)},
                      {"schedule_id", r.schedule_id},
                      {"description", r.description}});
  j["kept_experiments"] = kept;
  return j.dump();
}

std::string report_text(const CampaignStatus& st, const NextAdvice& n) {
  std::string t = status_text(st);
  t += "\nkept experiments\n";
  for (const auto& r : st.rows)
    if (r.kept == "keep")
      t += fmt::format("  {:>4}  {:<8} {:>10}  {}\n", r.experiment, r.correctness,
                       num(r.latency_us, " us"), r.description.substr(0, 140));
  std::vector<const eval::ResultsRow*> passed;
  for (const auto& r : st.rows)
    if (r.correctness == "PASS" && r.latency_us) passed.push_back(&r);
  std::sort(passed.begin(), passed.end(),
            [](const auto* a, const auto* b) { return *a->latency_us < *b->latency_us; });
  t += "\nfastest schedules\n";
  for (size_t i = 0; i < passed.size() && i < 5; ++i)
    t += fmt::format("  {:>4}  {:>10}  {}\n", passed[i]->experiment, num(passed[i]->latency_us, " us"),
                     passed[i]->schedule_id);
  t += fmt::format("\nnext         {}: ", n.stop ? "STOP" : "CONTINUE");
  for (size_t i = 0; i < n.reasons.size(); ++i) t += (i ? "; " : "") + n.reasons[i];
  t += "\n";
  if (!n.hottest_region.empty()) t += "hottest      " + n.hottest_region + "\n";
  return t;
}

}  // namespace amk::search
