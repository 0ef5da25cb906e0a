// `amk exec FILE [--pos N]`: run a program on the ReferenceVM with deterministic synthetic data
// (cli/synthetic_data.h) and print its outputs. A program that reads the step position (what
// `amk compile` writes) runs at --pos (default 0). With --runs N the program runs N times on one
// VM (the KV cache persists, as between launches on device) and the outputs must agree run to
// run: a disagreement in a validated program means a nondeterministic op or VM bug.
#include <algorithm>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "amk/reference_vm.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/program_file.h"
#include "cli/synthetic_data.h"

namespace amk::cli {

namespace {

struct ExecOptions {
  std::string file;
  uint64_t seed = 0;
  bool seed_given = false;  // else a random seed, printed
  int64_t pos = 0;          // the step position
  bool pos_given = false;
  std::string order = "list";
  int runs = 1;
  double timeout_s = 60.0;
  bool json = false;
};

constexpr int64_t kShownValues = 8;

bool is_integer(DType d) {
  return d == DType::I32 || d == DType::I8 || d == DType::I4 || d == DType::U8 ||
         d == DType::BOOL;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return "[" + fmt::format("{}", fmt::join(shape, ",")) + "]";
}

// The reference VM would refuse these anyway; checking first keeps the synthetic data for a
// typo'd shape from being allocated at all.
std::string size_problem(const Program& p) {
  int64_t total = 0;
  for (const Buffer& b : p.buffers) {
    if (b.nbytes() > kVmMaxBufferBytes)
      return fmt::format("buffer {} '{}' {} {} needs {} bytes, over the reference VM's cap of {}",
                         b.id, b.name, name_of(b.dtype), shape_text(b.shape), b.nbytes(),
                         kVmMaxBufferBytes);
    total += b.nbytes();
  }
  if (total > kVmMaxTotalBytes)
    return fmt::format("buffers need {} bytes in all, over the reference VM's cap of {}", total,
                       kVmMaxTotalBytes);
  return {};
}

nlohmann::json output_json(const Buffer& b, const Tensor& t) {
  nlohmann::json o = {{"id", b.id}, {"name", b.name}, {"dtype", std::string(name_of(b.dtype))},
                      {"shape", b.shape}};
  const int64_t shown = std::min(t.numel(), kShownValues);
  nlohmann::json values = nlohmann::json::array();
  for (int64_t i = 0; i < shown; ++i) {
    if (is_integer(b.dtype))
      values.push_back(t.get_int(i));
    else
      values.push_back(t.get(i));  // NaN becomes null in JSON
  }
  o["values"] = values;
  if (is_integer(b.dtype) && t.numel() == 1) o["value"] = t.get_int(0);
  return o;
}

std::string output_text(const Buffer& b, const Tensor& t) {
  std::string line = fmt::format("  {} (buffer {}) {} {}", b.name, b.id, name_of(b.dtype),
                                 shape_text(b.shape));
  if (is_integer(b.dtype) && t.numel() == 1) return line + fmt::format(" = {}", t.get_int(0));
  const int64_t shown = std::min(t.numel(), kShownValues);
  std::vector<std::string> values;
  for (int64_t i = 0; i < shown; ++i)
    values.push_back(is_integer(b.dtype) ? std::to_string(t.get_int(i))
                                         : fmt::format("{:.6g}", t.get(i)));
  return line + fmt::format(": {}{}", fmt::join(values, " "), t.numel() > shown ? " ..." : "");
}

int run_exec(const ExecOptions& options) {
  ExecOptions opt = options;
  if (!opt.seed_given) opt.seed = random_seed();
  auto loaded = load_program_file(opt.file);
  if (!loaded) return kExitBadInput;
  ReferenceVM vm(std::move(loaded->program));
  const Program& p = vm.program();
  const auto fail = [&](const std::string& status, const std::string& message) {
    if (opt.json)
      std::cout << nlohmann::json{{"file", opt.file}, {"status", status}, {"message", message}}
                       .dump(2)
                << "\n";
    else
      std::cout << "status: " << status << "\n" << message << "\n";
    return kExitFailed;
  };
  if (!vm.accepted()) {
    std::string report = vm.validation().report();
    if (!report.empty() && report.back() == '\n') report.pop_back();
    return fail("Rejected", "refusing to run a program validate() rejects:\n" + report);
  }
  if (const std::string problem = size_problem(p); !problem.empty())
    return fail("ResourceLimit", problem);
  // The step position: what a program `amk compile` writes reads at run time (meta.step_position,
  // docs/RUNTIME_POSITION.md). A program whose positions are its params takes no --pos.
  if (opt.pos_given && step_position_buffer(p) == nullptr) {
    std::cerr << "amk: --pos: " << opt.file
              << " reads no step position (no meta.step_position naming an IO_INPUT); its "
                 "positions are its tasks' params\n";
    return kExitBadInput;
  }
  int64_t kv_rows = -1;
  for (const Buffer& b : p.buffers)
    if (const int64_t rows = kv_cache_positions(b); b.kind == BufferKind::KV_CACHE && rows >= 0)
      kv_rows = kv_rows < 0 ? rows : std::min(kv_rows, rows);
  if (kv_rows >= 0 && opt.pos >= kv_rows) {
    std::cerr << "amk: --pos " << opt.pos << " is past the program's KV cache of " << kv_rows
              << " rows (positions 0 to " << kv_rows - 1 << ")\n";
    return kExitBadInput;
  }
  const std::vector<std::string> notes = bind_synthetic_data(vm, opt.seed, opt.pos);

  VmOptions vm_opt;
  vm_opt.step_position = opt.pos;
  vm_opt.order = opt.order == "random" ? VmOptions::Order::Random : VmOptions::Order::ListOrder;
  vm_opt.timeout_s = opt.timeout_s;
  std::vector<VmRunResult> results;
  std::vector<std::vector<std::vector<uint8_t>>> outputs;  // per run, per IO_OUTPUT
  bool identical = true;
  for (int i = 0; i < opt.runs; ++i) {
    vm_opt.seed = opt.seed + static_cast<uint64_t>(i);
    results.push_back(vm.run(vm_opt));
    if (!results.back().ok()) break;
    std::vector<std::vector<uint8_t>> these;
    for (const Buffer& b : p.buffers)
      if (b.kind == BufferKind::IO_OUTPUT) these.push_back(vm.buffer(b.id).bytes);
    if (!outputs.empty() && these != outputs.front()) identical = false;
    outputs.push_back(std::move(these));
  }
  const VmRunResult& last = results.back();
  const bool ok = last.ok() && identical;

  if (opt.json) {
    nlohmann::json out = {{"file", opt.file},
                          {"status", std::string(name_of(last.status))},
                          {"message", last.message},
                          {"ok", ok},
                          {"order", opt.order},
                          {"seed", opt.seed},
                          {"seed_random", !opt.seed_given},
                          {"pos", opt.pos},
                          {"runs", results.size()},
                          {"identical_across_runs", identical},
                          {"fired", last.fired.size()},
                          {"tasks", p.tasks.size()},
                          {"wall_s", last.wall_s},
                          {"inputs", notes}};
    nlohmann::json outs = nlohmann::json::array();
    if (last.ok())
      for (const Buffer& b : p.buffers)
        if (b.kind == BufferKind::IO_OUTPUT) outs.push_back(output_json(b, vm.buffer(b.id)));
    out["outputs"] = outs;
    std::cout << out.dump(2) << "\n";
    return ok ? kExitOk : kExitFailed;
  }

  std::cout << fmt::format("program {}: {} tasks, {} buffers; synthetic data seed {}{}\n", opt.file,
                           p.tasks.size(), p.buffers.size(), opt.seed,
                           opt.seed_given ? "" : fmt::format(" (random: --seed {} repeats this run)",
                                                             opt.seed));
  for (const std::string& n : notes) std::cout << "  input " << n << "\n";
  if (last.ok()) {
    std::cout << "outputs:\n";
    for (const Buffer& b : p.buffers)
      if (b.kind == BufferKind::IO_OUTPUT) std::cout << output_text(b, vm.buffer(b.id)) << "\n";
  }
  std::cout << fmt::format("status: {} ({} of {} tasks fired, {} order, {:.3f} ms)\n",
                           name_of(last.status), last.fired.size(), p.tasks.size(), opt.order,
                           last.wall_s * 1e3);
  if (!last.message.empty()) std::cout << last.message << "\n";
  if (results.size() > 1 || opt.runs > 1)
    std::cout << fmt::format("runs: {} of {}, outputs identical across runs: {}\n", results.size(),
                             opt.runs, identical ? "yes" : "NO");
  return ok ? kExitOk : kExitFailed;
}

}  // namespace

void add_exec_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<ExecOptions>();
  CLI::App* cmd = app.add_subcommand(
      "exec", "Run a program on the CPU reference VM with deterministic synthetic weights/inputs");
  cmd->add_option("file", opt->file, "Program JSON file")->required();
  CLI::Option* seed = cmd->add_option(
      "--seed", opt->seed,
      "Seed of the synthetic data (and of --order random); default: a random one, printed");
  seed->check(seed_number());
  CLI::Option* pos = cmd->add_option(
      "--pos", opt->pos,
      "Step position of a program that reads it (meta.step_position, as `amk compile` writes): "
      "the token's position, below the KV cache's rows");
  pos->check(CLI::Range(int64_t{0}, int64_t{std::numeric_limits<int32_t>::max()}))
      ->capture_default_str();
  cmd->add_option("--order", opt->order, "Firing order: list (first ready in list order) or random")
      ->check(CLI::IsMember({"list", "random"}))
      ->capture_default_str();
  cmd->add_option("--runs", opt->runs, "Run N times on one VM; outputs must agree")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--timeout", opt->timeout_s, "Watchdog per run, seconds")
      ->check(finite_number(/*positive=*/true))
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "Print status and outputs as JSON");
  cmd->callback([opt, seed, pos, &action] {
    opt->seed_given = seed->count() > 0;
    opt->pos_given = pos->count() > 0;
    action = [opt] { return run_exec(*opt); };
  });
}

}  // namespace amk::cli
