#include "amk/schedule_prior.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "amk/json.h"
#include "amk/knob_space.h"
#include "amk/schedule_config_io.h"
#include "amk/schedule_proposer.h"

namespace amk::search {

namespace {

bool is_scaled_tile(const std::string& knob) {
  return knob.starts_with("tiling.") && knob.ends_with(".N_tile");
}

double lg(int64_t x) { return std::log2(double(std::max<int64_t>(x, 1))); }

void set_knob_text(ScheduleConfig& c, const ScheduleConfig& defaults, const KnobChange& ch) {
  if (ch.knob.starts_with("fusion_grouping.")) {
    const std::string g = ch.knob.substr(16);
    std::erase_if(c.fusion_grouping,
                  [&](const std::vector<std::string>& x) { return spell_group(x) == g; });
    if (ch.value == "on") c.fusion_grouping.push_back(parse_group(g));
    // As the proposer does: q/k/v per head group goes with the fused attention.
    else if (g == "rope+attention") set_integer_knob(c, "tiling.attention.qkv_by_group", std::nullopt);
    return;
  }
  const KnobSpec& k = knob_spec(ch.knob);
  if (k.kind == KnobKind::Choice) {
    if (ch.knob == "page_allocation") c.page_allocation = ch.value;
    else c.sm_assignment = ch.value;
    return;
  }
  if (ch.value == "absent") {
    set_integer_knob(c, ch.knob, std::nullopt);
    return;
  }
  if (ch.value.starts_with("x")) {
    const double factor = std::stod(ch.value.substr(1));
    const int64_t base = integer_knob(defaults, ch.knob).value_or(256);
    int64_t v = std::max<int64_t>(1, int64_t(std::llround(double(base) * factor)));
    if (ch.knob == "tiling.sample_argmax.N_tile") v = std::max<int64_t>(4, (v + 3) / 4 * 4);
    set_integer_knob(c, ch.knob, v);
    return;
  }
  set_integer_knob(c, ch.knob, std::stoll(ch.value));
}

}  // namespace

ModelShape ModelShape::of(const ModelConfig& m) {
  return {m.hidden_size,       m.intermediate_size, m.num_hidden_layers, m.num_attention_heads,
          m.num_key_value_heads, m.head_dim,        m.vocab_size};
}

double shape_distance(const ModelShape& a, const ModelShape& b) {
  const double d[] = {lg(a.hidden) - lg(b.hidden),     lg(a.intermediate) - lg(b.intermediate),
                      lg(a.layers) - lg(b.layers),     lg(a.heads) - lg(b.heads),
                      lg(a.kv_heads) - lg(b.kv_heads), lg(a.head_dim) - lg(b.head_dim),
                      lg(a.vocab) - lg(b.vocab)};
  double s = 0;
  for (double x : d) s += x * x;
  return std::sqrt(s);
}

std::vector<KnobChange> changes_from_default(const ScheduleConfig& config,
                                             const ScheduleConfig& defaults) {
  std::vector<KnobChange> out;
  for (const std::string& knob : searched_knobs()) {
    const std::string ours = knob_value_text(config, knob), theirs = knob_value_text(defaults, knob);
    if (ours == theirs) continue;
    if (is_scaled_tile(knob) && ours != "absent" && theirs != "absent") {
      const double f = double(*integer_knob(config, knob)) / double(*integer_knob(defaults, knob));
      out.push_back({knob, fmt::format("x{:.4g}", f)});
    } else {
      out.push_back({knob, ours});
    }
  }
  return out;
}

ScheduleConfig apply_changes(const ScheduleConfig& defaults, const std::vector<KnobChange>& changes) {
  ScheduleConfig c = defaults;
  for (const KnobChange& ch : changes) {
    try {
      set_knob_text(c, defaults, ch);
    } catch (const std::exception&) {
      // A change this build does not know (a corpus from another version) is left out.
    }
  }
  return c;
}

std::string corpus_entry_to_json(const CorpusEntry& e) {
  nlohmann::ordered_json j;
  j["model"] = e.model;
  j["gpu"] = e.gpu;
  j["shape"] = {{"hidden", e.shape.hidden},       {"intermediate", e.shape.intermediate},
                {"layers", e.shape.layers},       {"heads", e.shape.heads},
                {"kv_heads", e.shape.kv_heads},   {"head_dim", e.shape.head_dim},
                {"vocab", e.shape.vocab}};
  j["schedule_id"] = e.schedule_id;
  j["latency_us"] = e.latency_us;
  j["latency_kind"] = e.latency_kind;
  j["pct_of_roofline"] = e.pct_of_roofline;
  j["speedup"] = e.speedup;
  j["tag"] = e.tag;
  j["experiment"] = e.experiment;
  nlohmann::ordered_json ch = nlohmann::ordered_json::array();
  for (const auto& c : e.changes) ch.push_back({{"knob", c.knob}, {"value", c.value}});
  j["changes"] = ch;
  j["config"] = nlohmann::ordered_json::parse(e.config_json);
  return j.dump();
}

std::vector<CorpusEntry> load_corpus(const std::filesystem::path& path) {
  std::vector<CorpusEntry> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      const nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);  // keeps config order
      CorpusEntry e;
      e.model = j.at("model").get<std::string>();
      e.gpu = j.at("gpu").get<std::string>();
      const auto& s = j.at("shape");
      e.shape = {s.at("hidden").get<int64_t>(),   s.at("intermediate").get<int64_t>(),
                 s.at("layers").get<int64_t>(),   s.at("heads").get<int64_t>(),
                 s.at("kv_heads").get<int64_t>(), s.at("head_dim").get<int64_t>(),
                 s.at("vocab").get<int64_t>()};
      e.schedule_id = j.value("schedule_id", "");
      e.latency_us = j.value("latency_us", 0.0);
      e.latency_kind = j.value("latency_kind", "");
      e.pct_of_roofline = j.value("pct_of_roofline", 0.0);
      e.speedup = j.value("speedup", 1.0);
      e.tag = j.value("tag", "");
      e.experiment = j.value("experiment", int64_t{0});
      for (const auto& c : j.value("changes", nlohmann::ordered_json::array()))
        e.changes.push_back({c.at("knob").get<std::string>(), c.at("value").get<std::string>()});
      e.config_json = j.at("config").dump();
      out.push_back(std::move(e));
    } catch (const std::exception&) {
      // Skipped: see the header.
    }
  }
  return out;
}

bool append_corpus(const std::filesystem::path& path, const CorpusEntry& e) {
  std::ofstream out(path, std::ios::app);
  out << corpus_entry_to_json(e) << "\n";
  out.flush();
  return bool(out);
}

SchedulePrior::SchedulePrior(std::vector<CorpusEntry> entries, int k)
    : entries_(std::move(entries)), k_(std::max(k, 1)) {}

std::vector<const CorpusEntry*> SchedulePrior::neighbours(const ModelShape& shape,
                                                          const std::string& gpu) const {
  std::vector<std::pair<double, const CorpusEntry*>> d;
  for (const CorpusEntry& e : entries_)
    d.push_back({shape_distance(shape, e.shape) + (e.gpu == gpu ? 0.0 : 3.0), &e});
  std::stable_sort(d.begin(), d.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<const CorpusEntry*> out;
  for (size_t i = 0; i < d.size() && int(i) < k_; ++i) out.push_back(d[i].second);
  return out;
}

std::vector<ScheduleConfig> SchedulePrior::warm_start(const ModelShape& shape, const std::string& gpu,
                                                      const ScheduleConfig& defaults,
                                                      size_t limit) const {
  std::vector<std::pair<double, ScheduleConfig>> scored;
  for (const CorpusEntry* e : neighbours(shape, gpu)) {
    const double dist = shape_distance(shape, e->shape) + (e->gpu == gpu ? 0.0 : 3.0);
    scored.push_back({e->speedup / (1.0 + dist), apply_changes(defaults, e->changes)});
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<ScheduleConfig> out;
  std::set<std::string> seen{schedule_id(defaults)};
  for (auto& [score, c] : scored) {
    if (out.size() >= limit) break;
    if (!seen.insert(schedule_id(c)).second) continue;
    out.push_back(std::move(c));
  }
  return out;
}

double SchedulePrior::score(const ScheduleConfig& config, const ScheduleConfig& defaults,
                            const ModelShape& shape, const std::string& gpu) const {
  const std::vector<KnobChange> ours = changes_from_default(config, defaults);
  if (ours.empty()) return 0;
  double total = 0;
  for (const CorpusEntry* e : neighbours(shape, gpu)) {
    const double dist = shape_distance(shape, e->shape) + (e->gpu == gpu ? 0.0 : 3.0);
    size_t common = 0;
    for (const KnobChange& c : ours)
      if (std::find(e->changes.begin(), e->changes.end(), c) != e->changes.end()) ++common;
    const size_t uni = ours.size() + e->changes.size() - common;
    if (uni == 0 || common == 0) continue;
    total += std::log(std::max(e->speedup, 1e-9)) * double(common) / double(uni) / (1.0 + dist);
  }
  return total;
}

}  // namespace amk::search
