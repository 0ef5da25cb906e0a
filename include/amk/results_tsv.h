// results.tsv, PROGRAM.md §6: the flywheel's plain-text log, one row per experiment, with the
// exact twelve-column header. The only writer of the file in AMK (bench, loop and autoresearch
// all append through it), so "never a latency without a PASS" is enforced in one place.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace amk::eval {

// The header, exactly as §6 spells it (tab-separated, no trailing tab).
inline constexpr std::string_view kResultsHeader =
    "experiment\ttag\tloop\tmodel\tgpu\tregime\tkept\tcorrectness\tlatency_us\t"
    "pct_of_roofline\tschedule_or_kernel_id\tdescription";

struct ResultsRow {
  int64_t experiment = 0;  // 0: the next id after the rows already in the file
  std::string tag;
  int loop = 2;
  std::string model, gpu;
  std::string regime = "single-stream";
  std::string kept = "keep";         // keep | revert
  std::string correctness;           // PASS | FAIL | REJECTED | TIMEOUT | CRASH
  std::optional<double> latency_us;  // written only beside PASS
  std::optional<double> pct_of_roofline;
  std::string schedule_id;
  std::string description;           // tabs and newlines become spaces
};

// The row as one line (no newline): latency and pct_of_roofline blank unless PASS.
std::string format_results_row(const ResultsRow& row);

// Appends `row`, writing the header first when the file is new or empty. A file whose first
// line is not the header is refused (false, *error says why) rather than mixed with. Returns the
// experiment id written.
std::optional<int64_t> append_results_row(const std::filesystem::path& path, ResultsRow row,
                                          std::string* error = nullptr);

// The rows of a results.tsv (the header checked); throws std::runtime_error naming the line of
// a row that does not have twelve fields or a number that is not one.
std::vector<ResultsRow> read_results(const std::filesystem::path& path);

}  // namespace amk::eval
