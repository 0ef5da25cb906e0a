// amk/step_trace.h: the Chrome trace and the per-level layer table of `amk bench --trace`, from a
// program and synthetic per-task stamps whose times are known.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "amk/lowering.h"
#include "amk/model_config.h"
#include "amk/step_trace.h"

namespace {

using namespace amk;
using eval::TaskStamps;
using json = nlohmann::json;

// A %globaltimer-sized origin: stamps past double's exact integers must still give exact spans.
constexpr uint64_t kBase = 1'700'000'000'123'456'789ull;

TaskStamps at(uint64_t wait, uint64_t op, uint64_t end) {
  return {kBase + wait, kBase + op, kBase + end};
}

void add(Program& p, const std::string& label, int64_t sm, int64_t bytes, Op op = Op::GEMV_TILE) {
  Task& t = p.add_task(op, {}, {}, 0, {}, {}, label);
  t.sm = sm;
  t.est_bytes = bytes;
}

// Six tasks, one of which did not run; layer 0 is the only (so the middle) layer.
struct HandMade {
  Program p;
  std::vector<TaskStamps> s;
  HandMade() {
    add(p, "embed", 0, 0, Op::EMBED);                                 s.push_back(at(0, 100, 1100));
    add(p, "L0.q_proj[t0]", 1, 1000);                                 s.push_back(at(1000, 1200, 2200));
    add(p, "L0.q_proj[t1]", 2, 3000);                                 s.push_back(at(1000, 1300, 3200));
    add(p, "L0.attention[h0][kv0]", 1, 1000, Op::ATTENTION_TILE);     s.push_back(at(2200, 3300, 4300));
    add(p, "L0.attention[h1][kv1]", 3, 1000, Op::ATTENTION_TILE);     s.push_back({});
    add(p, "lm_head[t0]", 0, 5000);                                   s.push_back(at(1100, 4400, 9400));
  }
};

const json* find_event(const json& events, const std::string& label) {
  for (const json& e : events)
    if (e.value("cat", "") == "task" && e["args"]["label"] == label) return &e;
  return nullptr;
}

// The one rule for a body (the trace's pre / body / epi and the simulator fit's body): both
// stamps set, inside the op, in order.
TEST(StepTrace, ATaskMarksABodyOnlyInsideItsOp) {
  const TaskStamps ok{1, 10, 50, 20, 40};
  EXPECT_TRUE(ok.marks_body());
  EXPECT_TRUE((TaskStamps{1, 10, 50, 10, 50}).marks_body());  // the whole op
  EXPECT_FALSE((TaskStamps{1, 10, 50, 0, 0}).marks_body());   // none marked
  EXPECT_FALSE((TaskStamps{1, 10, 50, 20, 0}).marks_body());
  EXPECT_FALSE((TaskStamps{1, 10, 50, 5, 40}).marks_body());  // begins before the op
  EXPECT_FALSE((TaskStamps{1, 10, 50, 20, 60}).marks_body()); // ends after it
  EXPECT_FALSE((TaskStamps{1, 10, 50, 40, 20}).marks_body()); // backwards
}

TEST(StepTrace, ParsesLayerAndStageFromLabels) {
  EXPECT_EQ(eval::parse_label("L8.q_proj[t3]").layer, 8);
  EXPECT_EQ(eval::parse_label("L8.q_proj[t3]").stage, "q_proj");
  EXPECT_EQ(eval::parse_label("L12.attention[h0][kv5]").stage, "attention");
  EXPECT_EQ(eval::parse_label("L3.attention_combine[h1]").stage, "attention_combine");
  EXPECT_EQ(eval::parse_label("L0.kv_append_k").stage, "kv_append_k");
  EXPECT_EQ(eval::parse_label("L0.kv_append_k").layer, 0);
  EXPECT_EQ(eval::parse_label("layers.2.k_proj[t1]").layer, 2);
  EXPECT_EQ(eval::parse_label("layers.2.k_proj[t1]").stage, "k_proj");
  EXPECT_FALSE(eval::parse_label("lm_head[t4]").layer.has_value());
  EXPECT_EQ(eval::parse_label("lm_head[t4]").stage, "lm_head");
  EXPECT_FALSE(eval::parse_label("Lx.q_proj").layer.has_value());
  EXPECT_EQ(eval::parse_label("Lx.q_proj").stage, "Lx.q_proj");
  EXPECT_EQ(eval::parse_label("embed").stage, "embed");
}

TEST(StepTrace, HandMadeTraceHasOneTrackPerSmAndOneEventPerTask) {
  const HandMade h;
  const json trace = json::parse(eval::chrome_trace_json(h.p, h.s));
  EXPECT_EQ(trace["displayTimeUnit"], "ns");
  const json& events = trace["traceEvents"];
  std::set<int64_t> named;
  int tasks = 0, waits = 0;
  for (const json& e : events) {
    if (e["name"] == "thread_name") {
      EXPECT_EQ(e["args"]["name"], "SM " + std::to_string(e["tid"].get<int64_t>()));
      EXPECT_TRUE(named.insert(e["tid"].get<int64_t>()).second);
    }
    if (e["ph"] == "X") (e["cat"] == "task" ? tasks : waits) += 1;
  }
  EXPECT_EQ(named, (std::set<int64_t>{0, 1, 2}));  // SM 3's only task did not run
  EXPECT_EQ(tasks, 5);
  EXPECT_EQ(waits, 5);

  const json* q1 = find_event(events, "L0.q_proj[t1]");
  ASSERT_NE(q1, nullptr);
  EXPECT_EQ((*q1)["name"], "q_proj L0");
  EXPECT_EQ((*q1)["tid"], 2);
  EXPECT_DOUBLE_EQ((*q1)["ts"].get<double>(), 1.3);
  EXPECT_DOUBLE_EQ((*q1)["dur"].get<double>(), 1.9);
  EXPECT_EQ((*q1)["args"]["op"], "GEMV_TILE");
  EXPECT_EQ((*q1)["args"]["layer"], 0);
  EXPECT_EQ((*q1)["args"]["bytes"], 3000);
  EXPECT_DOUBLE_EQ((*q1)["args"]["wait_us"].get<double>(), 0.3);
  const json* lm = find_event(events, "lm_head[t0]");
  ASSERT_NE(lm, nullptr);
  EXPECT_EQ((*lm)["name"], "lm_head");
  EXPECT_TRUE((*lm)["args"]["layer"].is_null());
  EXPECT_EQ(find_event(events, "L0.attention[h1][kv1]"), nullptr);

  const json no_waits = json::parse(eval::chrome_trace_json(h.p, h.s, /*waits=*/false));
  EXPECT_EQ(std::count_if(no_waits["traceEvents"].begin(), no_waits["traceEvents"].end(),
                          [](const json& e) { return e["name"] == "wait"; }),
            0);
  EXPECT_THROW(eval::chrome_trace_json(h.p, {h.s.begin(), h.s.end() - 1}), std::invalid_argument);
}

TEST(StepTrace, HandMadeLayerTableNumbers) {
  const HandMade h;
  const eval::LayerTable t = eval::layer_table(h.p, h.s, /*ceiling_gbs=*/2.0);
  EXPECT_EQ(t.layer, 0);
  ASSERT_EQ(t.levels.size(), 2u);
  const eval::LevelRow& q = t.levels[0];
  EXPECT_EQ(q.stage, "q_proj");
  EXPECT_EQ(q.tasks, 2);
  EXPECT_EQ(q.bytes, 4000);
  EXPECT_DOUBLE_EQ(q.start_us, 1.2);
  EXPECT_DOUBLE_EQ(q.end_us, 3.2);
  EXPECT_DOUBLE_EQ(q.span_us, 2.0);
  EXPECT_DOUBLE_EQ(q.floor_us, 2.0);   // 4000 B / 2 GB/s
  EXPECT_DOUBLE_EQ(q.gbs, 2.0);        // 4000 B / 2000 ns
  EXPECT_DOUBLE_EQ(q.pct_of_ceiling, 100.0);
  EXPECT_NEAR(q.exposed_us, 0.0, 1e-12);
  EXPECT_NEAR(q.from_prev_us, 2.1, 1e-12);  // from embed's end at 1.1
  const eval::LevelRow& a = t.levels[1];
  EXPECT_EQ(a.stage, "attention");
  EXPECT_EQ(a.tasks, 1);  // its second tile did not run
  EXPECT_EQ(a.bytes, 1000);
  EXPECT_NEAR(a.span_us, 1.0, 1e-12);
  EXPECT_NEAR(a.gbs, 1.0, 1e-12);
  EXPECT_NEAR(a.pct_of_ceiling, 50.0, 1e-9);
  EXPECT_NEAR(a.floor_us, 0.5, 1e-12);
  EXPECT_NEAR(a.exposed_us, 0.5, 1e-12);
  EXPECT_NEAR(a.from_prev_us, 1.1, 1e-12);
  EXPECT_EQ(t.total.tasks, 3);
  EXPECT_EQ(t.total.bytes, 5000);
  EXPECT_NEAR(t.total.span_us, 3.1, 1e-12);
  EXPECT_NEAR(t.total.gbs, 5000.0 / 3100.0, 1e-12);
  EXPECT_NEAR(t.total.floor_us, 2.5, 1e-12);
  EXPECT_NEAR(t.total.from_prev_us, 3.2, 1e-12);
  EXPECT_EQ(t.step_tasks, 5);
  EXPECT_EQ(t.step_bytes, 10000);
  EXPECT_NEAR(t.step_span_us, 9.4, 1e-12);

  const std::string text = eval::format_layer_table(t);
  for (const char* want : {"layer 0", "q_proj", "attention", "total", "from prev µs",
                           "exposed µs", "% ceiling", "span 9.4 µs"})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;

  EXPECT_THROW(eval::layer_table(h.p, h.s, 2.0, 1), std::invalid_argument);
  const eval::LayerTable unknown = eval::layer_table(h.p, h.s, 0.0);
  EXPECT_TRUE(std::isnan(unknown.levels[0].floor_us));
  EXPECT_NE(eval::format_layer_table(unknown).find("-"), std::string::npos);
}

// The gate column: each waiting task's op begin minus the moment its last wait was met (the
// threshold-th signal of each counter it waits on), the median per level; tasks that arrived
// after that moment, and waits that more signals than ran would meet, are left out.
TEST(StepTrace, GateIsOpBeginMinusTheMomentTheLastWaitWasMet) {
  Program p;
  const int64_t q = p.new_counter("q"), k = p.new_counter("k"), o = p.new_counter("o"),
                a = p.new_counter("attention");
  std::vector<TaskStamps> s;
  const auto task = [&](const std::string& label, int64_t out, std::vector<Wait> waits,
                        TaskStamps st) {
    Task& t = p.add_task(Op::GEMV_TILE, {}, {}, out, std::move(waits), {}, label);
    t.sm = int64_t(s.size());
    s.push_back(st);
  };
  task("L0.q_proj[t0]", q, {}, at(0, 100, 2000));
  task("L0.q_proj[t1]", q, {}, at(0, 100, 3000));
  task("L0.k_proj[t0]", k, {}, at(0, 100, 2500));
  task("L0.attention[h0]", a, {{q, 2}, {k, 1}}, at(1000, 3400, 4000));  // met at 3000: 0.4
  task("L0.attention[h1]", a, {{q, 1}}, at(500, 2300, 4100));           // met at 2000: 0.3
  task("L0.attention[h2]", a, {{q, 2}}, at(3500, 4000, 4500));          // arrived after 3000
  task("L0.o_proj[t0]", o, {{a, 5}}, at(4000, 5000, 6000));             // 3 signals of a ran
  const eval::LayerTable t = eval::layer_table(p, s, 2.0, 0);
  std::map<std::string, double> gate;
  for (const eval::LevelRow& r : t.levels) gate[r.stage] = r.gate_us;
  EXPECT_TRUE(std::isnan(gate.at("q_proj")));  // no waits
  EXPECT_NEAR(gate.at("attention"), 0.35, 1e-12);
  EXPECT_TRUE(std::isnan(gate.at("o_proj")));
  EXPECT_NEAR(t.total.gate_us, 0.35, 1e-12);
  // h2 began waiting at 3500, after its waits were met at 3000: late, and in met→op (1.0) with
  // h0's 0.4 and h1's 0.3, where gate leaves it out.
  std::map<std::string, const eval::LevelRow*> row;
  for (const eval::LevelRow& r : t.levels) row[r.stage] = &r;
  EXPECT_EQ(row.at("attention")->late_tasks, 1);
  EXPECT_NEAR(row.at("attention")->met_to_begin_us, 0.4, 1e-12);
  EXPECT_EQ(row.at("q_proj")->late_tasks, 0);
  EXPECT_TRUE(std::isnan(row.at("q_proj")->met_to_begin_us));
  EXPECT_EQ(t.total.late_tasks, 1);
  EXPECT_NEAR(t.total.met_to_begin_us, 0.4, 1e-12);
  // What h2 paid from reaching its gate (3500) to passing it (4000), its inputs ready since 3000.
  EXPECT_NEAR(row.at("attention")->late_to_begin_us, 0.5, 1e-12);
  EXPECT_TRUE(std::isnan(row.at("q_proj")->late_to_begin_us));
  EXPECT_NEAR(t.total.late_to_begin_us, 0.5, 1e-12);
  const std::string text = eval::format_layer_table(t);
  EXPECT_NE(text.find("gate µs"), std::string::npos) << text;
  EXPECT_NE(text.find("0.35"), std::string::npos) << text;
  EXPECT_NE(text.find("met→op µs"), std::string::npos) << text;
  EXPECT_NE(text.find("late→op µs"), std::string::npos) << text;
}

// The body columns: each task's op split at its body stamps (pre = op begin -> body begin, body,
// epi = body end -> op end), the median per level over the tasks that mark a body; a task with
// no body stamps (or inconsistent ones) is left out, and a level without any shows "-".
TEST(StepTrace, PreBodyAndEpiSplitEachOpAtItsBodyStamps) {
  Program p;
  std::vector<TaskStamps> s;
  const auto task = [&](const std::string& label, TaskStamps st) {
    Task& t = p.add_task(Op::GEMV_TILE, {}, {}, 0, {}, {}, label);
    t.sm = int64_t(s.size());
    s.push_back(st);
  };
  const auto with_body = [](TaskStamps st, uint64_t b0, uint64_t b1) {
    st.body_begin = kBase + b0;
    st.body_end = kBase + b1;
    return st;
  };
  task("L0.q_proj[t0]", with_body(at(0, 100, 2000), 600, 1400));   // 0.5 / 0.8 / 0.6
  task("L0.q_proj[t1]", with_body(at(0, 100, 2600), 800, 1600));   // 0.7 / 0.8 / 1.0
  task("L0.q_proj[t2]", with_body(at(0, 100, 3000), 1100, 1200));  // 1.0 / 0.1 / 1.8
  task("L0.q_proj[t3]", at(0, 100, 3000));                         // no body: left out
  task("L0.q_proj[t4]", with_body(at(0, 100, 3000), 50, 60));      // begins before the op: out
  task("L0.attention[h0]", at(3000, 3100, 4000));                  // no body at all
  const eval::LayerTable t = eval::layer_table(p, s, 2.0, 0);
  ASSERT_EQ(t.levels.size(), 2u);
  const eval::LevelRow& q = t.levels[0];
  ASSERT_EQ(q.stage, "q_proj");
  EXPECT_NEAR(q.pre_us, 0.7, 1e-12);
  EXPECT_NEAR(q.body_us, 0.8, 1e-12);
  EXPECT_NEAR(q.epi_us, 1.0, 1e-12);
  EXPECT_TRUE(std::isnan(t.levels[1].pre_us));
  EXPECT_TRUE(std::isnan(t.levels[1].body_us));
  EXPECT_TRUE(std::isnan(t.levels[1].epi_us));
  EXPECT_NEAR(t.total.body_us, 0.8, 1e-12);  // the layer: the same three tasks
  const std::string text = eval::format_layer_table(t);
  EXPECT_NE(text.find("pre µs"), std::string::npos) << text;
  EXPECT_NE(text.find("epi µs"), std::string::npos) << text;
  EXPECT_NE(text.find("0.70"), std::string::npos) << text;
}

// A lowered tiny Llama (2 layers, split-KV attention by head group, 4 GEMV tiles per projection)
// with pseudo-random stamps; the table is checked against sums computed here by regex.
class LoweredStepTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    const ModelConfig m = load_model_config(std::filesystem::path(AMK_TESTDATA_DIR) / "fixtures" /
                                            "tiny-llama" / "config.json");
    ScheduleConfig c;
    c.tiling = {{"attention", {{"kv_block", 16}, {"kv_heads", 1}}}, {"gemv", {{"N_tile", 16}}}};
    p = lower(m, c, *find_target("h100"), 64);
    for (size_t i = 0; i < p.tasks.size(); ++i) {
      const uint64_t wait = 137 * i + (i * 7919) % 500, op = wait + (i * 31) % 300;
      s.push_back(at(wait, op, op + 100 + (i * 53) % 900));
    }
    // One layer-1 attention partial did not run.
    for (size_t i = 0; i < p.tasks.size(); ++i)
      if (p.tasks[i].label == "L1.attention[h1][kv2]") s[i] = {}, skipped = true;
  }
  Program p;
  std::vector<TaskStamps> s;
  bool skipped = false;
};

TEST_F(LoweredStepTrace, TraceEventsMatchTheTasks) {
  ASSERT_TRUE(skipped);
  const json trace = json::parse(eval::chrome_trace_json(p, s));
  std::set<int64_t> sms, named, used;
  size_t ran = 0;
  for (size_t i = 0; i < p.tasks.size(); ++i)
    if (s[i].op_end) ++ran, sms.insert(*p.tasks[i].sm);
  size_t tasks = 0;
  for (const json& e : trace["traceEvents"]) {
    if (e["name"] == "thread_name") named.insert(e["tid"].get<int64_t>());
    if (e["ph"] == "X" && e["cat"] == "task") {
      ++tasks;
      used.insert(e["tid"].get<int64_t>());
      const std::string label = e["args"]["label"];
      const auto parts = eval::parse_label(label);
      EXPECT_EQ(e["name"].get<std::string>(),
                parts.layer ? parts.stage + " L" + std::to_string(*parts.layer) : parts.stage);
    }
  }
  EXPECT_EQ(tasks, ran);
  EXPECT_EQ(named, sms);
  EXPECT_EQ(used, sms);
  EXPECT_GT(sms.size(), 1u);

  const std::string path =
      (std::filesystem::temp_directory_path() / "amk_step_trace_test.json").string();
  eval::write_chrome_trace(path, p, s);
  std::ifstream in(path);
  EXPECT_EQ(json::parse(in), trace);
  std::remove(path.c_str());
  EXPECT_THROW(eval::write_chrome_trace("/nonexistent/dir/t.json", p, s), std::runtime_error);
}

TEST_F(LoweredStepTrace, WriteStepTraceWritesTheFileAndReturnsTheTable) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "amk_step_trace_bench.json").string();
  const std::string text = eval::write_step_trace(path, p, s, 3000, 0);
  EXPECT_NE(text.find("written to " + path), std::string::npos) << text;
  EXPECT_NE(text.find(eval::format_layer_table(eval::layer_table(p, s, 3000, 0))),
            std::string::npos)
      << text;
  std::ifstream in(path);
  EXPECT_EQ(json::parse(in), json::parse(eval::chrome_trace_json(p, s)));
  std::remove(path.c_str());
  // No profile came back: nothing written, a line saying so.
  EXPECT_NE(eval::write_step_trace(path, p, {}, 3000).find("no trace written"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(LoweredStepTrace, LayerTableEqualsIndependentSums) {
  EXPECT_EQ(eval::layer_count(p), 2);
  const double ceiling = 3000;  // GB/s
  const eval::LayerTable t = eval::layer_table(p, s, ceiling);  // the middle layer: 1
  EXPECT_EQ(t.layer, 1);

  struct Expect {
    int64_t tasks = 0, bytes = 0;
    uint64_t begin = UINT64_MAX, end = 0;
  };
  std::map<std::string, Expect> want;
  const std::regex layer1(R"(^L1\.([A-Za-z0-9_]+)(\[.*\])?$)");
  uint64_t before_end = 0, step_begin = UINT64_MAX, step_end = 0;
  bool in_layer = false;
  for (size_t i = 0; i < p.tasks.size(); ++i) {
    std::smatch m;
    const bool mine = std::regex_match(p.tasks[i].label, m, layer1);
    in_layer = in_layer || mine;
    if (!s[i].op_end) continue;
    step_begin = std::min(step_begin, s[i].wait_begin);
    step_end = std::max(step_end, s[i].op_end);
    if (!in_layer) before_end = std::max(before_end, s[i].op_end);
    if (!mine) continue;
    Expect& e = want[m[1]];
    ++e.tasks;
    e.bytes += p.tasks[i].est_bytes;
    e.begin = std::min(e.begin, s[i].op_begin);
    e.end = std::max(e.end, s[i].op_end);
  }
  for (const char* stage : {"q_proj", "k_proj", "v_proj", "rope_q", "kv_append_k", "attention",
                            "attention_combine", "o_proj", "gate_proj", "up_proj", "down_proj",
                            "mlp_residual"})
    EXPECT_EQ(want.count(stage), 1u) << stage;
  ASSERT_EQ(t.levels.size(), want.size());

  int64_t total_tasks = 0, total_bytes = 0;
  uint64_t total_begin = UINT64_MAX, total_end = 0;
  double prev_end_us = double(before_end - step_begin) / 1e3;
  for (size_t k = 0; k < t.levels.size(); ++k) {
    const eval::LevelRow& r = t.levels[k];
    ASSERT_EQ(want.count(r.stage), 1u) << r.stage;
    const Expect& e = want[r.stage];
    EXPECT_EQ(r.tasks, e.tasks) << r.stage;
    EXPECT_EQ(r.bytes, e.bytes) << r.stage;
    const double span_ns = double(e.end - e.begin);
    EXPECT_DOUBLE_EQ(r.span_us, span_ns / 1e3) << r.stage;
    EXPECT_DOUBLE_EQ(r.start_us, double(e.begin - step_begin) / 1e3) << r.stage;
    EXPECT_NEAR(r.gbs, double(e.bytes) / span_ns, 1e-9) << r.stage;  // B/ns = GB/s
    EXPECT_NEAR(r.floor_us, double(e.bytes) / ceiling / 1e3, 1e-9) << r.stage;
    EXPECT_NEAR(r.pct_of_ceiling, 100 * double(e.bytes) / span_ns / ceiling, 1e-9) << r.stage;
    EXPECT_NEAR(r.exposed_us, span_ns / 1e3 - double(e.bytes) / ceiling / 1e3, 1e-9) << r.stage;
    const double end_us = double(e.end - step_begin) / 1e3;
    EXPECT_NEAR(r.from_prev_us, end_us - prev_end_us, 1e-9) << r.stage;
    prev_end_us = end_us;
    if (k > 0) {
      EXPECT_LE(t.levels[k - 1].start_us, r.start_us);
    }
    total_tasks += e.tasks;
    total_bytes += e.bytes;
    total_begin = std::min(total_begin, e.begin);
    total_end = std::max(total_end, e.end);
  }
  EXPECT_EQ(want["attention"].tasks, 7);  // 2 groups x 4 KV blocks, one not run
  EXPECT_EQ(t.total.tasks, total_tasks);
  EXPECT_EQ(t.total.bytes, total_bytes);
  EXPECT_DOUBLE_EQ(t.total.span_us, double(total_end - total_begin) / 1e3);
  EXPECT_NEAR(t.total.gbs, double(total_bytes) / double(total_end - total_begin), 1e-9);
  EXPECT_NEAR(t.total.from_prev_us, double(total_end - before_end) / 1e3, 1e-9);
  EXPECT_DOUBLE_EQ(t.step_span_us, double(step_end - step_begin) / 1e3);

  const eval::LayerTable first = eval::layer_table(p, s, ceiling, 0);
  EXPECT_EQ(first.layer, 0);
  EXPECT_EQ(first.levels.size(), want.size());
  EXPECT_THROW(eval::layer_table(p, s, ceiling, 2), std::invalid_argument);
}

// The dependency-level rows: the stages that wait on the same inputs (q/k/v; gate/up) merged,
// every stage in exactly one row, each row the sum of its stages' tasks and bytes and the span
// from the earliest begin to the latest end among them.
TEST_F(LoweredStepTrace, DependencyLevelsMergeTheStagesThatRunSideBySide) {
  const eval::LayerTable t = eval::layer_table(p, s, 3000);
  std::map<std::string, const eval::LevelRow*> stage;
  for (const eval::LevelRow& r : t.levels) stage[r.stage] = &r;
  ASSERT_LT(t.dependency_levels.size(), t.levels.size());
  std::map<std::string, int> seen;
  const auto parts_of = [](const std::string& name) {
    std::vector<std::string> parts;
    std::stringstream in(name);
    for (std::string part; std::getline(in, part, '+');) parts.push_back(part);
    return parts;
  };
  bool gate_up = false, qkv = false;
  int64_t tasks = 0;
  for (const eval::LevelRow& r : t.dependency_levels) {
    const std::vector<std::string> parts = parts_of(r.stage);
    const std::set<std::string> set(parts.begin(), parts.end());
    gate_up = gate_up || set == std::set<std::string>{"gate_proj", "up_proj"};
    qkv = qkv || set == std::set<std::string>{"q_proj", "k_proj", "v_proj"};
    int64_t want_tasks = 0, want_bytes = 0;
    double begin = 1e300, end = -1e300;
    for (const std::string& part : parts) {
      ASSERT_EQ(stage.count(part), 1u) << part;
      ++seen[part];
      want_tasks += stage[part]->tasks;
      want_bytes += stage[part]->bytes;
      begin = std::min(begin, stage[part]->start_us);
      end = std::max(end, stage[part]->end_us);
    }
    EXPECT_EQ(r.tasks, want_tasks) << r.stage;
    EXPECT_EQ(r.bytes, want_bytes) << r.stage;
    EXPECT_NEAR(r.span_us, end - begin, 1e-9) << r.stage;
    EXPECT_NEAR(r.gbs, double(want_bytes) / ((end - begin) * 1e3), 1e-9) << r.stage;
    tasks += r.tasks;
  }
  EXPECT_TRUE(gate_up);
  EXPECT_TRUE(qkv);
  EXPECT_EQ(tasks, t.total.tasks);
  EXPECT_EQ(seen.size(), t.levels.size());
  for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << name;
  const std::string text = eval::format_layer_table(t);
  EXPECT_TRUE(text.find("gate_proj+up_proj") != std::string::npos ||
              text.find("up_proj+gate_proj") != std::string::npos)
      << text;
}

}  // namespace
