// The flywheel's memory (PROGRAM.md §0.4, §8B): corpus.jsonl holds every kept config of every
// campaign, keyed by the model's shape and the GPU, and a k-nearest-neighbour prior over
// model-shape features turns it into advice for a new campaign:
//   - warm start: the best configs of the nearest shapes, moved onto the new model (each knob a
//     config changed from its own default is changed the same way: tiles by the same factor);
//   - ranking: a candidate scores by how much its changes agree with the changes that paid off
//     on near shapes, weighted by the speed-up they gave and by closeness.
// Advisory only: every suggestion still goes through the full evaluation.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "amk/ir.h"
#include "amk/model_config.h"

namespace amk::search {

struct ModelShape {
  int64_t hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0,
          vocab = 0;
  static ModelShape of(const ModelConfig& m);
  bool operator==(const ModelShape&) const = default;
};

// Euclidean distance over log2 of the seven features: a model twice as wide is 1 away.
double shape_distance(const ModelShape& a, const ModelShape& b);

// One knob a config sets differently from its shape's default: a tile as a factor of the
// default's width, anything else as its value's text.
struct KnobChange {
  std::string knob;
  std::string value;  // "2", "graph_color", "on"/"off", "absent"; tiles: "x0.5"
  bool operator==(const KnobChange&) const = default;
};
std::vector<KnobChange> changes_from_default(const ScheduleConfig& config,
                                             const ScheduleConfig& defaults);
// `defaults` with `changes` applied (tile factors scaled onto this default's widths).
ScheduleConfig apply_changes(const ScheduleConfig& defaults, const std::vector<KnobChange>& changes);

struct CorpusEntry {
  std::string model, gpu, tag, schedule_id, latency_kind;
  ModelShape shape;
  std::string config_json;  // config_to_json of the kept config
  std::vector<KnobChange> changes;
  double latency_us = 0, pct_of_roofline = 0;
  double speedup = 1;  // the campaign's baseline latency / this latency
  int64_t experiment = 0;
};

std::string corpus_entry_to_json(const CorpusEntry& e);  // one line
// Lines that do not parse are skipped (a corpus grows from many runs; one bad line must not
// lose the rest); a missing file is an empty corpus.
std::vector<CorpusEntry> load_corpus(const std::filesystem::path& path);
// Appends one line; false when the file cannot be written.
bool append_corpus(const std::filesystem::path& path, const CorpusEntry& e);

class SchedulePrior {
 public:
  explicit SchedulePrior(std::vector<CorpusEntry> entries, int k = 8);

  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }

  // The k entries nearest to (shape, gpu); another GPU counts as 3 units of distance.
  std::vector<const CorpusEntry*> neighbours(const ModelShape& shape, const std::string& gpu) const;
  // Warm-start configs for a new campaign, best first: each neighbour's changes applied to
  // `defaults`, ordered by speed-up / (1 + distance), duplicates and the default itself removed.
  std::vector<ScheduleConfig> warm_start(const ModelShape& shape, const std::string& gpu,
                                         const ScheduleConfig& defaults, size_t limit = 4) const;
  // The prior's score of `config` (higher is more promising): sum over neighbours of
  // weight * log(speed-up) * Jaccard(config's changes, neighbour's changes).
  double score(const ScheduleConfig& config, const ScheduleConfig& defaults,
               const ModelShape& shape, const std::string& gpu) const;

 private:
  std::vector<CorpusEntry> entries_;
  int k_;
};

}  // namespace amk::search
