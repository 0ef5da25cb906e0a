#include "amk/results_tsv.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include "amk/verdict.h"

namespace amk::eval {

namespace {

std::string no_tabs(std::string s) {
  std::replace(s.begin(), s.end(), '\t', ' ');
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    out.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return out;
    start = tab + 1;
  }
}

std::optional<double> number_or_blank(const std::string& s, const std::filesystem::path& path,
                                      size_t line) {
  if (s.empty()) return std::nullopt;
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  throw std::runtime_error(fmt::format("{}:{}: '{}' is not a number", path.string(), line, s));
}

}  // namespace

std::string format_results_row(const ResultsRow& row) {
  // Never a latency without a PASS (PROGRAM.md §7): whatever the caller set, it is dropped here.
  const bool pass = row.correctness == name_of(Correctness::PASS);
  return fmt::format("{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}", row.experiment,
                     no_tabs(row.tag), row.loop, no_tabs(row.model), no_tabs(row.gpu),
                     no_tabs(row.regime), no_tabs(row.kept), no_tabs(row.correctness),
                     pass && row.latency_us ? fmt::format("{:.2f}", *row.latency_us) : "",
                     pass && row.pct_of_roofline ? fmt::format("{:.1f}", *row.pct_of_roofline) : "",
                     no_tabs(row.schedule_id), no_tabs(row.description));
}

std::optional<int64_t> append_results_row(const std::filesystem::path& path, ResultsRow row,
                                          std::string* error) {
  const auto fail = [&](std::string why) -> std::optional<int64_t> {
    if (error) *error = std::move(why);
    return std::nullopt;
  };
  int64_t rows = 0, last_id = 0;
  bool has_header = false, empty = true;
  {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      if (empty && line != kResultsHeader)
        return fail(fmt::format("'{}' does not start with the results.tsv header", path.string()));
      empty = false;
      if (line == kResultsHeader) {
        has_header = true;
        continue;
      }
      ++rows;
      const auto fields = split_tabs(line);
      try {
        last_id = std::max<int64_t>(last_id, std::stoll(fields.front()));
      } catch (const std::exception&) {
      }
    }
  }
  if (row.experiment == 0) row.experiment = std::max(rows, last_id) + 1;
  std::ofstream out(path, std::ios::app);
  if (!has_header) out << kResultsHeader << "\n";
  out << format_results_row(row) << "\n";
  out.flush();
  if (!out) return fail(fmt::format("cannot append to '{}'", path.string()));
  return row.experiment;
}

std::vector<ResultsRow> read_results(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot read '{}'", path.string()));
  std::vector<ResultsRow> rows;
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    if (n == 1) {
      if (line != kResultsHeader)
        throw std::runtime_error(
            fmt::format("{}:1: not the results.tsv header (PROGRAM.md §6)", path.string()));
      continue;
    }
    const auto f = split_tabs(line);
    if (f.size() != 12)
      throw std::runtime_error(
          fmt::format("{}:{}: {} fields, a row has 12", path.string(), n, f.size()));
    ResultsRow r;
    try {
      r.experiment = std::stoll(f[0]);
      r.loop = std::stoi(f[2]);
    } catch (const std::exception&) {
      throw std::runtime_error(fmt::format("{}:{}: bad experiment or loop", path.string(), n));
    }
    r.tag = f[1];
    r.model = f[3];
    r.gpu = f[4];
    r.regime = f[5];
    r.kept = f[6];
    r.correctness = f[7];
    r.latency_us = number_or_blank(f[8], path, n);
    r.pct_of_roofline = number_or_blank(f[9], path, n);
    r.schedule_id = f[10];
    r.description = f[11];
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace amk::eval
