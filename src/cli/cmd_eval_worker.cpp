// `amk eval-worker --setup JSON` (hidden): the evaluation worker a campaign starts and talks to
// over its stdin/stdout (amk/eval_worker.h). Not for people.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "amk/eval_worker.h"
#include "cli/commands.h"

namespace amk::cli {

void add_eval_worker_command(CLI::App& app, Action& action) {
  auto setup = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("eval-worker", "");
  cmd->group("");  // hidden from --help
  cmd->add_option("--setup", *setup, "The worker's setup (JSON)")->required();
  cmd->callback([setup, &action] {
    action = [setup] { return search::run_eval_worker(*setup, std::cin, std::cout); };
  });
}

}  // namespace amk::cli
