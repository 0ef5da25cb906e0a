// `amk campaign status|next|report --workdir DIR [--json]`: the orchestrator's view of a
// campaign (amk/campaign_report.h). `next` answers CONTINUE or STOP by the move-on criteria.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "amk/campaign_report.h"
#include "cli/commands.h"

namespace amk::cli {

namespace {

struct CampaignCmdArgs {
  std::string action, workdir;
  bool json = false;
};

int run_campaign_view(const CampaignCmdArgs& a) {
  search::CampaignStatus status;
  try {
    status = search::campaign_status(a.workdir);
  } catch (const std::exception& e) {
    std::cerr << "amk: campaign: " << e.what() << "\n";
    return kExitBadInput;
  }
  const search::NextAdvice next = search::campaign_next(status);
  if (a.action == "status") {
    std::cout << (a.json ? search::status_json(status) + "\n" : search::status_text(status));
  } else if (a.action == "next") {
    if (a.json) {
      std::cout << search::next_json(next) << "\n";
    } else {
      std::cout << (next.stop ? "STOP" : "CONTINUE") << "\n";
      for (const auto& r : next.reasons) std::cout << "  " << r << "\n";
      if (!next.hottest_region.empty())
        std::cout << "  hottest region of the critical path: " << next.hottest_region << "\n";
    }
  } else {
    std::cout << (a.json ? search::report_json(status, next) + "\n"
                         : search::report_text(status, next));
  }
  return kExitOk;
}

}  // namespace

void add_campaign_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<CampaignCmdArgs>();
  CLI::App* cmd = app.add_subcommand(
      "campaign", "A campaign's status, whether to go on (next), or its report");
  cmd->add_option("action", a->action, "status | next | report")
      ->required()
      ->check(CLI::IsMember({"status", "next", "report"}));
  cmd->add_option("--workdir", a->workdir, "The campaign folder")->required();
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a, &action] { action = [a] { return run_campaign_view(*a); }; });
}

}  // namespace amk::cli
