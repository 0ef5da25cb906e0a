#include "cli/campaign_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "amk/campaign_report.h"
#include "cli/commands.h"

namespace amk::cli {

void add_campaign_options(CLI::App* cmd, CampaignArgs& a, bool autoresearch) {
  add_search_options(cmd, a.search, "sim|cuda");
  cmd->add_option("--workdir", a.workdir,
                  "Campaign folder: results.tsv, corpus.jsonl, state.json, worker.log (default: "
                  "campaigns/<model>-<gpu>-<device>); the same command on it resumes");
  cmd->add_option("--tag", a.tag, "Campaign tag of the results rows (default: model-gpu-device)");
  cmd->add_option("--watchdog", a.watchdog_s,
                  "Seconds an evaluation may take before its worker is killed (TIMEOUT)")
      ->capture_default_str();
  if (autoresearch) {
    cmd->add_option("--iters", a.iters, "Stop when the campaign has this many experiments");
    cmd->add_option("--minutes", a.minutes, "Stop when the campaign has run this long (in all)");
    cmd->add_flag("--cold", a.cold, "Ignore the corpus prior (pure exploration)");
    cmd->add_option("--seed", a.seed, "Seed of the proposals")->capture_default_str();
    cmd->add_option("--prior-corpus", a.prior_corpora,
                    "Another campaign's corpus.jsonl for the prior (repeatable; DIR/corpus.jsonl "
                    "is always read)");
    cmd->add_option("--epsilon", a.epsilon, "Share of exploratory proposals")->capture_default_str();
  } else {
    cmd->add_option("--budget", a.iters, "Stop when the campaign has this many experiments")
        ->required();
  }
}

int run_campaign_command(const CampaignArgs& a, search::Strategy strategy) {
  const auto options = eval_options(a.search, {"sim", "cuda"});
  if (!options) return kExitBadInput;
  const bool autoresearch = strategy == search::Strategy::Autoresearch;
  if (autoresearch && (a.iters > 0) == (a.minutes > 0)) {
    std::cerr << "amk: autoresearch: give --iters N or --minutes M (exactly one)\n";
    return kExitBadInput;
  }
  if (a.iters < 0 || a.minutes < 0 || (!autoresearch && a.iters < 1) || !(a.watchdog_s > 0) ||
      a.epsilon < 0 || a.epsilon > 1) {
    std::cerr << "amk: --iters/--budget must be >= 1, --minutes > 0, --watchdog > 0, --epsilon "
                 "in [0, 1]\n";
    return kExitBadInput;
  }
  search::CampaignOptions o;
  o.model_path = a.search.model;
  o.model_name = model_name_of(a.search.model);
  o.gpu = a.search.gpu;
  o.weights = a.search.weights;
  o.eval = *options;
  o.strategy = strategy;
  if (a.iters > 0) o.iters = a.iters;
  if (a.minutes > 0) o.minutes = a.minutes;
  o.cold = a.cold;
  o.seed = a.seed;
  for (const auto& p : a.prior_corpora) o.prior_corpora.emplace_back(p);
  o.epsilon = a.epsilon;
  o.watchdog_s = a.watchdog_s;
  o.worker_exe = self_executable();
  o.tag = a.tag;
  o.workdir = !a.workdir.empty()
                  ? std::filesystem::path(a.workdir)
                  : std::filesystem::path("campaigns") /
                        fmt::format("{}{}-{}-{}", autoresearch ? "" : "loop-", o.model_name,
                                    a.search.gpu, a.search.device);
  // The GPU check's reference logits outlive each worker and machine start beside the results
  // (a 1B's four positions take ~1 minute on the CPU, an 8B's ~8).
  if (o.eval.device == eval::EvalDevice::Cuda)
    o.eval.reference_cache_dir = std::filesystem::absolute(o.workdir / "references").string();
  search::CampaignSummary summary;
  try {
    // Progress goes to stderr with --json, so stdout holds the one JSON object.
    summary = search::run_campaign(o, a.search.json ? std::cerr : std::cout);
  } catch (const eval::EvalSetupError& e) {
    std::cerr << "amk: " << (autoresearch ? "autoresearch" : "loop") << ": " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::invalid_argument& e) {
    std::cerr << "amk: " << (autoresearch ? "autoresearch" : "loop") << ": " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "amk: " << (autoresearch ? "autoresearch" : "loop") << ": " << e.what() << "\n";
    return kExitFailed;
  }
  const search::CampaignStatus status = search::campaign_status(o.workdir);
  const search::NextAdvice next = search::campaign_next(status);
  if (a.search.json) {
    std::cout << search::report_json(status, next) << "\n";
  } else {
    std::cout << "\n" << search::status_text(status);
    std::cout << fmt::format("next         {}: {}\n", next.stop ? "STOP" : "CONTINUE",
                             next.reasons.empty() ? "" : next.reasons.front());
    std::cout << fmt::format("files        {}, {}, {}\n", summary.results.string(),
                             summary.corpus.string(), summary.state_file.string());
  }
  return kExitOk;
}

}  // namespace amk::cli
