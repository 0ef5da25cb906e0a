// `amk campaign status|next|report --workdir DIR`: the orchestrator's view of a campaign
// (PROGRAM.md §8B), read from DIR/state.json and DIR/results.tsv: the baseline, the best, the
// speed-up, the attention / mlp / lm_head share of the best schedule's critical path, the
// plateau counter, and whether to go on by the move-on criteria.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "amk/campaign_state.h"
#include "amk/results_tsv.h"

namespace amk::search {

// PROGRAM.md §8B's MOVE_ON_CRITERIA.
inline constexpr int64_t kStopConsecutiveReverts = 8;
inline constexpr double kStopWithinFloor = 1.10;   // best latency <= 1.1 x the floor
inline constexpr double kStopSpeedup = 3.0;        // best >= 3x faster than the baseline

struct CampaignStatus {
  CampaignState state;
  int64_t experiments = 0;                 // rows in results.tsv
  std::optional<double> baseline_us, best_us, speedup, best_pct_of_roofline, floor_us;
  std::string best_schedule_id, latency_kind;
  int64_t best_experiment = 0;
  std::vector<eval::ResultsRow> rows;
};

// Throws std::runtime_error when DIR holds no campaign (no state.json) or a file is malformed.
CampaignStatus campaign_status(const std::filesystem::path& workdir);

struct NextAdvice {
  bool stop = false;
  std::vector<std::string> reasons;  // every criterion that holds (STOP), or why it continues
  std::string hottest_region;        // the region with the largest critical-path share
};
NextAdvice campaign_next(const CampaignStatus& status);

// JSON objects for --json (one line each), and text for people.
std::string status_json(const CampaignStatus& s);
std::string next_json(const NextAdvice& n);
std::string report_json(const CampaignStatus& s, const NextAdvice& n);
std::string status_text(const CampaignStatus& s);
std::string report_text(const CampaignStatus& s, const NextAdvice& n);

}  // namespace amk::search
