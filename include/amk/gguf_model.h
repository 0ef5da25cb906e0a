// A Llama-family GGUF as a Hugging Face model: its metadata as a ModelConfig, its tensor names as
// the state-dict names, and the layout fixes llama.cpp's converter made (dims reversed, q/k rows
// permuted for interleaved RoPE). Checkpoint::open uses these to open a .gguf file.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "amk/gguf.h"
#include "amk/model_config.h"

namespace amk {

// general.architecture llama, mistral, qwen2 or qwen3, read from "<arch>.block_count",
// ".embedding_length", ".attention.head_count", ".attention.head_count_kv",
// ".feed_forward_length", ".rope.freq_base", ".attention.layer_norm_rms_epsilon",
// ".context_length", ".attention.key_length", ".rope.scaling.*"; the vocabulary size from
// tokenizer.ggml.tokens (else token_embd.weight); biases, q/k norms and tied embeddings from
// the tensors present; bos/eos from tokenizer.ggml.*. Throws ModelConfigError naming the GGUF
// key, or UnsupportedModelError for another architecture, mixture-of-experts, partial or
// unsupported rope scaling.
ModelConfig gguf_model_config(const GgufContents& gguf);

// "blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight", "token_embd.weight" ->
// "model.embed_tokens.weight", ...; nullopt for a name with no Hugging Face counterpart.
std::optional<std::string> gguf_to_hf_name(std::string_view gguf_name);

// llama.cpp's converter permutes the q/k projection rows of the Llama family (architectures llama
// and mistral) into interleaved-pair order for its RoPE; Qwen2/Qwen3 are written unpermuted.
bool gguf_qk_rows_permuted(ModelFamily family);

// Undoes that permutation in place for a row-major [n_heads * head_dim, cols] matrix (cols 1 for
// a bias): within each head, GGUF row 2i + j is Hugging Face row j * head_dim / 2 + i.
void unpermute_qk_rows(std::span<float> data, int64_t n_heads, int64_t cols);

}  // namespace amk
