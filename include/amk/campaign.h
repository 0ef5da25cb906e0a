// The Loop-2 drivers (PROGRAM.md §3, §8B): `amk loop` (a systematic one-knob sweep in §5B tier
// order) and `amk autoresearch` (epsilon-greedy over mutations, fresh random points and the
// prior's ranking, warm-started from the corpus unless --cold). Both run one experiment at a
// time: propose -> evaluate in the worker (validate() first, correctness before latency) ->
// keep/revert (amk/keep_revert.h) -> a results.tsv row -> corpus.jsonl on keep -> state.json.
// The same command on the same workdir resumes; experiment ids continue.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "amk/campaign_state.h"
#include "amk/evaluate.h"

namespace amk::search {

enum class Strategy { Autoresearch, Sweep };

struct CampaignOptions {
  std::filesystem::path workdir;
  std::string model_path, model_name, gpu;
  std::string weights;  // "", "bf16", "fp32"
  eval::EvalOptions eval;
  Strategy strategy = Strategy::Autoresearch;
  // The campaign's totals (over every resume): stop when experiment ids reach `iters` or the
  // campaign's elapsed time reaches `minutes`. At least one must be set.
  std::optional<int64_t> iters;
  std::optional<double> minutes;
  bool cold = false;
  uint64_t seed = 0;
  std::vector<std::filesystem::path> prior_corpora;  // read besides DIR/corpus.jsonl
  double epsilon = 0.3;          // exploration share (doubled on a plateau)
  double watchdog_s = 600;       // per evaluation, in the worker
  std::string worker_exe;        // the amk binary that runs `eval-worker`
  std::string tag;               // "" : <model>-<gpu>-<device>
  // cuda: proposals the simulator predicts this much slower than the incumbent are not measured.
  double screen_margin = 0.05;
};

struct CampaignSummary {
  int64_t experiments_run = 0;  // in this invocation
  int64_t last_experiment = 0;
  CampaignState state;
  std::filesystem::path results, corpus, state_file;
};

inline constexpr const char* kResultsFile = "results.tsv";
inline constexpr const char* kCorpusFile = "corpus.jsonl";
inline constexpr const char* kStateFile = "state.json";
inline constexpr const char* kWorkerLog = "worker.log";
inline constexpr const char* kScreenedFile = "screened.jsonl";
// Every evaluated experiment's config with its verdict, one JSON object a line (experiment,
// schedule_id, correctness, latency_us and latency_kind when measured, config): results.tsv names
// a config only by its id and the change from the incumbent, and the flywheel (the simulator's
// fit and score, docs/SIMULATOR.md) needs the configs themselves.
inline constexpr const char* kExperimentsFile = "experiments.jsonl";

// One line per experiment goes to `log`. Throws std::runtime_error (a workdir holding another
// campaign, an unreadable state) or eval::EvalSetupError (the model or the GPU cannot be used).
CampaignSummary run_campaign(const CampaignOptions& options, std::ostream& log);

}  // namespace amk::search
