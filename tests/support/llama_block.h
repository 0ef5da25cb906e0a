// A hand-built one-layer Llama decoder step as an IR program (embed -> RMSNorm -> q/k/v tiled
// GEMVs -> reshape to heads (COPY) -> RoPE -> KV append -> GQA attention -> o_proj -> residual -> RMSNorm -> gate/up ->
// SiLU-mul -> down -> residual -> final norm -> lm_head tiles -> argmax). One program is one
// decode position: `pos` is baked into KV_APPEND (pos) and ATTENTION_TILE (kv_len = pos + 1),
// while RoPE reads the position from the "pos" IO_INPUT, which the caller must set to the same
// value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "amk/ir.h"

namespace amk::testing {

struct LlamaBlockShape {
  int64_t vocab = 64, hidden = 32, n_heads = 4, n_kv_heads = 2, head_dim = 8, ffn = 48;
  int64_t max_seq = 16, gemv_tile = 16;
  double eps = 1e-5, theta = 10000.0;
  DType dtype = DType::F32;     // weights, activations, KV cache and logits
  std::string target = "h100";  // a built-in target: SMs are assigned round-robin over it
};

// Buffer names (weights use Hugging Face state-dict keys, also their `source`).
namespace llama_names {
inline constexpr std::string_view kToken = "token";  // IO_INPUT I32 [1]
inline constexpr std::string_view kPos = "pos";      // IO_INPUT I32 [1]
inline constexpr std::string_view kEmbed = "model.embed_tokens.weight";
inline constexpr std::string_view kAttnNorm = "model.layers.0.input_layernorm.weight";
inline constexpr std::string_view kWq = "model.layers.0.self_attn.q_proj.weight";
inline constexpr std::string_view kWk = "model.layers.0.self_attn.k_proj.weight";
inline constexpr std::string_view kWv = "model.layers.0.self_attn.v_proj.weight";
inline constexpr std::string_view kWo = "model.layers.0.self_attn.o_proj.weight";
inline constexpr std::string_view kMlpNorm = "model.layers.0.post_attention_layernorm.weight";
inline constexpr std::string_view kWgate = "model.layers.0.mlp.gate_proj.weight";
inline constexpr std::string_view kWup = "model.layers.0.mlp.up_proj.weight";
inline constexpr std::string_view kWdown = "model.layers.0.mlp.down_proj.weight";
inline constexpr std::string_view kFinalNorm = "model.norm.weight";
inline constexpr std::string_view kLmHead = "lm_head.weight";
inline constexpr std::string_view kKCache = "layers.0.k_cache";  // KV_CACHE [n_kv, max_seq, hd]
inline constexpr std::string_view kVCache = "layers.0.v_cache";
inline constexpr std::string_view kLogits = "logits";          // IO_OUTPUT [1, vocab]
inline constexpr std::string_view kNextToken = "next_token";   // IO_OUTPUT I32 [1]
}  // namespace llama_names

// Throws std::invalid_argument for an inconsistent shape (n_heads % n_kv_heads, odd head_dim,
// pos outside [0, max_seq), unknown target).
Program build_llama_block(const LlamaBlockShape& shape, int64_t pos);

// The id of the buffer named `name`; throws std::out_of_range when there is none.
int64_t buffer_id(const Program& program, std::string_view name);

}  // namespace amk::testing
