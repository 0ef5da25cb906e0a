// A plain-text table for terminal output: columns padded to their widest cell.
#pragma once

#include <string>
#include <vector>

namespace amk::cli {

class Table {
 public:
  enum class Align { Left, Right };
  explicit Table(std::vector<std::string> header, std::vector<Align> align = {});
  void add_row(std::vector<std::string> cells);
  // Header, a rule of dashes, then the rows; the last column is never padded.
  std::string render() const;

 private:
  std::vector<std::string> header_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

// 233472 -> "228 KiB", 52428800 -> "50 MiB" (binary units, at most one decimal).
std::string format_bytes(long long bytes);

}  // namespace amk::cli
