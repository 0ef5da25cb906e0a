#include "schedule/sm_assignment.h"

#include <fmt/format.h>

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "amk/lowering.h"

namespace amk::schedule {

namespace {

// Least-loaded SM first; ties to the lowest index, so the result is deterministic.
class LoadBalancer {
 public:
  explicit LoadBalancer(int64_t num_sms) {
    for (int64_t sm = 0; sm < num_sms; ++sm) heap_.emplace(0, sm);
    load_.assign(size_t(num_sms), 0);
  }
  void add(int64_t sm, int64_t bytes) {
    load_[size_t(sm)] += bytes;
    stale_ = true;
  }
  int64_t take(int64_t bytes) {
    if (stale_) rebuild();
    auto [load, sm] = heap_.top();
    heap_.pop();
    load_[size_t(sm)] = load + bytes;
    heap_.emplace(load + bytes, sm);
    return sm;
  }

 private:
  using Entry = std::pair<int64_t, int64_t>;  // (load, sm)
  void rebuild() {
    heap_ = {};
    for (size_t sm = 0; sm < load_.size(); ++sm) heap_.emplace(load_[sm], int64_t(sm));
    stale_ = false;
  }
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap_;
  std::vector<int64_t> load_;
  bool stale_ = false;
};

int64_t cost(const Task& t) { return std::max<int64_t>(t.est_bytes, 1); }

// The megakernel's measured per-task cost on an H100 beyond streaming its bytes: staging the
// task, waiting on its counters and signalling its own. It is what keeps a byte-free task (a
// NOP, a counter-only join) from looking free to the critical_path model.
constexpr double kFixedOverheadUs = 2.0;

// Per-SM bytes/µs when the target's bandwidth is unknown: an arbitrary but positive rate, so the
// model still orders tasks by their bytes.
constexpr double kFallbackBytesPerUsPerSm = 1e3;

// One counter's signallers as the critical_path model knows them: their finish times in the
// order they were placed, sorted on demand (a wait usually follows all of its signallers, so the
// sort runs about once per counter).
struct CounterTimes {
  int64_t init = 0;
  std::vector<double> finish;
  bool sorted = true;

  void add(double t) {
    if (!finish.empty() && t < finish.back()) sorted = false;
    finish.push_back(t);
  }
  // When the counter reaches `threshold`: the (threshold - init)-th smallest signaller finish.
  double reaches(int64_t threshold) {
    const int64_t need = threshold - init;
    if (need <= 0) return 0.0;
    if (!sorted) {
      std::sort(finish.begin(), finish.end());
      sorted = true;
    }
    // Too few signallers cannot happen in a valid program (validate() reports it); the model
    // only needs a finite answer, so it takes the last one it knows.
    if (need > int64_t(finish.size())) return finish.empty() ? 0.0 : finish.back();
    return finish[size_t(need - 1)];
  }
};

// "critical_path": a list scheduler over a bandwidth model of the megakernel. Each task, in list
// order, goes to the SM where it would finish earliest: a task starts once its waits are met and
// its SM has finished the task before it in the SM's queue (queues run in list order), and takes
// kFixedOverheadUs plus its bytes at the SM's share of the HBM bandwidth. Unlike load_balance,
// which only evens out bytes, this sees that two tasks ready at the same time on one SM run one
// after the other.
void assign_critical_path(Program& p, const GpuTarget& target) {
  const int64_t n = target.num_sms;
  const double bw_gbs =
      target.measured_bw_gbs > 0 ? target.measured_bw_gbs : target.hbm_bandwidth_gbs;
  // GB/s -> bytes/µs is * 1e3; every SM streams its own share.
  const double bytes_per_us = bw_gbs > 0 ? bw_gbs * 1e3 / double(n) : kFallbackBytesPerUsPerSm;

  std::unordered_map<int64_t, CounterTimes> counters;
  for (const Counter& c : p.counters) counters.try_emplace(c.id).first->second.init = c.init;
  std::vector<double> sm_free(size_t(n), 0.0);

  for (Task& t : p.tasks) {
    double ready = 0.0;
    for (const Wait& w : t.waits)
      ready = std::max(ready, counters[w.counter].reaches(w.threshold));  // absent: init 0
    // A negative est_bytes (only a hand-written program has one) counts as no bytes.
    const double duration =
        kFixedOverheadUs + double(std::max<int64_t>(t.est_bytes, 0)) / bytes_per_us;
    // Smallest finish; ties to the SM free soonest, then the lowest index (deterministic).
    size_t best = 0;
    double best_finish = std::max(ready, sm_free[0]) + duration;
    for (size_t sm = 1; sm < sm_free.size(); ++sm) {
      const double finish = std::max(ready, sm_free[sm]) + duration;
      if (finish < best_finish || (finish == best_finish && sm_free[sm] < sm_free[best])) {
        best = sm;
        best_finish = finish;
      }
    }
    t.sm = int64_t(best);
    sm_free[best] = best_finish;
    counters[t.out_counter].add(best_finish);
  }
}

}  // namespace

void assign_sms(Program& p, const ScheduleConfig& config, const GpuTarget& target) {
  const int64_t n = target.num_sms;
  if (n < 1) throw LoweringError(fmt::format("target {} has num_sms {}", target.name, n));
  if (const auto* policy = std::get_if<std::string>(&config.sm_assignment)) {
    if (*policy == "round_robin") {
      for (size_t i = 0; i < p.tasks.size(); ++i) p.tasks[i].sm = int64_t(i) % n;
      return;
    }
    if (*policy == "critical_path") {
      assign_critical_path(p, target);
      return;
    }
    if (*policy != "load_balance")
      throw LoweringError(fmt::format(
          "sm_assignment '{}' is unknown (round_robin, load_balance, critical_path, or a "
          "{{task_id: sm}} map)",
          *policy));
    LoadBalancer lb(n);
    for (Task& t : p.tasks) t.sm = lb.take(cost(t));
    return;
  }

  const auto& map = std::get<ScheduleConfig::ExplicitSmMap>(config.sm_assignment);
  std::unordered_map<int64_t, int64_t> fixed;
  for (const auto& [task, sm] : map) {
    if (task < 0 || task >= int64_t(p.tasks.size()))
      throw LoweringError(fmt::format("sm_assignment: task {} does not exist (the program has {})",
                                      task, p.tasks.size()));
    if (sm < 0 || sm >= n)
      throw LoweringError(fmt::format("sm_assignment: task {} -> SM {} is outside [0, {}) of {}",
                                      task, sm, n, target.name));
    if (!fixed.emplace(task, sm).second)
      throw LoweringError(fmt::format("sm_assignment: task {} is listed twice", task));
  }
  LoadBalancer lb(n);
  for (const auto& [task, sm] : fixed) lb.add(sm, cost(p.tasks[size_t(task)]));
  for (Task& t : p.tasks) {
    const auto it = fixed.find(t.id);
    t.sm = it != fixed.end() ? it->second : lb.take(cost(t));
  }
}

}  // namespace amk::schedule
