// Loading the timing simulator's calibration cases (include/amk/sim_cases.h).
#include "amk/sim_cases.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "amk/json.h"
#include "amk/lowering.h"
#include "amk/model_config.h"
#include "amk/model_presets.h"

namespace amk::sim {

namespace {

namespace fs = std::filesystem;

// What amk bench uses when nothing else is said: 256 tokens in launches of 64 after one warm
// launch, in a 512-token context.
constexpr int64_t kBenchContext = 512;
constexpr int64_t kBenchMeanPosition = 192;
constexpr int64_t kBenchProfilePosition = 327;

std::string read_file(const fs::path& path, const std::string& where) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw std::invalid_argument(fmt::format("{}: '{}' is not a readable file", where, path.string()));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  if (!in && !in.eof())
    throw std::invalid_argument(fmt::format("{}: cannot read '{}'", where, path.string()));
  return s.str();
}

struct ManifestLine {
  size_t number = 0;
  std::vector<std::string> cells;
};

std::vector<ManifestLine> read_manifest(const std::string& path) {
  const std::string text = read_file(path, "manifest");
  std::vector<ManifestLine> lines;
  std::istringstream in(text);
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    ManifestLine m{n, {}};
    for (std::string w; words >> w;) m.cells.push_back(w);
    if (!m.cells.empty()) lines.push_back(std::move(m));
  }
  return lines;
}

fs::path resolve(const fs::path& base, const std::string& p) {
  const fs::path path(p);
  return path.is_absolute() ? path : base / path;
}

struct BenchReport {
  double us = 0, ceiling_gbs = 0;
  int64_t context = kBenchContext, mean_position = kBenchMeanPosition,
          profile_position = kBenchProfilePosition;
};

BenchReport read_bench(const fs::path& base, const std::string& cell, const std::string& where) {
  BenchReport b;
  if (cell == "-") return b;
  try {
    size_t used = 0;
    const double v = std::stod(cell, &used);
    if (used == cell.size()) {
      if (!(v > 0) || !std::isfinite(v))
        throw std::invalid_argument(fmt::format("{}: µs/token {} must be > 0", where, cell));
      b.us = v;
      return b;
    }
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).find("µs/token") != std::string::npos) throw;
  } catch (const std::out_of_range&) {
  }
  const fs::path path = resolve(base, cell);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path, where));
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(fmt::format("{}: '{}' is not a bench report: {}", where, cell, e.what()));
  }
  auto number = [&](const char* key) -> double {
    if (!j.is_object() || !j.contains(key) || !j[key].is_number())
      throw std::invalid_argument(
          fmt::format("{}: bench report '{}' has no number \"{}\"", where, cell, key));
    return j[key].get<double>();
  };
  if (j.is_object() && j.contains("check") && j["check"] != "PASS")
    throw std::invalid_argument(fmt::format("{}: bench report '{}' did not PASS its check", where, cell));
  b.us = number("median_us_per_token");
  if (!(b.us > 0)) throw std::invalid_argument(fmt::format("{}: '{}' has no time", where, cell));
  if (j.contains("ceiling_gbs") && j["ceiling_gbs"].is_number()) b.ceiling_gbs = j["ceiling_gbs"].get<double>();
  b.context = int64_t(number("max_context"));
  if (j.contains("mean_position") && j["mean_position"].is_number())
    b.mean_position = j["mean_position"].get<int64_t>();
  // The profiled launch follows the timed ones: min(64, 8) steps from where they ended.
  if (j.contains("warmup_launches") && j.contains("tokens") && j.contains("tokens_per_launch")) {
    const int64_t tpl = std::max<int64_t>(j["tokens_per_launch"].get<int64_t>(), 1);
    const int64_t timed = (j["tokens"].get<int64_t>() + tpl - 1) / tpl;
    b.profile_position =
        (j["warmup_launches"].get<int64_t>() + timed) * tpl + std::min<int64_t>(tpl, 8) - 1;
  }
  return b;
}

ScheduleConfig read_config(const fs::path& path, const std::string& where) {
  const std::string text = read_file(path, where);
  const LoadResult r = program_from_json("{\"config\": " + text + "\n}");
  if (!r) throw std::invalid_argument(fmt::format("{}: config '{}': {}", where, path.string(), r.error));
  return r.program->config.value_or(ScheduleConfig{});
}

Program program_for(const fs::path& base, const ManifestLine& line, const GpuTarget& target,
                    int64_t context, const std::string& where) {
  const std::string& model = line.cells[2];
  const std::string& config = line.cells[3];
  const auto& presets = model_preset_names();
  ModelConfig m;
  std::optional<DType> dtype = DType::BF16;  // presets are generated in BF16
  if (std::find(presets.begin(), presets.end(), model) != presets.end()) {
    m = parse_model_config(model_preset_config(model, "bfloat16"), model);
  } else {
    const fs::path path = resolve(base, model);
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      m = load_model_config(path / "config.json");
      dtype = std::nullopt;  // the config's torch_dtype
    } else if (fs::is_regular_file(path, ec)) {
      if (config != "-")
        throw std::invalid_argument(
            fmt::format("{}: MODEL '{}' is a program: its CONFIG must be \"-\"", where, model));
      const LoadResult r = load_program(path);
      if (!r) throw std::invalid_argument(fmt::format("{}: program '{}': {}", where, model, r.error));
      return *r.program;
    } else {
      std::string names;
      for (auto n : presets) names += (names.empty() ? "" : ", ") + std::string(n);
      throw std::invalid_argument(fmt::format(
          "{}: MODEL '{}' is neither a preset ({}) nor a checkpoint folder or program file",
          where, model, names));
    }
  }
  const ScheduleConfig schedule = config == "-" ? default_schedule_config(m, target, context)
                                                : read_config(resolve(base, config), where);
  try {
    return lower(m, schedule, target, context, dtype);
  } catch (const std::exception& e) {
    throw std::invalid_argument(fmt::format("{}: cannot lower '{}' with config '{}': {}", where,
                                            model, config, e.what()));
  }
}

}  // namespace

std::vector<SimCase> load_cases(const std::string& manifest_path, const GpuTarget& target) {
  const fs::path base = fs::path(manifest_path).parent_path();
  std::vector<SimCase> cases;
  for (const ManifestLine& line : read_manifest(manifest_path)) {
    const std::string where = fmt::format("{}:{}", manifest_path, line.number);
    if (line.cells.size() < 5 || line.cells.size() > 6)
      throw std::invalid_argument(fmt::format(
          "{}: {} fields, expected GROUP NAME MODEL CONFIG BENCH [PROFILE]", where, line.cells.size()));
    const BenchReport bench = read_bench(base, line.cells[4], where);
    SimCase c;
    c.group = line.cells[0];
    c.name = line.cells[1];
    c.target = target;
    c.program = program_for(base, line, target, bench.context, where);
    c.position = bench.mean_position;
    c.measured_us = bench.us;
    if (line.cells.size() == 6 && line.cells[5] != "-") {
      const fs::path profile = resolve(base, line.cells[5]);
      MeasuredProfile m = read_profile_tsv_file(profile.string(), c.program, where);
      m.position = bench.profile_position;
      c.profiles.push_back(std::move(m));
    }
    if (c.measured_us <= 0 && c.profiles.empty())
      throw std::invalid_argument(fmt::format("{}: neither a bench report nor a profile", where));
    cases.push_back(std::move(c));
  }
  if (cases.empty())
    throw std::invalid_argument(fmt::format("manifest '{}' names no case", manifest_path));
  return cases;
}

double measured_ceiling_gbs(const std::string& manifest_path) {
  const fs::path base = fs::path(manifest_path).parent_path();
  std::vector<double> ceilings;
  for (const ManifestLine& line : read_manifest(manifest_path)) {
    if (line.cells.size() < 5) continue;
    const BenchReport b = read_bench(base, line.cells[4], manifest_path);
    if (b.ceiling_gbs > 0) ceilings.push_back(b.ceiling_gbs);
  }
  if (ceilings.empty()) return 0;
  std::sort(ceilings.begin(), ceilings.end());
  return ceilings[ceilings.size() / 2];
}

MeasuredProfile read_profile_tsv_file(const std::string& path, const Program& program,
                                      const std::string& where) {
  return read_profile_tsv(read_file(path, where), program, path);
}

}  // namespace amk::sim
