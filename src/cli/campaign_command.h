// What `amk loop` and `amk autoresearch` share: the campaign's options from the command line,
// the run (amk/campaign.h), and the summary they print.
#pragma once

#include <string>
#include <vector>

#include "amk/campaign.h"
#include "cli/search_args.h"

namespace amk::cli {

struct CampaignArgs {
  SearchArgs search;
  std::string workdir, tag;
  int64_t iters = 0;
  double minutes = 0;
  bool cold = false;
  uint64_t seed = 0;
  std::vector<std::string> prior_corpora;
  double watchdog_s = 600, epsilon = 0.3;
};

void add_campaign_options(CLI::App* cmd, CampaignArgs& a, bool autoresearch);

int run_campaign_command(const CampaignArgs& a, search::Strategy strategy);

}  // namespace amk::cli
