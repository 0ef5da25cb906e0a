// `amk loop MODEL --gpu G --budget N --device sim|cuda`: PROGRAM.md §3's keep/revert loop as a
// systematic one-knob sweep in §5B tier order (amk/campaign.h, Strategy::Sweep).
#include <CLI/CLI.hpp>
#include <memory>

#include "cli/campaign_command.h"
#include "cli/commands.h"

namespace amk::cli {

void add_loop_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<CampaignArgs>();
  CLI::App* cmd = app.add_subcommand(
      "loop", "The keep/revert loop: one knob per experiment in PROGRAM.md §5B order");
  add_campaign_options(cmd, *a, /*autoresearch=*/false);
  cmd->callback(
      [a, &action] { action = [a] { return run_campaign_command(*a, search::Strategy::Sweep); }; });
}

}  // namespace amk::cli
