// `amk validate FILE [--json]`: the static safety proof of IR_SPEC §3, as text or JSON.
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "amk/validate.h"
#include "cli/commands.h"
#include "cli/program_file.h"

namespace amk::cli {

namespace {

struct ValidateOptions {
  std::string file;
  bool json = false;
};

nlohmann::json stats_json(const ValidationStats& s) {
  return {{"tasks", s.tasks},           {"buffers", s.buffers},   {"counters", s.counters},
          {"edges", s.edges},           {"acyclic", s.acyclic},   {"weight_mb", s.weight_mb},
          {"sm_assigned", s.sm_assigned}, {"hb_queries", s.hb_queries}};
}

int run_validate(const ValidateOptions& opt) {
  const auto loaded = load_program_file(opt.file);
  if (!loaded) {
    if (opt.json)
      std::cout << nlohmann::json{{"file", opt.file},     {"verdict", "UNREADABLE"},
                                  {"ok", false},          {"errors", nlohmann::json::array()},
                                  {"warnings", nlohmann::json::array()}}
                       .dump(2)
                << "\n";
    return kExitBadInput;
  }
  const ValidationResult r = validate(loaded->program);
  if (opt.json) {
    nlohmann::json out = {{"file", opt.file},
                          {"verdict", r.ok ? "VALID" : "REJECTED"},
                          {"ok", r.ok},
                          {"errors", r.errors},
                          {"warnings", r.warnings},
                          {"load_warnings", loaded->warnings},
                          {"stats", stats_json(r.stats)}};
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << r.report();
    if (!r.report().empty() && r.report().back() != '\n') std::cout << "\n";
    for (const std::string& w : loaded->warnings) std::cout << "warning: (load) " << w << "\n";
  }
  return r.ok ? kExitOk : kExitFailed;
}

}  // namespace

void add_validate_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<ValidateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "validate", "Prove a program deadlock- and race-free (exit 0 valid, 1 rejected, 2 unreadable)");
  cmd->add_option("file", opt->file, "Program JSON file")->required();
  cmd->add_flag("--json", opt->json, "Print {verdict, ok, errors, warnings, stats} as JSON");
  cmd->callback([opt, &action] { action = [opt] { return run_validate(*opt); }; });
}

}  // namespace amk::cli
