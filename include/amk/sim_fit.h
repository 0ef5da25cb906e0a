// Calibrating the timing simulator against the GPU (docs/SIMULATOR.md): cases of a lowered
// program with its measured µs/token and, optionally, one profiled step's per-task stamps; a fit
// of the constants that minimises the log error of the predictions; and the held-out score
// (Spearman's rank correlation and the median |relative error|) of a set of constants.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "amk/ir.h"
#include "amk/step_trace.h"
#include "amk/timing_sim.h"

namespace amk::sim {

// One measured step of one profiled launch (amk bench --profile --profile-tsv): the stamps of
// every task, list order, op_end == 0 for a task the profile does not have; body stamps 0 where
// the op marks none.
struct MeasuredProfile {
  std::vector<eval::TaskStamps> stamps;  // with the body stamps where the TSV has them
  int64_t position = 0;  // the step's position (the keys its attention read)
};

struct SimCase {
  std::string name;   // shown in tables ("llama-3.2-1b n_tile64")
  std::string group;  // the model: held-out scoring leaves whole groups out
  Program program;
  GpuTarget target;
  int64_t position = -1;       // of the timed steps (the bench's mean position); -1: default
  double measured_us = 0;      // µs/token; 0: none (a profile-only case)
  std::vector<MeasuredProfile> profiles;
};

// The stamps of `profile_tsv_text` (what amk bench --profile-tsv writes) against `program`,
// whose tasks they must be: every row's task id and label must be the program's (else the
// profile belongs to another program, and the message says which row differs). Throws
// std::invalid_argument naming `source`.
MeasuredProfile read_profile_tsv(const std::string& profile_tsv_text, const Program& program,
                                 const std::string& source);

// Per-stage medians of one step's stamps, the quantities the fit compares: per stage (the task
// label's stage, over all layers), the median op time (op begin to op end) and, where the body is
// stamped, the median body time; and the step's span (first wait begin to last op end).
struct StageSummary {
  std::string stage;
  int64_t tasks = 0;
  double op_us = 0, body_us = 0;  // body_us < 0: no body stamps
};
struct StepSummary {
  std::vector<StageSummary> stages;  // list order of first appearance
  double span_us = 0;
};
StepSummary summarize_step(const Program& program, const std::vector<eval::TaskStamps>& stamps);

struct FitOptions {
  std::vector<std::string> free;   // constants to fit (default: every fitted constant)
  int max_evaluations = 800;       // of the objective (each simulates every case)
  double profile_weight = 0.5;     // weight of the profile terms against the µs/token terms
  // Weight of the knob-effect term: each timed case's log error less its group's mean log
  // error, squared. A search ranks configs of one model, so what a constant must get right is
  // how much each knob moves that model's step, more than the step's level.
  double relative_weight = 0.0;
  int threads = 0;                 // cases simulated in parallel (0: the hardware's)
  double tolerance = 1e-5;         // stop when the simplex's objective spread is below this
  // Multi-start: the simplex ends in whichever local minimum its start leads to (bench/
  // RESULTS.md, twenty-third session: the start moved a held-out fold's score as much as model
  // changes did). With starts > 1 the whole optimisation also runs from starts - 1 further
  // points, each the given start with every free constant multiplied by exp(u), u uniform in
  // [-0.5, 0.5), drawn from `seed`; the lowest objective wins (the earliest start on a tie).
  // max_evaluations applies to each start. Start 0 is the given start, run exactly as with
  // starts == 1. The same cases, start, options and seed give the same result bit for bit,
  // whatever `threads` is.
  int starts = 1;
  uint64_t seed = 1;               // of the perturbed starts (unused when starts == 1)
};

// One start of a multi-start fit.
struct FitStart {
  double start_objective = 0;  // at this start point
  double objective = 0;        // at the end of its optimisation
  int evaluations = 0;         // its own (start 0's include the probes of which constants move)
};

struct FitResult {
  SimConstants constants;
  double objective = 0;        // at the fit: mean squared log error (+ weighted profile terms)
  double start_objective = 0;  // at the start (the given one: starts[0].start_objective)
  int evaluations = 0;         // over every start
  std::vector<double> predicted_us;  // per case (0 for a profile-only case)
  std::vector<FitStart> starts;      // one per start run, [0] the given start
  int best_start = 0;                // the index in `starts` of the one returned
};

// Nelder-Mead on the logarithms of the free constants (so they stay positive and a factor is a
// step), minimising mean over cases with a µs/token of e_i^2 with e_i = log(pred / measured),
// plus relative_weight x the mean over those cases of (e_i - mean of e over the case's group)^2
// (groups of at least 2 timed cases), plus profile_weight x the mean over profiled stages of
// the same log error for their median op and body times and the step span. With
// options.free empty, the constants fitted are those whose change moves the objective at the
// given start (the same set for every start of a multi-start fit). Throws
// std::invalid_argument when no case has anything to fit against, a free name is not a fitted
// constant or options.starts < 1.
FitResult fit_constants(const std::vector<SimCase>& cases, const SimConstants& start,
                        const FitOptions& options = {});

// The simulator's µs/token for each case (in parallel).
std::vector<double> predict_cases(const std::vector<SimCase>& cases, const SimConstants& c,
                                  int threads = 0);

// Spearman's rank correlation of two equally long series (ties get their average rank; the
// Pearson correlation of the ranks). NaN for fewer than 2 values or a constant series.
double spearman(const std::vector<double>& a, const std::vector<double>& b);
// The median over i of |predicted_i / measured_i - 1|. NaN when empty.
double median_abs_relative_error(const std::vector<double>& predicted,
                                 const std::vector<double>& measured);

}  // namespace amk::sim
