// `amk targets [--json]`: the built-in GpuTargets, the data every roofline floor is computed from.
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "amk/ir.h"
#include "amk/json.h"
#include "cli/commands.h"
#include "cli/table.h"

namespace amk::cli {

namespace {

struct TargetsOptions {
  bool json = false;
};

int run_targets(const TargetsOptions& opt) {
  if (opt.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const GpuTarget& t : builtin_targets())
      out.push_back(nlohmann::json::parse(target_to_json(t)));
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  using A = Table::Align;
  Table table({"name", "sm_arch", "SMs", "smem opt-in", "L2", "HBM", "spec GB/s", "measured GB/s",
               "note"},
              {A::Left, A::Right, A::Right, A::Right, A::Right, A::Right, A::Right, A::Right,
               A::Left});
  for (const GpuTarget& t : builtin_targets())
    table.add_row({t.name, fmt::format("sm_{}", t.sm_arch), std::to_string(t.num_sms),
                   format_bytes(t.smem_bytes_per_block_optin), format_bytes(t.l2_bytes),
                   format_bytes(t.hbm_bytes), fmt::format("{:.0f}", t.hbm_bandwidth_gbs),
                   t.measured_bw_gbs > 0 ? fmt::format("{:.0f}", t.measured_bw_gbs) : "-",
                   t.note});
  std::cout << table.render();
  return kExitOk;
}

}  // namespace

void add_targets_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<TargetsOptions>();
  CLI::App* cmd = app.add_subcommand("targets", "List the built-in GPU targets");
  cmd->add_flag("--json", opt->json, "Print the targets as a JSON array");
  cmd->callback([opt, &action] { action = [opt] { return run_targets(*opt); }; });
}

}  // namespace amk::cli
