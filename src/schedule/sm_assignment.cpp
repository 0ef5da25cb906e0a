#include "schedule/sm_assignment.h"

#include <fmt/format.h>

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <utility>

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

}  // namespace

void assign_sms(Program& p, const ScheduleConfig& config, const GpuTarget& target) {
  const int64_t n = target.num_sms;
  if (n < 1) throw LoweringError(fmt::format("target {} has num_sms {}", target.name, n));
  if (const auto* policy = std::get_if<std::string>(&config.sm_assignment)) {
    if (*policy == "round_robin") {
      for (size_t i = 0; i < p.tasks.size(); ++i) p.tasks[i].sm = int64_t(i) % n;
      return;
    }
    if (*policy != "load_balance")
      throw LoweringError(fmt::format(
          "sm_assignment '{}' is unknown (round_robin, load_balance, or a {{task_id: sm}} map)",
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
