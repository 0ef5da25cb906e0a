// A campaign's checkpoint, DIR/state.json: everything `amk autoresearch` / `amk loop` need to
// resume where they stopped (the incumbent, the baseline, the ids tried, the counters of the
// move-on rules) and everything `amk campaign status|next|report` read. Written after every
// experiment, atomically (a temporary file renamed over the old one).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "amk/verdict.h"

namespace amk::search {

struct CampaignState {
  int version = 1;
  std::string tag, model, model_path, gpu, device, strategy;  // strategy: autoresearch | loop
  uint64_t seed = 0;
  bool cold = false;
  int64_t next_experiment = 1;
  double elapsed_s = 0;  // summed over every run of the campaign
  std::optional<int64_t> iters_budget;
  std::optional<double> minutes_budget;
  // The baseline: experiment 1, the default schedule.
  std::optional<eval::Verdict> baseline;
  std::string baseline_config_json;
  // The incumbent: the config every proposal starts from (the last kept one).
  std::string incumbent_config_json;
  std::optional<eval::Verdict> incumbent;  // its verdict; none while nothing has passed
  int64_t incumbent_experiment = 0;
  int64_t consecutive_reverts = 0;  // the plateau counter
  int64_t kept = 0, screened = 0, worker_starts = 0;
  std::map<std::string, int64_t> counts;  // correctness word -> experiments
  std::set<std::string> tried;            // schedule ids evaluated (or screened out)
  // Knob -> its one-knob proposals so far (evaluated or screened out): the systematic sweep
  // takes the least-swept knob's neighbours first (campaign.cpp).
  std::map<std::string, int64_t> knob_proposals;
  std::vector<std::string> warm_queue;    // the prior's warm-start configs not yet tried (JSON)
  bool done = false;                      // the loop's sweep found no untried neighbour
  std::string done_reason;
};

std::string campaign_state_to_json(const CampaignState& s);
// Throws std::runtime_error naming the file on a malformed state.
CampaignState campaign_state_from_json(const std::string& text, const std::string& source);

// nullopt when the file does not exist; throws std::runtime_error when it cannot be read.
std::optional<CampaignState> load_campaign_state(const std::filesystem::path& path);
// Atomic: a crash mid-write leaves the previous state. Throws std::runtime_error on failure.
void save_campaign_state(const std::filesystem::path& path, const CampaignState& s);

}  // namespace amk::search
