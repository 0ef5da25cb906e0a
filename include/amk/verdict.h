// The one answer of an evaluation (issue 13): a correctness word, and a latency only beside a
// PASS (PROGRAM.md §3, §7). `amk bench`, `amk eval`, `amk loop` and `amk autoresearch` all produce
// and consume this record; its JSON is what the evaluation worker sends back over its pipe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace amk::eval {

// PROGRAM.md §6's five words.
enum class Correctness { PASS, FAIL, REJECTED, TIMEOUT, CRASH };
std::string_view name_of(Correctness c);
// Throws std::invalid_argument for anything but the five words.
Correctness correctness_from_name(std::string_view name);

// Where a latency came from: timed on the GPU, or predicted by the timing simulator. None: no
// latency (anything but PASS, or `--device cpu`, which checks correctness only).
enum class LatencyKind { None, MeasuredGpu, Predicted };
std::string_view name_of(LatencyKind k);  // "none", "measured-gpu", "predicted"
LatencyKind latency_kind_from_name(std::string_view name);

// Shares of the step's critical path (amk/critical_path.h); they sum to 1 when known.
struct RegionShares {
  double attention = 0, mlp = 0, lm_head = 0, other = 0;
  bool known = false;
};

// What the simplicity tie-break of PROGRAM.md §3 compares: fewer tasks and pages, less scratch,
// a lower pipelining_depth, fewer fusion groups.
struct Simplicity {
  int64_t tasks = 0, pages = 0, scratch_bytes = 0, pipelining_depth = 0, fusion_groups = 0;
};

struct Verdict {
  Correctness correctness = Correctness::CRASH;
  LatencyKind latency_kind = LatencyKind::None;
  std::optional<double> latency_us;       // only with PASS
  std::optional<double> pct_of_roofline;  // §6: spec-sheet floor of all weight bytes / latency
  std::optional<double> pct_of_measured_floor;  // the GPU's measured read ceiling, GPU only
  double roofline_us = 0;                 // target.bandwidth_bound_us(total weight bytes)
  std::string schedule_id;                // schedule_id(config)
  std::string details;                    // one line: why, or how it was checked and timed
  double check_error = -1;                // worst relative logit error of the check (-1: none)
  bool check_reduced_depth = false;       // the check ran on a reduced-depth twin
  int64_t check_layers = 0;               // layers of the checked program
  RegionShares shares;
  Simplicity simplicity;
  double eval_seconds = 0;

  bool pass() const { return correctness == Correctness::PASS; }
  // A verdict that carries a latency: PASS and a latency. Enforces §7 for every reader.
  bool has_latency() const { return pass() && latency_us.has_value(); }
};

// A verdict without a latency: REJECTED, TIMEOUT, CRASH or FAIL with its reason.
Verdict failed_verdict(Correctness c, std::string schedule_id, std::string details);

// JSON text (one line) and back; from_json throws std::invalid_argument on a malformed record,
// and drops a latency that is not beside a PASS.
std::string verdict_to_json(const Verdict& v);
Verdict verdict_from_json(std::string_view text);

}  // namespace amk::eval
