// `amk sim`, `amk sim-fit`, `amk sim-score`: the timing simulator (docs/SIMULATOR.md). `sim`
// lowers (or loads) a program and prints its predicted µs/token and the per-level table of the
// simulated step, the same table `amk bench --trace` prints for a measured one; `sim-fit` fits the
// constants to GPU measurements; `sim-score` scores constants on held-out measurements.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "amk/hash.h"
#include "amk/json.h"
#include "amk/lowering.h"
#include "amk/model_config.h"
#include "amk/model_presets.h"
#include "amk/sim_cases.h"
#include "amk/sim_constants_io.h"
#include "amk/sim_fit.h"
#include "amk/step_trace.h"
#include "amk/timing_sim.h"
#include "amk/weight_traffic.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "cli/program_file.h"
#include "cli/table.h"

namespace amk::cli {

namespace {

namespace fs = std::filesystem;

// amk bench's context for its default 256 + 32 tokens: the simulated step matches its runs.
constexpr int64_t kSimDefaultContext = 512;

struct SimCommandOptions {
  std::string model, gpu = "h100", config, constants, trace, write_config, measured, tp;
  int64_t max_context = 0, position = -1, trace_layer = -1, cluster_size = 0;
  int steps = 2;
  bool json = false;
};

// The constants a command uses: --constants FILE, else the target's stored fit or defaults.
// Prints why and returns nullopt when the file is unusable.
std::optional<sim::SimConstants> constants_option(const std::string& path, const GpuTarget& target,
                                                  std::string* source) {
  if (path.empty()) {
    *source = sim::stored_constants(target.name) ? "stored fit data/targets/" + target.name + ".sim.json"
                                                 : "defaults scaled to " + target.name;
    return sim::constants_for(target);
  }
  try {
    sim::SimConstants c = sim::load_constants(path);
    if (c.ceiling_gbs <= 0)
      c.ceiling_gbs = target.measured_bw_gbs > 0 ? target.measured_bw_gbs : target.hbm_bandwidth_gbs;
    *source = path;
    return c;
  } catch (const std::exception& e) {
    std::cerr << "amk: " << e.what() << "\n";
    return std::nullopt;
  }
}

// The program `amk sim` simulates: a program file as it is, else the model (a checkpoint folder
// or a .gguf file, or a preset's shape) lowered as amk bench lowers it.
std::optional<Program> sim_program(const SimCommandOptions& opt, const GpuTarget& target,
                                   std::string* model_name) {
  std::error_code ec;
  const fs::path path(opt.model);
  const auto& presets = model_preset_names();
  const bool is_preset = !fs::exists(path, ec) &&
                         std::find(presets.begin(), presets.end(), opt.model) != presets.end();
  *model_name = is_preset ? opt.model : path.filename().string();
  if (!is_preset && fs::is_regular_file(path, ec) && path.extension() == ".json") {
    if (!opt.config.empty() || opt.max_context > 0 || !opt.tp.empty()) {
      std::cerr << "amk: sim: '" << opt.model << "' is a program: --config, --tp and "
                   "--max-context belong to a model\n";
      return std::nullopt;
    }
    auto loaded = load_program_file(opt.model);  // prints why not
    if (!loaded) return std::nullopt;
    return std::move(loaded->program);
  }
  ModelConfig model;
  std::optional<DType> dtype;
  std::optional<ScheduleConfig> config;
  if (is_preset) {
    model = parse_model_config(model_preset_config(opt.model, "bfloat16"), opt.model);
    dtype = DType::BF16;
    config = load_schedule_config(opt.config);
    if (!config) return std::nullopt;
  } else {
    if (!fs::exists(path, ec)) {
      std::string names;
      for (auto n : presets) names += (names.empty() ? "" : ", ") + std::string(n);
      std::cerr << "amk: sim: '" << opt.model << "' is neither a file, a folder nor a preset ("
                << names << ")\n";
      return std::nullopt;
    }
    auto in = open_model_inputs(opt.model, opt.config);  // prints why not
    if (!in) return std::nullopt;
    model = in->checkpoint.config();
    dtype = in->weight_dtype;
    if (in->config_given) config = in->config;
  }
  int64_t context = opt.max_context > 0 ? opt.max_context : kSimDefaultContext;
  if (opt.max_context <= 0 && model.max_position_embeddings > 0)
    context = std::min(context, model.max_position_embeddings);
  if (!check_positions(model, context, "--max-context")) return std::nullopt;
  try {
    std::optional<TensorParallelShape> tp;
    if (!opt.tp.empty() && !(tp = parse_tp_option(opt.tp, !opt.config.empty(), "sim")))
      return std::nullopt;  // it printed why
    const ScheduleConfig schedule =
        tp ? tensor_parallel_schedule_config(model, target, context, tp->clusters, tp->size,
                                             tp->attention)
        : opt.config.empty() ? default_schedule_config(model, target, context)
                             : *config;
    return lower(model, schedule, target, context, dtype);
  } catch (const std::exception& e) {
    std::cerr << "amk: sim: cannot lower '" << opt.model << "': " << e.what() << "\n";
    return std::nullopt;
  }
}

int run_sim(const SimCommandOptions& opt) {
  const GpuTarget* target = resolve_target(opt.gpu);
  if (target == nullptr) return kExitBadInput;
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--trace", opt.trace},
                                   {"--write-config", opt.write_config}})
    if (const std::string problem = overwrite_problem(path, {opt.model, opt.config});
        !problem.empty()) {
      std::cerr << "amk: sim: refusing to write " << flag << " '" << path << "': it " << problem
                << "\n";
      return kExitBadInput;
    }
  std::string source, model_name;
  const auto constants = constants_option(opt.constants, *target, &source);
  if (!constants) return kExitBadInput;
  const auto program = sim_program(opt, *target, &model_name);
  if (!program) return kExitBadInput;
  if (opt.trace_layer >= 0 && opt.trace_layer >= eval::layer_count(*program)) {
    std::cerr << fmt::format("amk: sim: --trace-layer {}: the program has {} layers\n",
                             opt.trace_layer, eval::layer_count(*program));
    return kExitBadInput;
  }
  sim::SimResult r;
  sim::SimOptions options{opt.position, opt.steps, opt.cluster_size};
  try {
    r = sim::simulate_step(*program, *target, *constants, options);
  } catch (const std::exception& e) {
    std::cerr << "amk: sim: cannot simulate '" << opt.model << "': " << e.what() << "\n";
    return kExitBadInput;
  }
  const double ceiling = constants->ceiling_gbs;
  int64_t context = 0;
  for (const Buffer& b : program->buffers)
    if (b.kind == BufferKind::KV_CACHE) context = std::max(context, kv_cache_positions(b));
  const int64_t position = opt.position >= 0 ? opt.position : std::min<int64_t>(192, std::max<int64_t>(context - 1, 0));
  const eval::TrafficEstimate traffic = eval::estimate_traffic(*program, position);
  const double floor_us = double(traffic.weight_bytes) / (ceiling * 1e3);
  const std::optional<int64_t> layer =
      opt.trace_layer >= 0 ? std::optional<int64_t>(opt.trace_layer) : std::nullopt;
  std::string table_text;
  eval::LayerTable table;
  const bool has_layers = eval::layer_count(*program) > 0;
  if (has_layers) {
    table = eval::layer_table(*program, r.stamps, ceiling, layer);
    table_text = eval::format_layer_table(table);
  }
  // --measured: the same layer's table from a GPU run's stamps of this very program (amk bench
  // --profile-tsv with the same model, config and context), to lay beside the simulated one.
  std::optional<eval::LayerTable> measured;
  if (!opt.measured.empty()) {
    try {
      const sim::MeasuredProfile m =
          sim::read_profile_tsv_file(opt.measured, *program, "--measured");
      if (has_layers) measured = eval::layer_table(*program, m.stamps, ceiling, layer);
    } catch (const std::exception& e) {
      std::cerr << "amk: sim: " << e.what() << "\n";
      return kExitBadInput;
    }
  }
  // The same id amk bench gives the schedule (its results.tsv column), to pair runs with cases.
  const std::string schedule_id =
      program->config ? fmt::format("sched-{:016x}", fnv1a64(config_to_json(*program->config))) : "-";
  if (!opt.write_config.empty() && program->config) {
    std::ofstream f(opt.write_config);
    f << config_to_json(*program->config) << "\n";
    if (!f) {
      std::cerr << "amk: sim: cannot write '" << opt.write_config << "'\n";
      return kExitFailed;
    }
  }
  if (!opt.trace.empty()) {
    try {
      eval::write_chrome_trace(opt.trace, *program, r.stamps);
    } catch (const std::exception& e) {
      std::cerr << "amk: sim: " << e.what() << "\n";
      return kExitFailed;
    }
  }
  if (opt.json) {
    nlohmann::ordered_json j;
    j["model"] = model_name;
    j["target"] = target->name;
    j["constants"] = source;
    j["position"] = position;
    j["schedule_id"] = schedule_id;
    j["tasks"] = program->tasks.size();
    j["weight_bytes"] = traffic.weight_bytes;
    j["ceiling_gbs"] = ceiling;
    j["floor_us"] = floor_us;
    j["predicted_us_per_token"] = r.step_us;
    j["tokens_per_s"] = 1e6 / r.step_us;
    j["pct_of_floor"] = floor_us / r.step_us * 100;
    j["hbm_busy_fraction"] = r.hbm_busy_fraction;
    if (has_layers) {
      nlohmann::ordered_json levels = nlohmann::ordered_json::array();
      for (const eval::LevelRow& row : table.levels)
        levels.push_back({{"stage", row.stage}, {"tasks", row.tasks}, {"bytes", row.bytes},
                          {"floor_us", row.floor_us}, {"span_us", row.span_us},
                          {"from_prev_us", row.from_prev_us}, {"exposed_us", row.exposed_us},
                          {"gate_us", row.gate_us}, {"late_tasks", row.late_tasks},
                          {"late_to_begin_us", row.late_to_begin_us},
                          {"met_to_begin_us", row.met_to_begin_us}, {"pre_us", row.pre_us},
                          {"body_us", row.body_us}, {"epi_us", row.epi_us}});
      j["layer"] = table.layer;
      j["levels"] = levels;
      j["layer_span_us"] = table.total.span_us;
      if (measured) {
        nlohmann::ordered_json mlevels = nlohmann::ordered_json::array();
        for (const eval::LevelRow& row : measured->levels)
          mlevels.push_back({{"stage", row.stage}, {"tasks", row.tasks}, {"span_us", row.span_us},
                             {"from_prev_us", row.from_prev_us}, {"gate_us", row.gate_us},
                             {"late_tasks", row.late_tasks},
                             {"late_to_begin_us", row.late_to_begin_us},
                             {"met_to_begin_us", row.met_to_begin_us}, {"pre_us", row.pre_us},
                             {"body_us", row.body_us}, {"epi_us", row.epi_us}});
        j["measured_levels"] = mlevels;
        j["measured_layer_span_us"] = measured->total.span_us;
      }
    }
    if (!opt.trace.empty()) j["trace"] = opt.trace;
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << fmt::format("simulated {} on {} at position {} ({} steps; constants: {})\n",
                           model_name, target->name, position, opt.steps, source);
  if (opt.cluster_size > 1)
    std::cout << fmt::format("clusters  of {} SMs: in-cluster hand-offs as shared-memory mailboxes "
                             "(a {:.2f} µs hop, no loaded release)\n",
                             opt.cluster_size, sim::cluster_hop_us(opt.cluster_size));
  std::cout << fmt::format("program   {} ({}): {} tasks, {} weight bytes ({}), floor {:.1f} µs at "
                           "{:.0f} GB/s\n",
                           schedule_id, program->config ? "its config" : "no config",
                           program->tasks.size(), traffic.weight_bytes,
                           format_bytes(traffic.weight_bytes), floor_us, ceiling);
  std::cout << fmt::format("predicted {:.1f} µs/token ({:.0f} tok/s), {:.1f} % of floor; HBM busy "
                           "{:.0f} % of the step\n",
                           r.step_us, 1e6 / r.step_us, floor_us / r.step_us * 100,
                           r.hbm_busy_fraction * 100);
  if (!opt.trace.empty()) std::cout << "trace     " << opt.trace << "\n";
  if (!table_text.empty()) std::cout << "\n" << table_text;
  if (measured)
    std::cout << "\nmeasured (" << opt.measured << "), the same layer:\n"
              << eval::format_layer_table(*measured);
  return kExitOk;
}

// ---- sim-fit / sim-score --------------------------------------------------------------------

struct CalibrationOptions {
  std::string manifest, gpu = "h100", constants, out, free, json_path;
  std::vector<std::string> groups, exclude_groups;
  // The fit's defaults are FitOptions' own.
  int max_evaluations = sim::FitOptions{}.max_evaluations, threads = sim::FitOptions{}.threads;
  double profile_weight = sim::FitOptions{}.profile_weight;
  double relative_weight = sim::FitOptions{}.relative_weight;
  int starts = sim::FitOptions{}.starts;
  uint64_t seed = sim::FitOptions{}.seed;
};

// The manifest's cases, less the groups left out (or only the groups named). Prints why not.
std::optional<std::vector<sim::SimCase>> selected_cases(const CalibrationOptions& opt,
                                                        const GpuTarget& target) {
  std::vector<sim::SimCase> cases;
  try {
    cases = sim::load_cases(opt.manifest, target);
  } catch (const std::exception& e) {
    std::cerr << "amk: " << e.what() << "\n";
    return std::nullopt;
  }
  auto named = [](const std::vector<std::string>& list, const std::string& g) {
    return std::find(list.begin(), list.end(), g) != list.end();
  };
  std::erase_if(cases, [&](const sim::SimCase& c) {
    return (!opt.groups.empty() && !named(opt.groups, c.group)) || named(opt.exclude_groups, c.group);
  });
  if (cases.empty()) {
    std::cerr << "amk: no case of '" << opt.manifest << "' is left after --group/--exclude-group\n";
    return std::nullopt;
  }
  return cases;
}

std::string case_table(const std::vector<sim::SimCase>& cases, const std::vector<double>& predicted) {
  Table t({"group", "case", "measured µs", "predicted µs", "error %"},
          {Table::Align::Left, Table::Align::Left, Table::Align::Right, Table::Align::Right,
           Table::Align::Right});
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].measured_us <= 0) continue;
    t.add_row({cases[i].group, cases[i].name, fmt::format("{:.1f}", cases[i].measured_us),
               fmt::format("{:.1f}", predicted[i]),
               fmt::format("{:+.1f}", (predicted[i] / cases[i].measured_us - 1) * 100)});
  }
  return t.render();
}

struct Score {
  size_t n = 0;
  double spearman = NAN, median_error = NAN;
};

Score score_of(const std::vector<sim::SimCase>& cases, const std::vector<double>& predicted) {
  std::vector<double> p, m;
  for (size_t i = 0; i < cases.size(); ++i)
    if (cases[i].measured_us > 0) {
      p.push_back(predicted[i]);
      m.push_back(cases[i].measured_us);
    }
  Score s;
  s.n = p.size();
  if (s.n == 0) return s;
  s.spearman = sim::spearman(p, m);
  s.median_error = sim::median_abs_relative_error(p, m);
  return s;
}

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string name; std::getline(in, name, ',');)
    if (!name.empty()) out.push_back(name);
  return out;
}

int run_sim_fit(const CalibrationOptions& opt) {
  const GpuTarget* target = resolve_target(opt.gpu);
  if (target == nullptr) return kExitBadInput;
  if (const std::string problem = overwrite_problem(opt.out, {opt.manifest, opt.constants});
      !problem.empty()) {
    std::cerr << "amk: sim-fit: refusing to write --out '" << opt.out << "': it " << problem << "\n";
    return kExitBadInput;
  }
  std::string source;
  auto start = constants_option(opt.constants, *target, &source);
  if (!start) return kExitBadInput;
  const auto cases = selected_cases(opt, *target);
  if (!cases) return kExitBadInput;
  // The device's measured read ceiling is data, not a parameter: the bench reports carry it.
  double ceiling = 0;
  try {
    ceiling = sim::measured_ceiling_gbs(opt.manifest);
  } catch (const std::exception&) {
  }
  if (ceiling > 0) start->ceiling_gbs = ceiling;
  start->target = target->name;
  sim::FitOptions fo;
  fo.free = split_names(opt.free);
  fo.max_evaluations = opt.max_evaluations;
  fo.profile_weight = opt.profile_weight;
  fo.relative_weight = opt.relative_weight;
  fo.threads = opt.threads;
  fo.starts = opt.starts;
  fo.seed = opt.seed;
  size_t profiles = 0;
  for (const auto& c : *cases) profiles += c.profiles.size();
  std::cout << fmt::format("fitting   {} cases ({} profiled) on {}, from {}; ceiling {:.0f} GB/s\n",
                           cases->size(), profiles, target->name, source, start->ceiling_gbs);
  sim::FitResult fit;
  try {
    fit = sim::fit_constants(*cases, *start, fo);
  } catch (const std::exception& e) {
    std::cerr << "amk: sim-fit: " << e.what() << "\n";
    return kExitBadInput;
  }
  const Score s = score_of(*cases, fit.predicted_us);
  std::cout << fmt::format("objective {:.5f} -> {:.5f} after {} evaluations\n", fit.start_objective,
                           fit.objective, fit.evaluations);
  if (fit.starts.size() > 1) {
    std::cout << fmt::format("starts    {} (seed {}), best: start {}\n", fit.starts.size(), opt.seed,
                             fit.best_start);
    for (size_t k = 0; k < fit.starts.size(); ++k)
      std::cout << fmt::format("  start {:<2} {:<11} objective {:.5f} -> {:.5f} after {} evaluations{}\n", k,
                               k == 0 ? "(given)" : "(perturbed)", fit.starts[k].start_objective,
                               fit.starts[k].objective, fit.starts[k].evaluations,
                               int(k) == fit.best_start ? "  <- best" : "");
  }
  std::cout << case_table(*cases, fit.predicted_us);
  std::cout << fmt::format("fit       {} timed cases: Spearman {:.3f}, median |error| {:.1f} %\n", s.n,
                           s.spearman, s.median_error * 100);
  std::cout << "constants\n";
  for (const std::string& name : sim::fitted_constant_names())
    std::cout << fmt::format("  {:<16} {:>10.4f}\n", name, *sim::constant_field(fit.constants, name));
  nlohmann::ordered_json info;
  info["manifest"] = fs::path(opt.manifest).filename().string();
  std::vector<std::string> groups;
  for (const auto& c : *cases)
    if (std::find(groups.begin(), groups.end(), c.group) == groups.end()) groups.push_back(c.group);
  info["groups"] = groups;
  info["cases"] = cases->size();
  info["profiles"] = profiles;
  info["objective"] = fit.objective;
  info["evaluations"] = fit.evaluations;
  if (fit.starts.size() > 1) {
    info["seed"] = opt.seed;
    info["best_start"] = fit.best_start;
    nlohmann::ordered_json starts = nlohmann::ordered_json::array();
    for (const sim::FitStart& st : fit.starts)
      starts.push_back({{"start_objective", st.start_objective},
                        {"objective", st.objective},
                        {"evaluations", st.evaluations}});
    info["starts"] = starts;
  }
  info["fit_spearman"] = std::isfinite(s.spearman) ? nlohmann::ordered_json(s.spearman) : nullptr;
  info["fit_median_abs_error"] = std::isfinite(s.median_error) ? nlohmann::ordered_json(s.median_error) : nullptr;
  if (!opt.out.empty()) {
    std::ofstream f(opt.out);
    f << sim::constants_to_json(fit.constants, info.dump());
    if (!f) {
      std::cerr << "amk: sim-fit: cannot write '" << opt.out << "'\n";
      return kExitFailed;
    }
    std::cout << "wrote     " << opt.out << "\n";
  }
  return kExitOk;
}

int run_sim_score(const CalibrationOptions& opt) {
  const GpuTarget* target = resolve_target(opt.gpu);
  if (target == nullptr) return kExitBadInput;
  std::string source;
  const auto constants = constants_option(opt.constants, *target, &source);
  if (!constants) return kExitBadInput;
  const auto cases = selected_cases(opt, *target);
  if (!cases) return kExitBadInput;
  std::vector<double> predicted;
  try {
    predicted = sim::predict_cases(*cases, *constants, opt.threads);
  } catch (const std::exception& e) {
    std::cerr << "amk: sim-score: " << e.what() << "\n";
    return kExitBadInput;
  }
  const Score s = score_of(*cases, predicted);
  if (s.n == 0) {
    std::cerr << "amk: sim-score: no case has a measured µs/token\n";
    return kExitBadInput;
  }
  std::cout << fmt::format("scoring   {} cases on {} with {}\n", s.n, target->name, source);
  std::cout << case_table(*cases, predicted);
  std::cout << fmt::format("score     n {}  Spearman {:.3f}  median |error| {:.1f} %\n", s.n,
                           s.spearman, s.median_error * 100);
  if (!opt.json_path.empty()) {
    nlohmann::ordered_json j;
    j["constants"] = source;
    j["n"] = s.n;
    j["spearman"] = std::isfinite(s.spearman) ? nlohmann::ordered_json(s.spearman) : nullptr;
    j["median_abs_error"] = s.median_error;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (size_t i = 0; i < cases->size(); ++i)
      if ((*cases)[i].measured_us > 0)
        rows.push_back({{"group", (*cases)[i].group}, {"case", (*cases)[i].name},
                        {"measured_us", (*cases)[i].measured_us}, {"predicted_us", predicted[i]}});
    j["cases"] = rows;
    std::ofstream f(opt.json_path);
    f << j.dump(2) << "\n";
    if (!f) {
      std::cerr << "amk: sim-score: cannot write '" << opt.json_path << "'\n";
      return kExitFailed;
    }
  }
  return kExitOk;
}

void add_calibration_options(CLI::App* cmd, CalibrationOptions& o) {
  cmd->add_option("--manifest", o.manifest,
                  "Cases, one a line: GROUP NAME MODEL CONFIG BENCH [PROFILE] (docs/SIMULATOR.md)")
      ->required();
  cmd->add_option("--gpu", o.gpu, "Built-in target the cases ran on")->capture_default_str();
  cmd->add_option("--group", o.groups, "Only the cases of this group (repeatable)");
  cmd->add_option("--exclude-group", o.exclude_groups, "Leave this group's cases out (repeatable)");
  cmd->add_option("--threads", o.threads, "Cases simulated in parallel (0: all cores)")
      ->check(CLI::Range(0, 1024));
}

}  // namespace

void add_sim_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<SimCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "sim", "Predict a decode step's time on a GPU target with the timing simulator");
  cmd->add_option("model", opt->model,
                  "A preset name (llama-3.2-1b, ...), a checkpoint folder / .gguf file, or a "
                  "program JSON")
      ->required();
  cmd->add_option("--gpu", opt->gpu, "Built-in target (h100, h200, b200, a100, rtx5090)")
      ->capture_default_str();
  cmd->add_option("--config", opt->config, "ScheduleConfig JSON (default: the derived one)");
  cmd->add_option("--max-context", opt->max_context, "KV cache length (default 512, amk bench's)")
      ->check(CLI::Range(int64_t{1}, int64_t{2147483647}));
  cmd->add_option("--position", opt->position, "The step's position (default 192, bench's mean)")
      ->check(CLI::Range(int64_t{0}, int64_t{2147483647}));
  cmd->add_option("--steps", opt->steps, "Steps simulated back to back; the last is reported")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  cmd->add_option("--tp", opt->tp,
                  "CLUSTERS,SIZE,ATTENTION: the derived config of a tensor-parallel step "
                  "(tiling.tp, docs/CLUSTER_TP.md), every level tiled for its cluster; "
                  "--write-config saves it");
  cmd->add_option("--cluster-size", opt->cluster_size,
                  "Model the hand-offs inside clusters of this many SMs as shared-memory "
                  "mailboxes would run them (docs/CLUSTER_TP.md stage 3; with a tiling.tp "
                  "config: its size)")
      ->check(CLI::Range(int64_t{0}, int64_t{16}));
  cmd->add_option("--constants", opt->constants,
                  "Simulator constants JSON (default: the target's stored fit)");
  cmd->add_option("--trace", opt->trace, "Write the simulated step as a Chrome/Perfetto trace");
  cmd->add_option("--trace-layer", opt->trace_layer, "The layer of the per-level table")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--write-config", opt->write_config,
                  "Also write the ScheduleConfig the program was lowered with (JSON)");
  cmd->add_option("--measured", opt->measured,
                  "amk bench --profile-tsv of the same program (model, config, context): also "
                  "print that run's per-level table of the layer");
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of the text");
  cmd->callback([opt, &action] { action = [opt] { return run_sim(*opt); }; });

  auto fit = std::make_shared<CalibrationOptions>();
  CLI::App* f = app.add_subcommand("sim-fit", "Fit the timing simulator's constants to GPU measurements");
  add_calibration_options(f, *fit);
  f->add_option("--start", fit->constants, "Constants JSON to start from (default: the stored fit)");
  f->add_option("--free", fit->free, "Comma-separated constants to fit (default: all)");
  f->add_option("--max-evals", fit->max_evaluations, "Objective evaluations at most, per start")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  f->add_option("--starts", fit->starts,
                "Fit from the start and N-1 random perturbations of it (each free constant x "
                "e^u, u in [-0.5, 0.5)); keep the best. --max-evals applies to each")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  f->add_option("--seed", fit->seed, "Seed of the perturbed starts (a decimal integer)")
      ->transform(CLI::Validator(
          [](std::string& text) -> std::string {
            // CLI11 reads an unsigned option with strtoull(base 0): "-1" would wrap, "010" be
            // octal, an overflow saturate. Take plain decimal digits only, in range.
            if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
              return "the seed must be a non-negative decimal integer, not '" + text + "'";
            try {
              text = std::to_string(std::stoull(text, nullptr, 10));
            } catch (const std::exception&) {
              return "the seed '" + text + "' is out of range (at most 18446744073709551615)";
            }
            return {};
          },
          ""))
      ->capture_default_str();
  f->add_option("--relative-weight", fit->relative_weight,
                "Weight of the knob-effect term (each case's log error less its model's mean)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  f->add_option("--profile-weight", fit->profile_weight,
                "Weight of the profiles' per-stage terms against the µs/token terms")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  f->add_option("--out", fit->out, "Write the fitted constants here (JSON)");
  f->callback([fit, &action] { action = [fit] { return run_sim_fit(*fit); }; });

  auto score = std::make_shared<CalibrationOptions>();
  CLI::App* s = app.add_subcommand(
      "sim-score", "Score simulator constants on measured cases: Spearman and median |error|");
  add_calibration_options(s, *score);
  s->add_option("--constants", score->constants, "Constants JSON (default: the stored fit)");
  s->add_option("--json", score->json_path, "Also write the scores and predictions here");
  s->callback([score, &action] { action = [score] { return run_sim_score(*score); }; });
}

}  // namespace amk::cli
