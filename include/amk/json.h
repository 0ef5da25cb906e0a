// The on-disk JSON format (IR_SPEC §6), version 0.11.0 (0.2.0 + opcodes 23-24 and the
// ScheduleConfig keys stream_chunk_bytes / stream_bytes_in_flight (0.3.0) and
// stream_prefetch_bytes_in_flight (0.4.0), each written only when set; 0.5.0: SAMPLE_ARGMAX's
// sampling variant, flags bit 1 with up to four inputs; 0.6.0: ATTENTION_COMBINE's partial output,
// flags bit 1, for two-level combine trees; 0.7.0: opcodes 25-26, the gated-unit tiles
// GEMV_GLU_TILE and RMSNORM_GEMV_GLU_TILE; 0.8.0: KV caches [n_kv_heads, max_seq, head_dim],
// each head's history contiguous; an older file's [max_seq, n_kv_heads, head_dim] caches are
// read with their first two dimensions swapped, with a warning; 0.9.0: opcode 27,
// COMBINE_GEMV_ADD_TILE, and an attention partial's stack-of-partials output, param m_off; 0.10.0:
// opcode 28, RMSNORM_GEMV_GLU_DOWN_TILE, whose output accumulates, and a second output of
// GEMV_ADD_TILE / COMBINE_GEMV_ADD_TILE; 0.11.0: ATTENTION_TILE / ROPE_KV_ATTENTION_TILE's strided
// window, param kv_stride, amk/kv_window.h).
// Loading trusts nothing: every error names the JSON path ("$.tasks[3].waits[0].threshold") and
// nothing in the input can crash the loader or exhaust its stack.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "amk/ir.h"

namespace amk {

struct LoadResult {
  std::optional<Program> program;    // set on success
  std::string error;                 // set on failure: what and where
  std::vector<std::string> warnings; // forward-compatibility notes (dropped unknown fields, ...)
  explicit operator bool() const { return program.has_value(); }
};

LoadResult program_from_json(std::string_view text);
LoadResult load_program(const std::filesystem::path& path);

// Stable, indent-2 output; program_to_json(program_from_json(program_to_json(p))) is
// byte-identical to program_to_json(p). No trailing newline (save() adds one).
std::string program_to_json(const Program& program);
// Writes program_to_json + "\n"; returns false and sets *error on an I/O failure.
bool save_program(const Program& program, const std::filesystem::path& path, std::string* error);

// The pieces, for the commands' --json output and the config file of later issues.
std::string target_to_json(const GpuTarget& target);
std::string config_to_json(const ScheduleConfig& config);

}  // namespace amk
