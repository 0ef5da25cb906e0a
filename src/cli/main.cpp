// `amk`: validate, inspect and run megakernel programs. The exit-code contract (0 ok, 1 rejected
// or failed, 2 bad input or usage) holds for every command, including parse errors.
#include <exception>
#include <functional>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "amk/ir.h"
#include "cli/commands.h"

namespace {

std::string version_text() {
  return "amk " + std::string(amk::kIrVersion) + " (IR " + std::string(amk::kIrVersion) +
         ", ABI " + std::string(amk::kAbiVersion) + ")";
}

// The help of the deepest subcommand the parser reached, so a usage error shows relevant usage.
std::string usage_for(const CLI::App& app) {
  const CLI::App* deepest = &app;
  while (!deepest->get_subcommands().empty()) deepest = deepest->get_subcommands().front();
  return deepest->help();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"AutoMegaKernel: validate, inspect and run megakernel IR programs.", "amk"};
  app.set_version_flag("--version", version_text(), "Print the IR and ABI versions and exit");
  app.require_subcommand(1);
  app.footer("Exit codes: 0 ok, 1 rejected or failed, 2 unreadable input or bad usage.\n");

  amk::cli::Action action;
  amk::cli::add_validate_command(app, action);
  amk::cli::add_info_command(app, action);
  amk::cli::add_targets_command(app, action);
  amk::cli::add_exec_command(app, action);
  amk::cli::add_compile_command(app, action);
  amk::cli::add_run_command(app, action);
  amk::cli::add_oracle_command(app, action);
  amk::cli::add_make_model_command(app, action);
  amk::cli::add_bench_command(app, action);

  // CLI11 reports a mistyped command only as "a subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    const std::function<bool(CLI::App*)> all;  // an empty filter lists every subcommand
    for (CLI::App* sub : app.get_subcommands(all)) known |= sub->check_name(argv[1]);
    if (!known) {
      std::cerr << "amk: unknown command '" << argv[1] << "'\n\n" << app.help();
      return amk::cli::kExitBadInput;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "amk: " << e.what() << "\n\n" << usage_for(app);
    return amk::cli::kExitBadInput;
  }

  try {
    return action ? action() : amk::cli::kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "amk: internal error: " << e.what() << "\n";
    return amk::cli::kExitFailed;
  }
}
