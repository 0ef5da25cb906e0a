// Generators of realistic programs for tests and benchmarks: tiled GEMVs joined by all-join
// counters, the shape the lowering emits.
#pragma once

#include <cstdint>
#include <string>

#include "amk/ir.h"

namespace amk::testing {

// A decoder-like chain of `layers` stages, each a tiled GEMV of `tiles` tasks writing one buffer
// under one shared counter, joined by the next stage's all-join wait; ~layers*tiles tasks.
Program make_tiled_chain(int64_t layers, int64_t tiles);

// A Llama-style decode step, per layer:
//   rmsnorm -> q/k/v GEMV tiles (one shared counter) -> all-join -> rope(q), rope(k)
//   -> kv_append(k), kv_append(v) -> split-KV attention tiles -> attention_combine
//   -> o_proj tiles -> add (reads the residual from the previous layer: several stages back)
//   -> rmsnorm -> gate/up tiles (one shared counter) -> silu_mul -> down tiles
//   -> add (reads the mid-layer residual) ...
// then a final rmsnorm, lm_head tiles and an argmax into the IO_OUTPUT token. Every stage waits
// on the whole previous stage (an all-join); reads two or more stages back are ordered only
// transitively. Tasks get round-robin SMs and activations a stage-ordered page allocation.
struct DecoderGenOptions {
  int64_t layers = 2;
  int64_t hidden = 4096;
  int64_t ffn = 14336;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 8;
  int64_t head_dim = 128;
  int64_t gemv_tile = 64;   // N_tile of the per-layer GEMVs
  int64_t attn_splits = 8;  // split-KV attention tiles per layer (merged by one combine)
  int64_t vocab = 128256;
  int64_t lm_head_tile = 2048;
  int64_t max_seq = 4096;
  int64_t pos = 17;
  int64_t num_sms = 132;        // round-robin SM assignment; 0 = leave tasks unassigned
  bool pages = true;            // emit a page allocation for the activations
  std::string target = "h100";  // a builtin target name ("" = none)
};

Program make_decoder(const DecoderGenOptions& options);
// Tasks in one decoder layer, and the layer count giving about `tasks` tasks in all.
int64_t decoder_tasks_per_layer(const DecoderGenOptions& options);
DecoderGenOptions decoder_options_for_tasks(int64_t tasks, DecoderGenOptions base = {});
// A tiny decoder (hidden 64, 4/2 heads, 16-wide tiles, 2-way split-KV) for fast tests.
DecoderGenOptions small_decoder_options(int64_t layers);

}  // namespace amk::testing
