// `amk info FILE [--gpu NAME] [--json]`: what a program contains and how fast it could possibly
// run: the bandwidth floor is the weight bytes streamed once per token at the target's HBM
// bandwidth (IR_SPEC §5.1), for the spec and the measured figure.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "amk/ir.h"
#include "amk/validate.h"
#include "cli/commands.h"
#include "cli/program_file.h"
#include "cli/table.h"  // format_bytes

namespace amk::cli {

namespace {

struct InfoOptions {
  std::string file;
  std::string gpu;
  bool json = false;
};

std::string builtin_names() {
  std::string names;
  for (const GpuTarget& t : builtin_targets()) names += (names.empty() ? "" : ", ") + t.name;
  return names;
}

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nullptr; }

int run_info(const InfoOptions& opt) {
  std::optional<GpuTarget> override_target;
  if (!opt.gpu.empty()) {
    const GpuTarget* t = find_target(opt.gpu);
    if (t == nullptr) {
      std::cerr << "amk: unknown --gpu '" << opt.gpu << "' (built-in: " << builtin_names() << ")\n";
      return kExitBadInput;
    }
    override_target = *t;
  }
  const auto loaded = load_program_file(opt.file);
  if (!loaded) return kExitBadInput;
  const Program& p = loaded->program;

  // Ordered by enum code so the output is stable and reads in opcode order.
  std::map<int, int64_t> by_op, by_kind;
  for (const Task& t : p.tasks) ++by_op[static_cast<int>(t.op)];
  for (const Buffer& b : p.buffers) ++by_kind[static_cast<int>(b.kind)];
  const int64_t weight_bytes = p.total_weight_bytes();
  const int64_t scratch = p.pages ? p.pages->total_scratch_bytes() : 0;
  const int64_t n_pages = p.pages ? static_cast<int64_t>(p.pages->pages.size()) : 0;

  const std::optional<GpuTarget>& target = override_target ? override_target : p.target;
  const char* target_source = override_target ? "--gpu" : "program";
  const double floor_spec = target ? target->bandwidth_bound_us(weight_bytes) : std::nan("");
  const double floor_measured =
      target ? target->measured_bandwidth_bound_us(weight_bytes) : std::nan("");

  const ValidationResult v = validate(p);
  const std::string report = v.report();
  const std::string verdict_line = report.substr(0, report.find('\n'));

  if (opt.json) {
    nlohmann::json ops = nlohmann::json::object(), kinds = nlohmann::json::object();
    for (const auto& [op, n] : by_op) ops[std::string(name_of(static_cast<Op>(op)))] = n;
    for (const auto& [k, n] : by_kind) kinds[std::string(name_of(static_cast<BufferKind>(k)))] = n;
    nlohmann::json out = {
        {"file", opt.file},
        {"model", p.meta_string("model") ? nlohmann::json(*p.meta_string("model")) : nullptr},
        {"ir_version", p.ir_version},
        {"abi_version", p.abi_version},
        {"tasks", p.tasks.size()},
        {"tasks_by_op", ops},
        {"buffers", p.buffers.size()},
        {"buffers_by_kind", kinds},
        {"counters", p.counters.size()},
        {"pages", n_pages},
        {"scratch_bytes", scratch},
        {"weight_bytes", weight_bytes},
        {"est_bytes", p.total_est_bytes()},
        {"est_flops", p.total_est_flops()},
        {"target", target ? nlohmann::json(target->name) : nullptr},
        {"target_source", target ? nlohmann::json(target_source) : nullptr},
        {"floor_us_spec", number_or_null(floor_spec)},
        {"floor_us_measured", number_or_null(floor_measured)},
        {"verdict", v.ok ? "VALID" : "REJECTED"},
        {"ok", v.ok},
    };
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }

  const std::optional<std::string> model = p.meta_string("model");
  std::cout << fmt::format("program   {}  (model {}, IR {}, ABI {})\n", opt.file,
                           model.value_or("?"), p.ir_version, p.abi_version);
  std::cout << fmt::format("tasks     {}\n", p.tasks.size());
  // The widest opcode present sets the column, so the counts line up whatever the ops.
  size_t width = 0;
  for (const auto& [op, n] : by_op) width = std::max(width, name_of(static_cast<Op>(op)).size());
  for (const auto& [op, n] : by_op)
    std::cout << fmt::format("  {:<{}} {:>6}\n", name_of(static_cast<Op>(op)), width, n);
  std::string kinds;
  for (const auto& [k, n] : by_kind)
    kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", name_of(static_cast<BufferKind>(k)), n);
  std::cout << fmt::format("buffers   {}{}\n", p.buffers.size(),
                           kinds.empty() ? "" : "  (" + kinds + ")");
  std::cout << fmt::format("counters  {}\n", p.counters.size());
  std::cout << (p.pages ? fmt::format("pages     {} pages, {} scratch ({} bytes)\n", n_pages,
                                      format_bytes(scratch), scratch)
                        : std::string("pages     none (no page allocation)\n"));
  std::cout << fmt::format("weights   {} bytes ({})\n", weight_bytes, format_bytes(weight_bytes));
  std::cout << fmt::format("estimate  {} bytes, {} flops (task hints)\n", p.total_est_bytes(),
                           p.total_est_flops());
  if (!target) {
    std::cout << "floor     n/a: the program has no target; pick one with --gpu NAME (built-in: "
              << builtin_names() << ")\n";
  } else {
    std::cout << fmt::format("target    {} (from {})\n", target->name, target_source);
    std::cout << fmt::format("floor     {:.3f} µs at spec {:.0f} GB/s\n", floor_spec,
                             target->hbm_bandwidth_gbs);
    if (target->measured_bw_gbs > 0)
      std::cout << fmt::format("floor     {:.3f} µs at measured {:.0f} GB/s\n", floor_measured,
                               target->measured_bw_gbs);
    else
      std::cout << "floor     (no measured bandwidth for this target; spec floor only)\n";
  }
  std::cout << "verdict   " << verdict_line << "\n";
  return kExitOk;
}

}  // namespace

void add_info_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "info", "Summarise a program: counts, weight bytes, bandwidth floor, validation verdict");
  cmd->add_option("file", opt->file, "Program JSON file")->required();
  cmd->add_option("--gpu", opt->gpu, "Compute the floor for this built-in target instead");
  cmd->add_flag("--json", opt->json, "Print the summary as JSON");
  cmd->callback([opt, &action] { action = [opt] { return run_info(*opt); }; });
}

}  // namespace amk::cli
