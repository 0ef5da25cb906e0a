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

#ifndef AMK_BUILD_VERSION
#define AMK_BUILD_VERSION "unknown"
#endif
#ifndef AMK_BUILD_TYPE
#define AMK_BUILD_TYPE ""
#endif
#ifndef AMK_CUDA_TEXT
#define AMK_CUDA_TEXT "unknown"
#endif

// The build (CMake's project version and build type), the IR and ABI versions it reads and
// writes, and whether the CUDA VM is compiled in.
std::string version_text() {
  const std::string build_type = AMK_BUILD_TYPE;
  return "amk " AMK_BUILD_VERSION + (build_type.empty() ? "" : " (" + build_type + " build)") +
         "\nIR " + std::string(amk::kIrVersion) + ", ABI " + std::string(amk::kAbiVersion) +
         "\nCUDA " AMK_CUDA_TEXT;
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
  app.set_version_flag("--version", version_text(),
                       "Print the build, IR and ABI versions and whether CUDA is compiled in");
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
  amk::cli::add_tokenize_command(app, action);
  amk::cli::add_template_command(app, action);
  amk::cli::add_generate_command(app, action);
  amk::cli::add_chat_command(app, action);
  amk::cli::add_perplexity_command(app, action);
  amk::cli::add_serve_command(app, action);
  amk::cli::add_sim_command(app, action);
  amk::cli::add_eval_command(app, action);
  amk::cli::add_propose_command(app, action);
  amk::cli::add_loop_command(app, action);
  amk::cli::add_autoresearch_command(app, action);
  amk::cli::add_campaign_command(app, action);
  amk::cli::add_eval_worker_command(app, action);

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
