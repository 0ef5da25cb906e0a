// `amk propose MODEL --gpu G [--workdir DIR] [--json]`: the incumbent ScheduleConfig (a
// campaign's, or the one derived from the model and the target) and the search space it lives
// in (amk/knob_space.h): every knob's type, range, default rule, current value and meaning.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "amk/campaign.h"
#include "amk/campaign_state.h"
#include "amk/json.h"
#include "amk/knob_space.h"
#include "amk/lowering.h"
#include "amk/schedule_config_io.h"
#include "amk/schedule_proposer.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "cli/search_args.h"
#include "cli/table.h"

namespace amk::cli {

namespace {

struct ProposeArgs {
  std::string model, gpu = "h100", workdir;
  int64_t context = 512;
  bool json = false;
};

std::string_view kind_name(KnobKind k) {
  switch (k) {
    case KnobKind::Integer: return "integer";
    case KnobKind::Choice: return "choice";
    case KnobKind::GroupSet: return "group set";
    case KnobKind::Tile: return "tile";
  }
  return "";
}

std::string value_of(const ScheduleConfig& c, const KnobSpec& k) {
  if (k.kind == KnobKind::GroupSet) {
    std::string s;
    for (const auto& g : c.fusion_grouping) s += (s.empty() ? "" : ", ") + spell_group(g);
    return s.empty() ? "none" : s;
  }
  if (k.kind == KnobKind::Choice) return search::knob_value_text(c, k.name);
  const auto v = integer_knob(c, k.name);
  return v ? std::to_string(*v) : "absent";
}

int run_propose(const ProposeArgs& a) {
  const GpuTarget* target = resolve_target(a.gpu);
  if (target == nullptr) return kExitBadInput;
  if (a.context < 1) {
    std::cerr << "amk: propose: --context must be >= 1\n";
    return kExitBadInput;
  }
  auto checkpoint = open_checkpoint(a.model);
  if (!checkpoint) return kExitBadInput;
  ScheduleConfig incumbent = default_schedule_config(checkpoint->config(), *target, a.context);
  std::string source = "derived from the model and the target (default_schedule_config)";
  if (!a.workdir.empty()) {
    try {
      const auto state = search::load_campaign_state(std::filesystem::path(a.workdir) / search::kStateFile);
      if (!state) {
        std::cerr << "amk: propose: '" << a.workdir << "' holds no campaign\n";
        return kExitBadInput;
      }
      ConfigParse p = parse_schedule_config(state->incumbent_config_json);
      if (!p.config) throw std::runtime_error(p.error);
      incumbent = *p.config;
      source = fmt::format("the incumbent of campaign {} (experiment {})", state->tag,
                           state->incumbent_experiment);
    } catch (const std::exception& e) {
      std::cerr << "amk: propose: " << e.what() << "\n";
      return kExitBadInput;
    }
  }
  if (a.json) {
    nlohmann::ordered_json j;
    j["model"] = model_name_of(a.model);
    j["gpu"] = target->name;
    j["incumbent_source"] = source;
    j["schedule_id"] = schedule_id(incumbent);
    j["incumbent"] = nlohmann::ordered_json::parse(config_to_json(incumbent));
    nlohmann::ordered_json space = nlohmann::ordered_json::array();
    for (const KnobSpec& k : schedule_knob_space()) {
      nlohmann::ordered_json e;
      e["name"] = k.name;
      e["kind"] = kind_name(k.kind);
      e["lands_in"] = k.effect == KnobEffect::Tasks ? "tasks" : "launch";
      e["tier"] = k.tier;
      e["range"] = k.range;
      e["default"] = k.default_rule;
      e["value"] = value_of(incumbent, k);
      e["meaning"] = k.meaning;
      if (!k.choices.empty()) e["choices"] = k.choices;
      if (!k.search_values.empty()) e["search_values"] = k.search_values;
      space.push_back(e);
    }
    j["space"] = space;
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << "incumbent (" << source << "), " << schedule_id(incumbent) << "\n"
            << config_to_json(incumbent) << "\n\nthe search space (PROGRAM.md §5B tiers)\n";
  Table t({"tier", "knob", "kind", "value", "range", "default"},
          {Table::Align::Right, Table::Align::Left, Table::Align::Left, Table::Align::Left,
           Table::Align::Left, Table::Align::Left});
  for (const KnobSpec& k : schedule_knob_space())
    t.add_row({std::to_string(k.tier), k.name, std::string(kind_name(k.kind)), value_of(incumbent, k),
               k.range, k.default_rule});
  std::cout << t.render() << "\n";
  for (const KnobSpec& k : schedule_knob_space()) std::cout << k.name << ": " << k.meaning << "\n";
  return kExitOk;
}

}  // namespace

void add_propose_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<ProposeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "propose", "Print the incumbent ScheduleConfig and the knob space the search moves in");
  cmd->add_option("model", a->model, "Checkpoint folder or .gguf file")->required();
  cmd->add_option("--gpu", a->gpu, "Built-in target")->capture_default_str();
  cmd->add_option("--context", a->context, "KV cache length the default is derived for")
      ->capture_default_str();
  cmd->add_option("--workdir", a->workdir, "A campaign whose incumbent to print");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a, &action] { action = [a] { return run_propose(*a); }; });
}

}  // namespace amk::cli
