// `amk eval MODEL --gpu G [--config cfg.json] --device cpu|sim|cuda [--json]`: one verdict of
// one ScheduleConfig (amk/evaluate.h): validate() first, correctness against the reference, and a
// latency (predicted on sim, measured on cuda) only beside a PASS.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "amk/evaluate.h"
#include "amk/json.h"
#include "amk/lowering.h"
#include "amk/timing_sim.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "cli/search_args.h"

namespace amk::cli {

namespace {

struct EvalArgs {
  SearchArgs search;
  std::string config;
};

int run_eval(const EvalArgs& a) {
  const auto options = eval_options(a.search, {"cpu", "sim", "cuda"});
  if (!options) return kExitBadInput;
  auto config = load_schedule_config(a.config);
  if (!config) return kExitBadInput;
  auto checkpoint = open_checkpoint(a.search.model);
  if (!checkpoint) return kExitBadInput;
  const GpuTarget& target = *find_target(a.search.gpu);
  const ScheduleConfig schedule =
      a.config.empty() ? default_schedule_config(checkpoint->config(), target, options->max_context)
                       : *config;
  std::unique_ptr<eval::Evaluator> evaluator;
  try {
    evaluator = std::make_unique<eval::Evaluator>(std::move(*checkpoint),
                                                  model_name_of(a.search.model), target, *options);
  } catch (const std::exception& e) {
    std::cerr << "amk: eval: " << e.what() << "\n";
    return kExitBadInput;
  }
  const eval::Verdict v = evaluator->evaluate(schedule);
  if (a.search.json) {
    nlohmann::ordered_json j;
    j["model"] = evaluator->model_name();
    j["gpu"] = target.name;
    j["device"] = a.search.device;
    j["config_source"] = a.config.empty() ? "default" : a.config;
    j["verdict"] = nlohmann::ordered_json::parse(eval::verdict_to_json(v));
    j["config"] = nlohmann::ordered_json::parse(config_to_json(schedule));
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << fmt::format("model        {} ({} layers) on {}, --device {}\n",
                             evaluator->model_name(), evaluator->model().num_hidden_layers,
                             target.name, a.search.device);
    std::cout << fmt::format("schedule     {} ({})\n", v.schedule_id,
                             a.config.empty() ? "derived from the model and the target" : a.config);
    std::cout << fmt::format("correctness  {}\n", eval::name_of(v.correctness));
    if (v.has_latency()) {
      std::cout << fmt::format("latency      {:.2f} us [{}]\n", *v.latency_us,
                               eval::name_of(v.latency_kind));
      std::cout << fmt::format("roofline     {:.2f} us: {:.1f}% of roofline\n", v.roofline_us,
                               v.pct_of_roofline.value_or(0));
      if (v.pct_of_measured_floor)
        std::cout << fmt::format("floor        {:.1f}% of the measured floor\n",
                                 *v.pct_of_measured_floor);
      if (v.shares.known)
        std::cout << fmt::format("critical     attention {:.0f}%  mlp {:.0f}%  lm_head {:.0f}%  "
                                 "other {:.0f}%\n",
                                 100 * v.shares.attention, 100 * v.shares.mlp,
                                 100 * v.shares.lm_head, 100 * v.shares.other);
    } else {
      std::cout << "latency      - (none without a PASS" << (v.pass() ? " on --device cpu" : "")
                << ")\n";
    }
    std::cout << "details      " << v.details << "\n";
    // The per-level table of the middle layer, from the simulated or profiled stamps.
    if (v.has_latency() && evaluator->last_program() && !evaluator->last_stamps().empty()) {
      const double ceiling = a.search.device == "sim"
                                 ? sim::constants_for(target).ceiling_gbs
                                 : evaluator->ceiling_gbs();
      try {
        std::cout << "\n" << eval::format_layer_table(eval::layer_table(
                                 *evaluator->last_program(), evaluator->last_stamps(), ceiling));
      } catch (const std::exception& e) {
        std::cout << "\n(no per-level table: " << e.what() << ")\n";
      }
    }
  }
  return v.pass() ? kExitOk : kExitFailed;
}

}  // namespace

void add_eval_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "One verdict of a ScheduleConfig: validate(), correctness, then latency");
  add_search_options(cmd, a->search, "cpu|sim|cuda");
  cmd->add_option("--config", a->config,
                  "ScheduleConfig JSON file (default: derived from the model and the target)");
  cmd->callback([a, &action] { action = [a] { return run_eval(*a); }; });
}

}  // namespace amk::cli
