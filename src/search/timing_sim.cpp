// Placeholder timing model: tasks run per SM in list order, each starting when its SM is free and
// its waits are met, taking task_fixed_us + est_bytes at the smaller of the SM's rate and an even
// share of the ceiling. The calibrated discrete-event model replaces it (issue 13, point 3).
#include "amk/timing_sim.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace amk::sim {

SimConstants constants_for(const GpuTarget& target) {
  SimConstants c;
  c.target = target.name;
  c.ceiling_gbs = target.measured_bw_gbs > 0 ? target.measured_bw_gbs : target.hbm_bandwidth_gbs;
  return c;
}

SimResult simulate_step(const Program& program, const GpuTarget& target, const SimConstants& c) {
  const double ceiling = c.ceiling_gbs > 0 ? c.ceiling_gbs : target.hbm_bandwidth_gbs;
  const int64_t sms = std::max<int64_t>(target.num_sms, 1);
  const double rate_gbs = std::min(c.per_sm_gbs, ceiling / double(sms));  // bytes per ns
  std::map<int64_t, double> sm_free;  // sm -> ns
  // counter id -> the time each value above its init was reached (a task adds 1 when it ends)
  std::map<int64_t, std::vector<double>> counter_times;
  std::map<int64_t, int64_t> init;
  for (const Counter& k : program.counters) init[k.id] = k.init;
  SimResult r;
  r.stamps.resize(program.tasks.size());
  // List order is a valid execution order per SM (the validator proves no deadlock); a task's
  // waits name counters signalled by tasks earlier in some SM's order, so a few sweeps settle it.
  std::vector<bool> done(program.tasks.size(), false);
  size_t remaining = program.tasks.size();
  for (size_t sweep = 0; remaining > 0; ++sweep) {
    if (sweep > program.tasks.size() + 1)
      throw std::invalid_argument("simulate_step: the waits cannot all be met");
    std::map<int64_t, bool> sm_blocked;
    for (size_t i = 0; i < program.tasks.size(); ++i) {
      if (done[i]) continue;
      const Task& t = program.tasks[i];
      if (!t.sm) throw std::invalid_argument("simulate_step: task without an SM: " + t.label);
      if (sm_blocked[*t.sm]) continue;
      double ready = sm_free[*t.sm];
      bool met = true;
      for (const auto& w : t.waits) {
        const auto& times = counter_times[w.counter];
        const int64_t need = w.threshold - init[w.counter];
        if (int64_t(times.size()) < need) { met = false; break; }
        if (need > 0) ready = std::max(ready, times[size_t(need - 1)] + c.hop_us * 1e3);
      }
      if (!met) { sm_blocked[*t.sm] = true; continue; }
      const double begin = ready;
      const double end = begin + c.task_fixed_us * 1e3 + double(t.est_bytes) / rate_gbs;
      r.stamps[i] = {uint64_t(sm_free[*t.sm]) + 1, uint64_t(begin) + 1, uint64_t(end) + 1};
      sm_free[*t.sm] = end;
      auto& times = counter_times[t.out_counter];
      times.insert(std::upper_bound(times.begin(), times.end(), end), end);
      done[i] = true;
      --remaining;
    }
  }
  uint64_t last = 0;
  for (const auto& s : r.stamps) last = std::max(last, s.op_end);
  r.step_us = double(last) / 1e3;
  return r;
}

}  // namespace amk::sim
