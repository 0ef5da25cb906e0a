// The timing mode of AMK's two-mode emulator (issue 13; the data mode is the reference VM): a
// prediction of one decode step's per-task stamps on a GpuTarget, from the lowered program alone.
// Its output has the GPU profile's shape (one eval::TaskStamps per task), so the same per-level
// table (eval::layer_table) prints for a simulated step and a measured one, side by side.
#pragma once

#include <string>
#include <vector>

#include "amk/ir.h"
#include "amk/step_trace.h"

namespace amk::sim {

// Constants of the timing model, fitted per GpuTarget from GPU profiles (amk bench --profile-tsv)
// and stored as data next to the target. Field meanings are documented where they are used.
struct SimConstants {
  std::string target;            // the GpuTarget name these were fitted on
  double ceiling_gbs = 0;        // aggregate HBM read ceiling (0: the target's measured/spec bw)
  double per_sm_gbs = 26.0;      // one SM's streaming rate when it has HBM to itself
  double task_fixed_us = 2.0;    // per-task prologue + epilogue
  double hop_us = 1.0;           // a counter's signal seen by a waiter (idle L2 round trip)
};

// The constants for `target`: the stored fit when there is one, else defaults scaled to it.
SimConstants constants_for(const GpuTarget& target);

struct SimResult {
  std::vector<eval::TaskStamps> stamps;  // one per task, list order, ns from the step's start
  double step_us = 0;                    // predicted step latency
};

// The discrete-event prediction of one step of `program` (which must have every task's sm set,
// as the lowering leaves it). Throws std::invalid_argument on a program it cannot simulate.
SimResult simulate_step(const Program& program, const GpuTarget& target, const SimConstants& c);

}  // namespace amk::sim
