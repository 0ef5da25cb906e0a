// The one-layer Llama decode step, written out by hand with the Program builder. Every buffer has
// one writer (SSA) except the tiles of one GEMV, which write disjoint column ranges of one buffer
// under one shared counter that the consumer all-joins (threshold == #tiles).
#include "support/llama_block.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace amk::testing {

namespace {

namespace n = llama_names;

struct Builder {
  Program& p;
  DType dt;

  int64_t weight(std::string_view name, std::vector<int64_t> shape) {
    return p.new_buffer(std::string(name), BufferKind::WEIGHT, dt, std::move(shape), MemSpace::HBM,
                        std::string(name));
  }
  int64_t act(std::string name, std::vector<int64_t> shape) {
    return p.new_buffer(std::move(name), BufferKind::ACTIVATION, dt, std::move(shape),
                        MemSpace::GLOBAL_SCRATCH);
  }
  int64_t bytes(int64_t elements) const { return dtype_nbytes(dt, elements); }

  // out[:, n_off:n_off+N_tile] = x @ W[n_off:n_off+N_tile].T for every tile; returns #tiles.
  int64_t gemv(int64_t x, int64_t w, int64_t out, int64_t K, int64_t N, int64_t tile,
               const std::vector<Wait>& waits, int64_t counter, const std::string& label) {
    int64_t tiles = 0;
    for (int64_t off = 0; off < N; off += tile, ++tiles) {
      const int64_t width = std::min(tile, N - off);
      Task& t = p.add_task(Op::GEMV_TILE, {x, w}, {out}, counter, waits,
                           Params{{"K", ParamValue::integer(K)},
                                  {"N_tile", ParamValue::integer(width)},
                                  {"n_off", ParamValue::integer(off)}},
                           label + "[t" + std::to_string(tiles) + "]");
      t.est_bytes = bytes(K * width);
      t.est_flops = 2 * K * width;
    }
    return tiles;
  }

  Task& simple(Op op, std::vector<int64_t> in, int64_t out, int64_t counter,
               std::vector<Wait> waits, Params params, std::string label, int64_t est_bytes,
               int64_t est_flops) {
    Task& t = p.add_task(op, std::move(in), {out}, counter, std::move(waits), std::move(params),
                         std::move(label));
    t.est_bytes = est_bytes;
    t.est_flops = est_flops;
    return t;
  }
};

Params norm_params(const LlamaBlockShape& s) {
  return Params{{"eps", ParamValue::real(s.eps)}, {"hidden", ParamValue::integer(s.hidden)}};
}

}  // namespace

Program build_llama_block(const LlamaBlockShape& s, int64_t pos) {
  const GpuTarget* target = find_target(s.target);
  if (target == nullptr) throw std::invalid_argument("build_llama_block: unknown target " + s.target);
  if (s.n_kv_heads <= 0 || s.n_heads % s.n_kv_heads != 0)
    throw std::invalid_argument("build_llama_block: n_heads must be a multiple of n_kv_heads");
  if (s.head_dim <= 0 || s.head_dim % 2 != 0)
    throw std::invalid_argument("build_llama_block: head_dim must be positive and even");
  if (pos < 0 || pos >= s.max_seq)
    throw std::invalid_argument("build_llama_block: pos must lie in [0, max_seq)");

  const int64_t H = s.hidden, V = s.vocab, F = s.ffn, HD = s.head_dim;
  const int64_t NH = s.n_heads, NKV = s.n_kv_heads, QD = NH * HD, KVD = NKV * HD;
  const int64_t T = s.gemv_tile;

  Program p;
  p.target = *target;
  p.set_meta_string("model", "llama-block-1layer");
  p.set_meta_string("gpu", target->name);
  p.set_meta_string("regime", "decode");
  p.set_meta_string("dtype", name_of(s.dtype));
  Builder b{p, s.dtype};

  // ---- IO, weights, KV ----
  const int64_t token = p.new_buffer(std::string(n::kToken), BufferKind::IO_INPUT, DType::I32, {1});
  const int64_t posb = p.new_buffer(std::string(n::kPos), BufferKind::IO_INPUT, DType::I32, {1});
  const int64_t w_embed = b.weight(n::kEmbed, {V, H});
  const int64_t w_anorm = b.weight(n::kAttnNorm, {H});
  const int64_t w_q = b.weight(n::kWq, {QD, H});
  const int64_t w_k = b.weight(n::kWk, {KVD, H});
  const int64_t w_v = b.weight(n::kWv, {KVD, H});
  const int64_t w_o = b.weight(n::kWo, {H, QD});
  const int64_t w_mnorm = b.weight(n::kMlpNorm, {H});
  const int64_t w_gate = b.weight(n::kWgate, {F, H});
  const int64_t w_up = b.weight(n::kWup, {F, H});
  const int64_t w_down = b.weight(n::kWdown, {H, F});
  const int64_t w_fnorm = b.weight(n::kFinalNorm, {H});
  const int64_t w_lm = b.weight(n::kLmHead, {V, H});
  const int64_t k_cache =
      p.new_buffer(std::string(n::kKCache), BufferKind::KV_CACHE, s.dtype, {NKV, s.max_seq, HD});
  const int64_t v_cache =
      p.new_buffer(std::string(n::kVCache), BufferKind::KV_CACHE, s.dtype, {NKV, s.max_seq, HD});

  // ---- activations (SSA) and outputs ----
  const int64_t x = b.act("x", {1, H});
  const int64_t xn = b.act("x_norm", {1, H});
  const int64_t q = b.act("q", {1, QD});
  const int64_t k = b.act("k", {1, KVD});
  const int64_t v = b.act("v", {1, KVD});
  const int64_t q_heads = b.act("q_heads", {NH, HD});
  const int64_t k_heads = b.act("k_heads", {NKV, HD});
  const int64_t q_rot = b.act("q_rope", {NH, HD});
  const int64_t k_rot = b.act("k_rope", {NKV, HD});
  const int64_t attn = b.act("attn", {1, QD});
  const int64_t o = b.act("o", {1, H});
  const int64_t h1 = b.act("h1", {1, H});
  const int64_t h1n = b.act("h1_norm", {1, H});
  const int64_t gate = b.act("gate", {1, F});
  const int64_t up = b.act("up", {1, F});
  const int64_t mlp = b.act("silu_mul", {1, F});
  const int64_t down = b.act("down", {1, H});
  const int64_t h2 = b.act("h2", {1, H});
  const int64_t h2n = b.act("h2_norm", {1, H});
  const int64_t logits =
      p.new_buffer(std::string(n::kLogits), BufferKind::IO_OUTPUT, s.dtype, {1, V});
  const int64_t next =
      p.new_buffer(std::string(n::kNextToken), BufferKind::IO_OUTPUT, DType::I32, {1});

  // ---- tasks, in a topological order ----
  const int64_t c_embed = p.new_counter("embed");
  b.simple(Op::EMBED, {token, w_embed}, x, c_embed, {}, Params{{"hidden", ParamValue::integer(H)}},
           "embed", b.bytes(H), 0);

  const int64_t c_anorm = p.new_counter("input_layernorm");
  b.simple(Op::RMSNORM, {x, w_anorm}, xn, c_anorm, {{c_embed, 1}}, norm_params(s),
           "input_layernorm", b.bytes(H), 4 * H);

  const int64_t c_q = p.new_counter("q_proj tiles");
  const int64_t c_k = p.new_counter("k_proj tiles");
  const int64_t c_v = p.new_counter("v_proj tiles");
  const int64_t nq = b.gemv(xn, w_q, q, H, QD, T, {{c_anorm, 1}}, c_q, "q_proj");
  const int64_t nk = b.gemv(xn, w_k, k, H, KVD, T, {{c_anorm, 1}}, c_k, "k_proj");
  const int64_t nv = b.gemv(xn, w_v, v, H, KVD, T, {{c_anorm, 1}}, c_v, "v_proj");

  // A GEMV writes a flat [1, N] row while ROPE rotates [heads, head_dim]: COPY is a flat
  // element copy, so copying into a head-shaped buffer is the reshape.
  const int64_t c_qh = p.new_counter("q as heads");
  b.simple(Op::COPY, {q}, q_heads, c_qh, {{c_q, nq}}, {}, "q_heads", 0, 0);
  const int64_t c_kh = p.new_counter("k as heads");
  b.simple(Op::COPY, {k}, k_heads, c_kh, {{c_k, nk}}, {}, "k_heads", 0, 0);

  const Params rope{{"head_dim", ParamValue::integer(HD)}, {"theta", ParamValue::real(s.theta)}};
  const int64_t c_qr = p.new_counter("rope q");
  b.simple(Op::ROPE, {q_heads, posb}, q_rot, c_qr, {{c_qh, 1}}, rope, "rope_q", 0, 6 * QD);
  const int64_t c_kr = p.new_counter("rope k");
  b.simple(Op::ROPE, {k_heads, posb}, k_rot, c_kr, {{c_kh, 1}}, rope, "rope_k", 0, 6 * KVD);

  const Params append{{"pos", ParamValue::integer(pos)}};
  const int64_t c_ka = p.new_counter("k_cache append");
  b.simple(Op::KV_APPEND, {k_rot, k_cache}, k_cache, c_ka, {{c_kr, 1}}, append, "kv_append_k",
           b.bytes(KVD), 0);
  const int64_t c_va = p.new_counter("v_cache append");
  b.simple(Op::KV_APPEND, {v, v_cache}, v_cache, c_va, {{c_v, nv}}, append, "kv_append_v",
           b.bytes(KVD), 0);

  const int64_t kv_len = pos + 1;
  const int64_t c_attn = p.new_counter("attention");
  b.simple(Op::ATTENTION_TILE, {q_rot, k_cache, v_cache}, attn, c_attn,
           {{c_qr, 1}, {c_ka, 1}, {c_va, 1}},
           Params{{"head_dim", ParamValue::integer(HD)},
                  {"kv_start", ParamValue::integer(0)},
                  {"kv_len", ParamValue::integer(kv_len)},
                  {"scale", ParamValue::real(1.0 / std::sqrt(static_cast<double>(HD)))},
                  {"n_heads", ParamValue::integer(NH)},
                  {"n_kv_heads", ParamValue::integer(NKV)}},
           "attention", b.bytes(2 * kv_len * KVD), 4 * NH * HD * kv_len);

  const int64_t c_o = p.new_counter("o_proj tiles");
  const int64_t no = b.gemv(attn, w_o, o, QD, H, T, {{c_attn, 1}}, c_o, "o_proj");
  const int64_t c_h1 = p.new_counter("attn residual");
  b.simple(Op::ADD, {o, x}, h1, c_h1, {{c_o, no}, {c_embed, 1}}, {}, "attn_residual", 0, H);

  const int64_t c_mnorm = p.new_counter("post_attention_layernorm");
  b.simple(Op::RMSNORM, {h1, w_mnorm}, h1n, c_mnorm, {{c_h1, 1}}, norm_params(s),
           "post_attention_layernorm", b.bytes(H), 4 * H);
  const int64_t c_gate = p.new_counter("gate_proj tiles");
  const int64_t c_up = p.new_counter("up_proj tiles");
  const int64_t ng = b.gemv(h1n, w_gate, gate, H, F, T, {{c_mnorm, 1}}, c_gate, "gate_proj");
  const int64_t nu = b.gemv(h1n, w_up, up, H, F, T, {{c_mnorm, 1}}, c_up, "up_proj");
  const int64_t c_act = p.new_counter("silu_mul");
  b.simple(Op::SILU_MUL, {gate, up}, mlp, c_act, {{c_gate, ng}, {c_up, nu}}, {}, "silu_mul", 0,
           4 * F);
  const int64_t c_down = p.new_counter("down_proj tiles");
  const int64_t nd = b.gemv(mlp, w_down, down, F, H, T, {{c_act, 1}}, c_down, "down_proj");
  const int64_t c_h2 = p.new_counter("mlp residual");
  b.simple(Op::ADD, {down, h1}, h2, c_h2, {{c_down, nd}, {c_h1, 1}}, {}, "mlp_residual", 0, H);

  const int64_t c_fnorm = p.new_counter("final norm");
  b.simple(Op::RMSNORM, {h2, w_fnorm}, h2n, c_fnorm, {{c_h2, 1}}, norm_params(s), "final_norm",
           b.bytes(H), 4 * H);
  const int64_t c_lm = p.new_counter("lm_head tiles");
  const int64_t nl = b.gemv(h2n, w_lm, logits, H, V, T, {{c_fnorm, 1}}, c_lm, "lm_head");
  const int64_t c_tok = p.new_counter("argmax");
  b.simple(Op::SAMPLE_ARGMAX, {logits}, next, c_tok, {{c_lm, nl}}, {}, "sample_argmax", 0, V);

  // Round-robin in list order: list order is topological, so every SM's queue stays a linear
  // extension of the DAG whatever the SM count.
  for (size_t i = 0; i < p.tasks.size(); ++i)
    p.tasks[i].sm = static_cast<int64_t>(i) % target->num_sms;
  return p;
}

int64_t buffer_id(const Program& program, std::string_view name) {
  for (const Buffer& b : program.buffers)
    if (b.name == name) return b.id;
  throw std::out_of_range("no buffer named " + std::string(name));
}

}  // namespace amk::testing
