// JSON parsing for files the importer does not trust (safetensors headers, config.json, shard
// indexes): nesting is bounded before any DOM exists and duplicate keys are refused, because
// nlohmann silently keeps the last duplicate and recurses on nesting when it builds values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace amk::model_detail {

// Every legitimate file of ours nests a handful of levels; 64 leaves room for unusual configs
// (quantization_config, per-layer rope tables) while keeping recursion shallow.
inline constexpr int kMaxJsonDepth = 64;

// Throws std::runtime_error with a message that says what is wrong (callers add the file name).
nlohmann::json parse_untrusted_json(std::string_view text, int max_depth = kMaxJsonDepth);

// A whole file as text, from a regular file only. A config or shard index is kilobytes to a
// megabyte (an index names each tensor once); the cap, checked against the size before reading,
// stops a wrong path (a weights file) from being slurped, and FIFOs and devices are refused.
// Throws std::runtime_error (callers add the file name).
inline constexpr uint64_t kMaxJsonFileBytes = 16'000'000;
std::string read_text_file(const std::filesystem::path& path, uint64_t max_bytes = kMaxJsonFileBytes);

// 'name' in quotes, with control and non-ASCII bytes escaped so that a hostile name cannot
// garble a terminal or a log line.
std::string quote_name(std::string_view s);

// The JSON type as a word ("string", "array", ...) for "expected X, got Y" messages.
std::string_view json_type_word(const nlohmann::json& j);

}  // namespace amk::model_detail
