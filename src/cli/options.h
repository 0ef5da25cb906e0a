// Checks for numeric options that CLI11's own validators let through: every comparison with NaN
// is false, so CLI::PositiveNumber and CLI::Range accept "nan"; and a seed is a non-negative
// integer. A failed check is a usage error (exit 2) whose message names the option.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <system_error>

#include <CLI/CLI.hpp>

namespace amk::cli {

// A finite real number >= 0 (`positive`: > 0).
inline CLI::Validator finite_number(bool positive) {
  return CLI::Validator(
      [positive](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not a number";
        if (!std::isfinite(v)) return "must be a finite number, got '" + text + "'";
        if (positive ? !(v > 0) : !(v >= 0))
          return std::string("must be ") + (positive ? "positive" : "zero or positive") +
                 ", got '" + text + "'";
        return {};
      },
      positive ? "FINITE > 0" : "FINITE >= 0");
}

// A seed: a decimal integer in [0, 2^64). CLI11 would wrap "-1" into 2^64 - 1.
inline CLI::Validator seed_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
          return "a seed is a non-negative integer, got '" + text + "'";
        uint64_t v = 0;  // CLI11 itself saturates an overflow to 2^64 - 1
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || end != text.data() + text.size())
          return "a seed is below 2^64, got '" + text + "'";
        return {};
      },
      "UINT");
}

// A seed for a run that did not name one: random, and printed by the caller so that the run can
// be repeated with --seed.
inline uint64_t random_seed() {
  return std::random_device{}();  // 32 bits: short enough to retype
}

}  // namespace amk::cli
