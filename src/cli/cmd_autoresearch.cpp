// `amk autoresearch MODEL --gpu G --device sim|cuda (--iters N | --minutes M) [--workdir DIR]
// [--cold] [--seed S]`: the unattended Loop-2 driver of PROGRAM.md §8B (amk/campaign.h).
#include <CLI/CLI.hpp>
#include <memory>

#include "cli/campaign_command.h"
#include "cli/commands.h"

namespace amk::cli {

void add_autoresearch_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<CampaignArgs>();
  CLI::App* cmd = app.add_subcommand(
      "autoresearch",
      "Search ScheduleConfigs unattended: propose, evaluate in a worker, keep/revert, log, "
      "checkpoint; resumable");
  add_campaign_options(cmd, *a, /*autoresearch=*/true);
  cmd->callback([a, &action] {
    action = [a] { return run_campaign_command(*a, search::Strategy::Autoresearch); };
  });
}

}  // namespace amk::cli
