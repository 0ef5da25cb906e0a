#include "cli/table.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace amk::cli {

namespace {

// Display width: count UTF-8 code points, not bytes ("µs" is two columns wide in bytes only).
size_t display_width(const std::string& s) {
  return static_cast<size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

}  // namespace

Table::Table(std::vector<std::string> header, std::vector<Align> align)
    : header_(std::move(header)), align_(std::move(align)) {
  align_.resize(header_.size(), Align::Left);
}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(header_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::render() const {
  std::vector<size_t> width(header_.size());
  for (size_t c = 0; c < header_.size(); ++c) {
    width[c] = display_width(header_[c]);
    for (const auto& row : rows_) width[c] = std::max(width[c], display_width(row[c]));
  }
  std::string out;
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (size_t c = 0; c < cells.size(); ++c) {
      const bool last = c + 1 == cells.size();
      const std::string pad(width[c] - display_width(cells[c]), ' ');
      if (align_[c] == Align::Right)
        text += pad + cells[c];
      else
        text += last ? cells[c] : cells[c] + pad;
      if (!last) text += "  ";
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
  };
  line(header_);
  std::vector<std::string> rule;
  for (size_t w : width) rule.emplace_back(w, '-');
  line(rule);
  for (const auto& row : rows_) line(row);
  return out;
}

std::string format_bytes(long long bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t unit = 0;
  while (std::abs(v) >= 1024.0 && unit + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  const double rounded = std::round(v * 10.0) / 10.0;
  return rounded == std::floor(rounded) ? fmt::format("{:.0f} {}", rounded, kUnits[unit])
                                        : fmt::format("{:.1f} {}", rounded, kUnits[unit]);
}

}  // namespace amk::cli
