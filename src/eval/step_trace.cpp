#include "amk/step_trace.h"

#include "ir/dependency_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

namespace amk::eval {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool ran(const TaskStamps& s) { return s.op_end != 0; }

void check_sizes(const Program& program, const std::vector<TaskStamps>& stamps) {
  if (stamps.size() != program.tasks.size())
    throw std::invalid_argument(fmt::format("{} task stamps for a program of {} tasks",
                                            stamps.size(), program.tasks.size()));
}

// The step's earliest stamp (a wait begin), or 0 when no task ran.
uint64_t step_origin(const std::vector<TaskStamps>& stamps) {
  uint64_t origin = UINT64_MAX;
  for (const TaskStamps& s : stamps)
    if (ran(s)) origin = std::min(origin, s.wait_begin);
  return origin == UINT64_MAX ? 0 : origin;
}

// ns since the origin, in µs. Differences are taken in integers first: a %globaltimer stamp is
// ~1.7e18 ns, past double's exact integers.
double us_since(uint64_t t, uint64_t origin) {
  return t >= origin ? double(t - origin) / 1e3 : -double(origin - t) / 1e3;
}

// `prefix` then a decimal then '.' at the front of `s`: the number, and `s` advanced past it.
std::optional<int64_t> take_layer(std::string_view& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::string_view rest = s.substr(prefix.size());
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
  if (ec != std::errc() || end == rest.data() || end == rest.data() + rest.size() || *end != '.')
    return std::nullopt;
  s = rest.substr(size_t(end - rest.data()) + 1);
  return value;
}

double gbs_of(int64_t bytes, double span_us) {
  return span_us > 0 ? double(bytes) / (span_us * 1e3) : kNaN;
}

double floor_of(int64_t bytes, double ceiling_gbs) {
  return ceiling_gbs > 0 ? double(bytes) / (ceiling_gbs * 1e3) : kNaN;
}

// start_us, end_us, span_us, from_prev_us and the rest of `r` from integer ns stamps (a
// difference of two µs doubles would not be exact).
void finish_row(LevelRow& r, uint64_t origin, uint64_t begin, uint64_t end, uint64_t prev_end,
                double ceiling_gbs) {
  r.start_us = us_since(begin, origin);
  r.end_us = us_since(end, origin);
  r.span_us = us_since(end, begin);
  r.from_prev_us = us_since(end, prev_end);
  r.floor_us = floor_of(r.bytes, ceiling_gbs);
  r.gbs = gbs_of(r.bytes, r.span_us);
  r.pct_of_ceiling = ceiling_gbs > 0 ? 100 * r.gbs / ceiling_gbs : kNaN;
  r.exposed_us = r.span_us - r.floor_us;
}

std::string num(double v, int decimals) {
  return std::isfinite(v) ? fmt::format("{:.{}f}", v, decimals) : std::string("-");
}

}  // namespace

LabelParts parse_label(std::string_view label) {
  LabelParts parts;
  std::string_view rest = label;
  parts.layer = take_layer(rest, "L");
  if (!parts.layer) parts.layer = take_layer(rest, "layers.");
  parts.stage = std::string(rest.substr(0, rest.find('[')));
  return parts;
}

int64_t layer_count(const Program& program) {
  int64_t n = 0;
  for (const Task& t : program.tasks)
    if (const auto layer = parse_label(t.label).layer; layer && *layer >= 0)
      n = std::max(n, *layer + 1);
  return n;
}

std::string chrome_trace_json(const Program& program, const std::vector<TaskStamps>& stamps,
                              bool waits) {
  check_sizes(program, stamps);
  const uint64_t origin = step_origin(stamps);
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
                    {"args", {{"name", "AMK decode step"}}}});
  std::set<int64_t> sms;
  for (size_t i = 0; i < program.tasks.size(); ++i)
    if (ran(stamps[i])) sms.insert(program.tasks[i].sm.value_or(-1));
  for (int64_t sm : sms) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", sm},
                      {"args", {{"name", fmt::format("SM {}", sm)}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", sm},
                      {"args", {{"sort_index", sm}}}});
  }
  for (size_t i = 0; i < program.tasks.size(); ++i) {
    const TaskStamps& s = stamps[i];
    if (!ran(s)) continue;
    const Task& task = program.tasks[i];
    const LabelParts parts = parse_label(task.label);
    const int64_t sm = task.sm.value_or(-1);
    const double wait_us = s.op_begin > s.wait_begin ? double(s.op_begin - s.wait_begin) / 1e3 : 0.0;
    if (waits && s.op_begin > s.wait_begin)
      events.push_back({{"name", "wait"}, {"cat", "wait"}, {"ph", "X"}, {"pid", 0}, {"tid", sm},
                        {"ts", us_since(s.wait_begin, origin)}, {"dur", wait_us},
                        {"args", {{"task", task.id}, {"label", task.label}}}});
    const std::string name =
        parts.layer ? fmt::format("{} L{}", parts.stage, *parts.layer) : parts.stage;
    events.push_back(
        {{"name", name.empty() ? std::string(name_of(task.op)) : name},
         {"cat", "task"},
         {"ph", "X"},
         {"pid", 0},
         {"tid", sm},
         {"ts", us_since(s.op_begin, origin)},
         {"dur", s.op_end >= s.op_begin ? double(s.op_end - s.op_begin) / 1e3 : 0.0},
         {"args",
          {{"task", task.id},
           {"label", task.label},
           {"op", std::string(name_of(task.op))},
           {"layer", parts.layer ? nlohmann::ordered_json(*parts.layer) : nlohmann::ordered_json()},
           {"bytes", task.est_bytes},
           {"wait_us", wait_us}}}});
  }
  // One event a line: compact, yet greppable.
  std::string out = "{\"traceEvents\": [\n";
  for (size_t i = 0; i < events.size(); ++i)
    out += events[i].dump() + (i + 1 < events.size() ? ",\n" : "\n");
  const nlohmann::ordered_json other = {{"tasks", program.tasks.size()}, {"step_origin_ns", origin}};
  return out + "],\n\"displayTimeUnit\": \"ns\",\n\"otherData\": " + other.dump() + "}";
}

void write_chrome_trace(const std::string& path, const Program& program,
                        const std::vector<TaskStamps>& stamps, bool waits) {
  const std::string text = chrome_trace_json(program, stamps, waits);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text << "\n";
  out.flush();
  if (!out) throw std::runtime_error(fmt::format("cannot write the trace to '{}'", path));
}

namespace {

// Depth of each task in the counter DAG: 0 for a task that waits on no producer, else 1 + the
// deepest task that signals a counter it waits on. Walked in Kahn's order (a task's producers
// first); a cyclic program (validate() rejects it) leaves the tasks on the cycle at 0.
std::vector<int64_t> dependency_depths(const Program& program) {
  const detail::DependencyGraph g = detail::DependencyGraph::build(program);
  const detail::TopoOrder order = detail::topological_order(g);
  std::vector<int64_t> depth(program.tasks.size(), 0);
  for (const int32_t t : order.tasks)
    for (const int32_t c : g.task_waits.row(t))
      for (const int32_t producer : g.producers.row(c))
        depth[t] = std::max(depth[t], depth[producer] + 1);
  return depth;
}

// When each wait of the step is met: per counter, the op ends of the tasks that signal it, in
// order (op end is stamped after the signal).
struct GateMoments {
  std::map<int64_t, std::vector<uint64_t>> signals;
  // The moment the task's last wait was met; none for a task without waits or a wait whose
  // threshold more signals than ran would meet.
  std::optional<uint64_t> ready(const Task& task) const {
    std::optional<uint64_t> at;
    for (const Wait& w : task.waits) {
      const auto it = signals.find(w.counter);
      if (w.threshold < 1 || it == signals.end() || int64_t(it->second.size()) < w.threshold)
        return std::nullopt;
      at = std::max(at.value_or(0), it->second[size_t(w.threshold - 1)]);
    }
    return at;
  }
};
GateMoments gate_moments(const Program& program, const std::vector<TaskStamps>& stamps) {
  GateMoments m;
  for (size_t i = 0; i < program.tasks.size(); ++i)
    if (ran(stamps[i])) m.signals[program.tasks[i].out_counter].push_back(stamps[i].op_end);
  for (auto& [counter, ends] : m.signals) std::sort(ends.begin(), ends.end());
  return m;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return kNaN;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  return (*std::max_element(v.begin(), v.begin() + std::ptrdiff_t(mid)) + hi) / 2;
}

// A level's samples of the per-task columns (LevelRow's gate and body columns), the medians of
// which fill its row; a merged row (a dependency level, the layer's total) appends its levels'.
struct LevelSamples {
  std::vector<double> gates;   // gate_us: the tasks already waiting when their last wait was met
  std::vector<double> starts;  // met_to_begin_us: every task whose waits were met
  std::vector<double> lates;   // late_to_begin_us: the rest, op begin - wait begin
  std::vector<double> pre, body, epi;  // pre_us, body_us, epi_us: tasks that mark a body only
  void add_gate(const TaskStamps& s, uint64_t ready) {
    starts.push_back(us_since(s.op_begin, ready));
    if (s.wait_begin < ready)
      gates.push_back(starts.back());
    else
      lates.push_back(us_since(s.op_begin, s.wait_begin));
  }
  void add_body(const TaskStamps& s) {
    if (!s.marks_body()) return;
    pre.push_back(us_since(s.body_begin, s.op_begin));
    body.push_back(us_since(s.body_end, s.body_begin));
    epi.push_back(us_since(s.op_end, s.body_end));
  }
  void append(const LevelSamples& o) {
    for (auto field : {&LevelSamples::gates, &LevelSamples::starts, &LevelSamples::lates,
                       &LevelSamples::pre, &LevelSamples::body, &LevelSamples::epi})
      (this->*field).insert((this->*field).end(), (o.*field).begin(), (o.*field).end());
  }
  void fill(LevelRow& r) const {
    r.gate_us = median_of(gates);
    r.met_to_begin_us = median_of(starts);
    r.late_tasks = int64_t(lates.size());
    r.late_to_begin_us = median_of(lates);
    r.pre_us = median_of(pre);
    r.body_us = median_of(body);
    r.epi_us = median_of(epi);
  }
};

}  // namespace

LayerTable layer_table(const Program& program, const std::vector<TaskStamps>& stamps,
                       double ceiling_gbs, std::optional<int64_t> layer) {
  check_sizes(program, stamps);
  const int64_t n_layers = layer_count(program);
  LayerTable table;
  table.ceiling_gbs = ceiling_gbs;
  table.layer = layer.value_or(n_layers / 2);
  if (table.layer < 0 || table.layer >= n_layers)
    throw std::invalid_argument(
        n_layers == 0 ? fmt::format("the program names no layers (no trace layer {})", table.layer)
                      : fmt::format("layer {} is not in the program (layers 0 to {})", table.layer,
                                    n_layers - 1));
  const uint64_t origin = step_origin(stamps);

  // The step, and the layer's tasks grouped by stage (first list index kept for tie-breaks).
  struct Level {
    LevelRow row;
    size_t first = SIZE_MAX;
    uint64_t begin = UINT64_MAX, end = 0;
    int64_t depth = INT64_MAX;  // the shallowest of its tasks
    LevelSamples samples;
  };
  const GateMoments met = gate_moments(program, stamps);
  std::map<std::string, Level> levels;
  const std::vector<int64_t> depth = dependency_depths(program);
  uint64_t step_begin = UINT64_MAX, step_end = 0;
  size_t layer_first = SIZE_MAX;
  for (size_t i = 0; i < program.tasks.size(); ++i) {
    const TaskStamps& s = stamps[i];
    const Task& task = program.tasks[i];
    const LabelParts parts = parse_label(task.label);
    if (parts.layer == table.layer) layer_first = std::min(layer_first, i);
    if (!ran(s)) continue;
    ++table.step_tasks;
    table.step_bytes += task.est_bytes;
    step_begin = std::min(step_begin, s.wait_begin);
    step_end = std::max(step_end, s.op_end);
    if (parts.layer != table.layer) continue;
    Level& level = levels[parts.stage];
    level.row.stage = parts.stage;
    level.first = std::min(level.first, i);
    ++level.row.tasks;
    level.row.bytes += task.est_bytes;
    level.begin = std::min(level.begin, s.op_begin);
    level.end = std::max(level.end, s.op_end);
    level.depth = std::min(level.depth, depth[i]);
    if (const std::optional<uint64_t> ready = met.ready(task)) level.samples.add_gate(s, *ready);
    level.samples.add_body(s);
  }
  if (table.step_tasks > 0) table.step_span_us = us_since(step_end, step_begin);
  table.step_floor_us = floor_of(table.step_bytes, ceiling_gbs);
  if (levels.empty()) return table;

  // The previous end of the layer's first level: the tasks listed before the layer.
  std::optional<uint64_t> before_end;
  for (size_t i = 0; i < layer_first && i < program.tasks.size(); ++i)
    if (ran(stamps[i])) before_end = std::max(before_end.value_or(0), stamps[i].op_end);

  std::vector<Level> ordered;
  for (auto& [stage, level] : levels) ordered.push_back(std::move(level));
  std::sort(ordered.begin(), ordered.end(), [](const Level& a, const Level& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.first < b.first;
  });
  LevelRow& total = table.total;
  total.stage = "total";
  uint64_t total_begin = UINT64_MAX, total_end = 0;
  for (size_t k = 0; k < ordered.size(); ++k) {
    Level& level = ordered[k];
    LevelRow& r = level.row;
    const uint64_t prev_end = k > 0 ? ordered[k - 1].end : before_end.value_or(level.begin);
    finish_row(r, origin, level.begin, level.end, prev_end, ceiling_gbs);
    level.samples.fill(r);
    total.tasks += r.tasks;
    total.bytes += r.bytes;
    total_begin = std::min(total_begin, level.begin);
    total_end = std::max(total_end, level.end);
    table.levels.push_back(r);
  }
  // Stages at one depth merged, in the order their first stage started.
  std::vector<Level> merged;
  for (const Level& level : ordered) {
    auto same = std::find_if(merged.begin(), merged.end(),
                             [&](const Level& m) { return m.depth == level.depth; });
    if (same == merged.end()) {
      merged.push_back(level);
      continue;
    }
    same->row.stage += "+" + level.row.stage;
    same->row.tasks += level.row.tasks;
    same->row.bytes += level.row.bytes;
    same->begin = std::min(same->begin, level.begin);
    same->end = std::max(same->end, level.end);
    same->samples.append(level.samples);
  }
  for (size_t k = 0; k < merged.size(); ++k) {
    LevelRow& r = merged[k].row;
    const uint64_t prev_end = k > 0 ? merged[k - 1].end : before_end.value_or(merged[k].begin);
    finish_row(r, origin, merged[k].begin, merged[k].end, prev_end, ceiling_gbs);
    merged[k].samples.fill(r);
    table.dependency_levels.push_back(r);
  }
  finish_row(total, origin, total_begin, total_end, before_end.value_or(total_begin), ceiling_gbs);
  LevelSamples all;
  for (const Level& level : ordered) all.append(level.samples);
  all.fill(total);
  return table;
}

namespace {

// Rows under a header, columns padded to the widest cell ("µ" is one column, two bytes), the
// first column left-aligned; a rule under the header and, with `total_last`, above the last row.
std::string format_rows(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows, bool total_last) {
  const auto width = [](const std::string& s) {
    return size_t(std::count_if(s.begin(), s.end(), [](char c) {
      return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    }));
  };
  std::vector<size_t> w(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    w[c] = width(header[c]);
    for (const auto& row : rows) w[c] = std::max(w[c], width(row[c]));
  }
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(w[c] - width(cells[c]), ' ');
      text += c == 0 ? cells[c] + pad : "  " + pad + cells[c];
    }
    return text + "\n";
  };
  size_t rule = 0;
  for (size_t c = 0; c < w.size(); ++c) rule += w[c] + (c ? 2 : 0);
  std::string out = line(header) + std::string(rule, '-') + "\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    if (total_last && i + 1 == rows.size()) out += std::string(rule, '-') + "\n";
    out += line(rows[i]);
  }
  return out;
}

}  // namespace

std::string format_layer_table(const LayerTable& t) {
  std::string out = fmt::format(
      "layer {}, one level per stage in start order: span = first op begin -> last op end;\n"
      "from prev = its end - the previous level's end; floor = est_bytes / {} GB/s; exposed = "
      "span - floor;\ngate = median op begin - the moment its last wait was met, over the tasks "
      "already waiting then;\nlate = tasks whose SM began them only after that moment; late→op = "
      "their median op begin - wait begin;\nmet→op = the gate's median over every task, late "
      "ones included;\npre / body / epi = medians of op begin -> body begin -> body end -> "
      "signalled, over the tasks that mark a body\n",
      t.layer, num(t.ceiling_gbs, 0));
  const std::vector<std::string> header{"level",     "tasks",      "KB",      "floor µs",
                                        "span µs",   "from prev µs", "GB/s",  "% ceiling",
                                        "exposed µs", "gate µs", "late",   "late→op µs", "met→op µs",
                                        "pre µs",     "body µs", "epi µs"};
  const auto cells = [](const LevelRow& r) {
    return std::vector<std::string>{
        r.stage,           std::to_string(r.tasks),   num(double(r.bytes) / 1e3, 1),
        num(r.floor_us, 2), num(r.span_us, 2),        num(r.from_prev_us, 2),
        num(r.gbs, 0),     num(r.pct_of_ceiling, 1), num(r.exposed_us, 2),
        num(r.gate_us, 2), std::to_string(r.late_tasks), num(r.late_to_begin_us, 2),
        num(r.met_to_begin_us, 2), num(r.pre_us, 2),  num(r.body_us, 2),
        num(r.epi_us, 2)};
  };
  if (t.levels.empty()) {
    out += "(no task of this layer ran)\n";
  } else {
    std::vector<std::vector<std::string>> rows;
    for (const LevelRow& r : t.levels) rows.push_back(cells(r));
    rows.push_back(cells(t.total));
    out += format_rows(header, rows, /*total_last=*/true);
    // The stages that run side by side as one dependency level (only where some do).
    if (t.dependency_levels.size() < t.levels.size()) {
      out += "the same layer by dependency level (stages at one depth of the counter DAG):\n";
      rows.clear();
      for (const LevelRow& r : t.dependency_levels) rows.push_back(cells(r));
      out += format_rows(header, rows, /*total_last=*/false);
    }
  }
  out += fmt::format(
      "step: {} tasks, {:.2f} MB est_bytes, span {} µs (first wait begin -> last op end), floor "
      "{} µs, {} GB/s = {}% of the ceiling\n",
      t.step_tasks, double(t.step_bytes) / 1e6, num(t.step_span_us, 1), num(t.step_floor_us, 1),
      num(gbs_of(t.step_bytes, t.step_span_us), 0),
      num(t.ceiling_gbs > 0 ? 100 * gbs_of(t.step_bytes, t.step_span_us) / t.ceiling_gbs : kNaN,
          1));
  return out;
}

std::string write_step_trace(const std::string& path, const Program& program,
                             const std::vector<TaskStamps>& stamps, double ceiling_gbs,
                             std::optional<int64_t> layer) {
  if (stamps.size() != program.tasks.size())
    return fmt::format("no trace written: {} task stamps for {} tasks\n", stamps.size(),
                       program.tasks.size());
  write_chrome_trace(path, program, stamps);
  return fmt::format("trace of one decode step written to {} (ui.perfetto.dev)\n", path) +
         format_layer_table(layer_table(program, stamps, ceiling_gbs, layer));
}

}  // namespace amk::eval
