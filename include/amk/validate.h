// validate(): the static proof that a Program is deadlock- and race-free (IR_SPEC §3).
// It never throws and never recurses, whatever the input; a REJECTED result must prevent launch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "amk/ir.h"

namespace amk {

struct ValidationStats {
  int64_t tasks = 0;
  int64_t buffers = 0;
  int64_t counters = 0;
  int64_t edges = 0;          // producer->consumer task pairs (counted, never materialised)
  bool acyclic = false;
  double weight_mb = 0.0;     // total WEIGHT bytes / 1e6
  bool sm_assigned = false;
  int64_t hb_queries = 0;     // happens-before queries the race check answered
};

struct ValidationResult {
  bool ok = false;
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
  ValidationStats stats;
  // "[VALID] ..." or "[REJECTED] ...", then one line per error ("ERROR: ...") and warning
  // ("warning: ..."), at most kReportLines of each and a line counting the rest.
  static constexpr size_t kReportLines = 50;
  std::string report() const;
  explicit operator bool() const { return ok; }
};

ValidationResult validate(const Program& program);

// ---- backstops (IR_SPEC §3.4) ----
struct CounterSimulation {
  std::vector<int64_t> order;  // task ids in firing order
  std::vector<int64_t> stuck;  // tasks that can never fire (non-empty iff a wait is unsatisfiable)
};
// Static reachability: fire every ready task (event-driven, in readiness order) and report the
// tasks that can never fire.
CounterSimulation simulate_counters(const Program& program);
// Fire ready tasks in `seeds` randomised interleavings; report every read of a transient buffer
// (ACTIVATION / IO_OUTPUT / KV_CACHE written this pass) before a task that writes it has fired.
std::vector<std::string> simulate_adversarial(const Program& program, int seeds = 16);

}  // namespace amk
