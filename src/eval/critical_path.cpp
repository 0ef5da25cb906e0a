#include "amk/critical_path.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace amk::eval {

Region region_of_label(std::string_view label) {
  const LabelParts parts = parse_label(label);
  const std::string& s = parts.stage;
  const auto has = [&](std::string_view w) { return s.find(w) != std::string::npos; };
  if (!parts.layer) {
    if (has("lm_head") || has("final_norm") || has("argmax")) return Region::LmHead;
    return Region::Other;
  }
  if (has("gate") || has("up") || has("down") || has("silu") || has("mlp") ||
      has("post_attention"))
    return Region::Mlp;
  return Region::Attention;
}

RegionShares critical_path_shares(const Program& p, const std::vector<TaskStamps>& stamps) {
  if (stamps.size() != p.tasks.size())
    throw std::invalid_argument("critical_path_shares: one stamp per task is needed");
  RegionShares shares;
  // The producers of each counter, and each SM's tasks in the order they ran.
  std::map<int64_t, std::vector<size_t>> producers;
  std::map<int64_t, std::vector<size_t>> by_sm;
  size_t last = SIZE_MAX;
  uint64_t start = UINT64_MAX;
  for (size_t i = 0; i < p.tasks.size(); ++i) {
    if (stamps[i].op_end == 0) continue;
    producers[p.tasks[i].out_counter].push_back(i);
    by_sm[p.tasks[i].sm.value_or(-1)].push_back(i);
    if (last == SIZE_MAX || stamps[i].op_end > stamps[last].op_end) last = i;
    start = std::min({start, stamps[i].wait_begin ? stamps[i].wait_begin : stamps[i].op_begin,
                      stamps[i].op_begin});
  }
  if (last == SIZE_MAX) return shares;
  std::map<size_t, size_t> sm_previous;
  for (auto& [sm, tasks] : by_sm) {
    std::sort(tasks.begin(), tasks.end(),
              [&](size_t a, size_t b) { return stamps[a].op_begin < stamps[b].op_begin; });
    for (size_t k = 1; k < tasks.size(); ++k) sm_previous[tasks[k]] = tasks[k - 1];
  }
  double time[4] = {0, 0, 0, 0};
  // Walk back from the task that ended last; each step goes to the latest-ending task that
  // could have held this one back, and the time between their ends is this task's share.
  for (size_t cur = last, guard = 0; guard <= p.tasks.size(); ++guard) {
    std::optional<size_t> pred;
    const auto consider = [&](size_t c) {
      if (stamps[c].op_end <= stamps[cur].op_end && c != cur &&
          (!pred || stamps[c].op_end > stamps[*pred].op_end))
        pred = c;
    };
    for (const Wait& w : p.tasks[cur].waits)
      if (auto it = producers.find(w.counter); it != producers.end())
        for (size_t c : it->second) consider(c);
    if (auto it = sm_previous.find(cur); it != sm_previous.end()) consider(it->second);
    const uint64_t from = pred ? stamps[*pred].op_end : start;
    time[int(region_of_label(p.tasks[cur].label))] += double(stamps[cur].op_end - from);
    if (!pred) break;
    cur = *pred;
  }
  const double total = time[0] + time[1] + time[2] + time[3];
  if (total <= 0) return shares;
  shares = {time[0] / total, time[1] / total, time[2] / total, time[3] / total, true};
  return shares;
}

}  // namespace amk::eval
