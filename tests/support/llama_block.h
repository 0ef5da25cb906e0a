// A hand-built one-layer Llama decoder step as an IR program (embed -> RMSNorm -> q/k/v tiled
// GEMVs -> RoPE -> KV append -> GQA attention -> o_proj -> residual -> RMSNorm -> gate/up ->
// SiLU-mul -> down -> residual -> final norm -> lm_head tiles -> argmax).
#pragma once
#include "amk/ir.h"
namespace amk::testing {
struct LlamaBlockShape {
  int64_t vocab = 64, hidden = 32, n_heads = 4, n_kv_heads = 2, head_dim = 8, ffn = 48;
  int64_t max_seq = 16, gemv_tile = 16;
  double eps = 1e-5, theta = 10000.0;
};
Program build_llama_block(const LlamaBlockShape& shape, int64_t pos);
}  // namespace amk::testing
