#include "cli/profile_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "amk/step_trace.h"
#include "cli/table.h"

namespace amk::cli {

namespace {

// One row per stage across layers ("L*.q_proj"), by the trace's label parser: the regex this
// replaced expected "layers.N." labels and so never grouped the lowering's "LN." ones.
std::string group_of(const std::string& label) {
  const eval::LabelParts parts = eval::parse_label(label);
  return parts.layer ? "L*." + parts.stage : parts.stage;
}

struct Group {
  int64_t tasks = 0;
  double busy_us = 0, wait_us = 0;
  uint64_t first = UINT64_MAX, last = 0;
  size_t order = 0;  // first appearance in list order, for a readable table
};

}  // namespace

std::string profile_report(const Program& program, const std::vector<CudaVM::TaskTiming>& t) {
  if (t.empty() || t.size() != program.tasks.size()) return {};
  uint64_t begin = UINT64_MAX, end = 0;
  std::map<std::string, Group> groups;
  std::map<int64_t, double> busy_per_sm;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].op_end == 0) continue;
    const Task& task = program.tasks[i];
    Group& g = groups[group_of(task.label)];
    if (g.tasks == 0) g.order = i;
    ++g.tasks;
    g.busy_us += double(t[i].op_end - t[i].op_begin) / 1e3;
    g.wait_us += double(t[i].op_begin - t[i].wait_begin) / 1e3;
    g.first = std::min(g.first, t[i].wait_begin);
    g.last = std::max(g.last, t[i].op_end);
    begin = std::min(begin, t[i].wait_begin);
    end = std::max(end, t[i].op_end);
    busy_per_sm[task.sm.value_or(-1)] += double(t[i].op_end - t[i].op_begin) / 1e3;
  }
  if (groups.empty()) return {};
  std::vector<std::pair<std::string, Group>> rows(groups.begin(), groups.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.order < b.second.order; });
  Table table({"stage", "tasks", "busy µs (sum)", "busy µs/task", "wait µs (sum)", "span µs"},
              {Table::Align::Left, Table::Align::Right, Table::Align::Right, Table::Align::Right,
               Table::Align::Right, Table::Align::Right});
  for (const auto& [name, g] : rows)
    table.add_row({name, std::to_string(g.tasks), fmt::format("{:.1f}", g.busy_us),
                   fmt::format("{:.2f}", g.busy_us / double(g.tasks)),
                   fmt::format("{:.1f}", g.wait_us),
                   fmt::format("{:.1f}", double(g.last - g.first) / 1e3)});
  std::vector<double> busy;
  for (const auto& [sm, us] : busy_per_sm) busy.push_back(us);
  std::sort(busy.begin(), busy.end());
  const double span = double(end - begin) / 1e3;
  return table.render() +
         fmt::format("\nstep span {:.1f} µs; busy per SM: min {:.1f}, median {:.1f}, max {:.1f} µs "
                     "over {} SMs (busy = op begin -> signalled; wait = waiting for inputs)\n",
                     span, busy.front(), busy[busy.size() / 2], busy.back(), busy.size());
}

std::string profile_tsv(const Program& program, const std::vector<CudaVM::TaskTiming>& t) {
  if (t.size() != program.tasks.size()) return {};
  uint64_t begin = UINT64_MAX;
  for (const auto& x : t)
    if (x.op_end != 0) begin = std::min(begin, x.wait_begin);
  std::string out =
      "task\tlabel\top\tsm\test_bytes\twait_begin_ns\top_begin_ns\top_end_ns\tbody_begin_ns\t"
      "body_end_ns\n";
  // The body stamps are optional (0: the op marks none): "-" then.
  auto rel = [&](uint64_t ns) { return ns == 0 ? std::string("-") : std::to_string(ns - begin); };
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].op_end == 0) continue;
    const Task& task = program.tasks[i];
    out += fmt::format("{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n", task.id, task.label,
                       int(task.op), task.sm.value_or(-1), task.est_bytes, t[i].wait_begin - begin,
                       t[i].op_begin - begin, t[i].op_end - begin, rel(t[i].body_begin),
                       rel(t[i].body_end));
  }
  return out;
}

}  // namespace amk::cli
