// lower(): the decode-step task graph of a Llama-family model (docs/LOWERING.md).
//
// Every buffer has one writer (SSA), except the tiles of one GEMV, which write disjoint column
// ranges of one buffer under one shared counter that consumers all-join (threshold == #tiles),
// and the split-KV partials, which write one buffer each under one shared counter. Tasks are
// emitted in a topological order, which the SM assignment and page allocation rely on.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <vector>

#include "amk/lowering.h"
#include "amk/op_flags.h"
#include "amk/sampler.h"
#include "amk/validate.h"
#include "schedule/fusion.h"
#include "schedule/graph_builder.h"
#include "schedule/launch_config.h"
#include "schedule/page_allocation.h"
#include "schedule/sm_assignment.h"
#include "schedule/tensor_parallel.h"
#include "schedule/tiling.h"

namespace amk {

std::string kv_cache_name(int64_t layer, char k_or_v) {
  return fmt::format("layers.{}.{}_cache", layer, k_or_v);
}

DType kv_cache_dtype(DType weight_dtype) {
  return weight_dtype == DType::BF16 ? DType::BF16 : DType::F32;
}

namespace {

namespace names = lowered_names;
using schedule::GraphBuilder;
using schedule::ints;

DType resolve_weight_dtype(const ModelConfig& m, std::optional<DType> given) {
  if (given) {
    if (*given != DType::F32 && *given != DType::F16 && *given != DType::BF16)
      throw LoweringError(
          fmt::format("weights of dtype {} are not lowered (F32, F16 or BF16)", name_of(*given)));
    return *given;
  }
  if (m.torch_dtype == "float32") return DType::F32;
  if (m.torch_dtype == "float16") return DType::F16;
  if (m.torch_dtype == "bfloat16" || m.torch_dtype.empty()) return DType::BF16;
  throw LoweringError(
      fmt::format("config dtype '{}' is not lowered (float32, float16, bfloat16)", m.torch_dtype));
}

void check_model(const ModelConfig& m, int64_t max_context) {
  if (max_context < 1 || max_context > std::numeric_limits<int32_t>::max())
    throw LoweringError(fmt::format("max_context must be in [1, 2^31), got {}", max_context));
  check_max_context(m, max_context);
  if (m.hidden_act != "silu")
    throw LoweringError(fmt::format("hidden_act '{}' is not lowered (silu only)", m.hidden_act));
  if (m.head_dim < 2 || m.head_dim % 2 != 0)
    throw LoweringError(fmt::format("head_dim {} must be even for RoPE", m.head_dim));
}

}  // namespace

Program lower(const ModelConfig& m, const ScheduleConfig& config, const GpuTarget& target,
              int64_t max_context, std::optional<DType> weight_dtype) {
  check_model(m, max_context);
  schedule::check_launch_config(config, target);
  const schedule::Tiling tiling = schedule::resolve_tiling(config, kDefaultGemvNTile);
  const schedule::Fusion fusion = schedule::resolve_fusion(config);
  // Gate and up share the GLU tiles, whose width tiling.gate_proj sets: an up_proj width would
  // change nothing, and a knob that does nothing is refused rather than ignored.
  if (fusion.gemv_silu_mul && fusion.silu_mul_gemv)
    throw LoweringError(
        "fusion groups [gemv, silu_mul] and [silu_mul, gemv] together: with the first, gate and "
        "up tiles already write silu(gate) * up, so the second has nothing to fuse; drop one");
  if (fusion.gemv_silu_mul && tiling.has_override("up_proj"))
    throw LoweringError(
        "tiling.up_proj does nothing with fusion group [gemv, silu_mul]: gate_proj and up_proj "
        "share one tile per range of features, tiling.gate_proj.N_tile features wide; remove it");
  if (fusion.combine_gemv && !fusion.gemv_add)
    throw LoweringError(
        "fusion group [attention_combine, gemv] needs [gemv, add]: its o_proj tiles "
        "(COMBINE_GEMV_ADD_TILE) also add the residual");
  if (fusion.glu_down && !(fusion.rmsnorm_gemv && fusion.gemv_silu_mul && fusion.gemv_add))
    throw LoweringError(
        "fusion group [gemv, silu_mul, gemv] needs [rmsnorm, gemv], [gemv, silu_mul] and "
        "[gemv, add]: its tiles (RMSNORM_GEMV_GLU_DOWN_TILE) normalise x and run the GLU "
        "themselves, and o_proj's tiles give the down projection's sum its initial value");
  if (fusion.glu_down && tiling.has_override("down_proj"))
    throw LoweringError(
        "tiling.down_proj does nothing with fusion group [gemv, silu_mul, gemv]: each GLU tile "
        "multiplies its own features by down_proj, tiling.gate_proj.N_tile columns of it; remove it");
  if (fusion.combine_gemv && !tiling.kv_block)
    throw LoweringError(
        "fusion group [attention_combine, gemv] needs tiling.attention.kv_block: without a "
        "split-KV attention there is no combine to fuse");
  if (tiling.qkv_by_group && !fusion.rope_attention)
    throw LoweringError(
        "tiling.attention.qkv_by_group needs fusion group [rope, attention]: only the fused "
        "attention reads q, k and v as the GEMVs wrote them (unfused, the RoPE and KV_APPEND "
        "tasks read every head)");
  const DType wdt = resolve_weight_dtype(m, weight_dtype);

  const int64_t H = m.hidden_size, V = m.vocab_size, F = m.intermediate_size, HD = m.head_dim;
  const int64_t NH = m.num_attention_heads, NKV = m.num_key_value_heads;
  const int64_t QD = m.q_dim(), KVD = m.kv_dim(), C = max_context;
  const double eps = m.rms_norm_eps;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HD));

  int64_t n_blocks = 1;
  if (tiling.kv_block) {
    n_blocks = (C + *tiling.kv_block - 1) / *tiling.kv_block;
    if (fusion.combine_gemv && n_blocks < 2)
      throw LoweringError(fmt::format(
          "fusion group [attention_combine, gemv] with tiling.attention.kv_block {} >= "
          "max_context {}: one KV block has no combine to fuse (lower kv_block)",
          *tiling.kv_block, C));
    if (n_blocks > kMaxKvBlocks)
      throw LoweringError(
          fmt::format("tiling.attention.kv_block {} splits max_context {} into {} KV blocks; "
                      "a two-level ATTENTION_COMBINE tree merges at most {} (raise kv_block or "
                      "lower max_context)",
                      *tiling.kv_block, C, n_blocks, kMaxKvBlocks));
  }

  // Strided blocks (tiling.attention.kv_run R): block b's keys are the runs [b R + i D, + R),
  // D = n_blocks R, i < kv_block / R, which tile the context exactly when R divides kv_block
  // and kv_block divides it.
  if (tiling.kv_run) {
    const int64_t B = *tiling.kv_block, R = *tiling.kv_run;
    if (n_blocks < 2 || B % R != 0 || C % B != 0)
      throw LoweringError(fmt::format(
          "tiling.attention.kv_run {} needs a split-KV block (kv_block {} < max_context {}) that "
          "it divides and that divides max_context",
          R, B, C));
  }

  // KV heads per attention task (tiling.attention.kv_heads): whole GQA groups, so it divides
  // n_kv_heads. With a kv_block split each group's blocks get their own combine; without one
  // (one block) each group's task covers the whole window and writes its heads' slice of the
  // attention row itself: no combine level.
  const int64_t kv_heads = tiling.kv_heads.value_or(NKV);
  if (tiling.kv_heads && NKV % kv_heads != 0)
    throw LoweringError(fmt::format("tiling.attention.kv_heads {} must divide the model's {} KV "
                                    "heads",
                                    kv_heads, NKV));

  if (tiling.tp) schedule::check_tensor_parallel(m, *tiling.tp, tiling, fusion, config, target, kv_heads);

  Program p;
  p.target = target;
  p.config = config;
  p.set_meta_string("model", m.architecture.empty() ? m.model_type : m.architecture);
  p.set_meta_string("gpu", target.name);
  p.set_meta_string("regime", "decode");
  p.set_meta_string("dtype", name_of(wdt));
  p.meta.emplace_back("max_context", std::to_string(C));
  // Where the per-step position lives (docs/RUNTIME_POSITION.md).
  p.set_meta_string("step_position", names::kPos);

  GraphBuilder g(p, wdt, config.pipelining_depth);
  const DType A = GraphBuilder::kActDtype;
  const DType kv_dtype = kv_cache_dtype(wdt);
  const int64_t token =
      p.new_buffer(std::string(names::kToken), BufferKind::IO_INPUT, DType::I32, {1});
  const int64_t pos = p.new_buffer(std::string(names::kPos), BufferKind::IO_INPUT, DType::I32, {1});
  const int64_t w_embed = g.weight("model.embed_tokens.weight", {V, H});

  const Params norm{{"eps", ParamValue::real(eps)}, {"hidden", ParamValue::integer(H)}};
  const Params head_norm{{"eps", ParamValue::real(eps)}, {"hidden", ParamValue::integer(HD)}};
  // Default RoPE keeps the spec's ROPE opcode (its table is a function of theta alone); a scaled
  // rope type needs the scaled table, which ROPE_FREQ reads from a CONST buffer that the loader
  // computes from the config (kRopeInvFreqSource).
  const bool scaled_rope = m.rope.type != RopeType::Default;
  const Op rope_op = scaled_rope ? Op::ROPE_FREQ : Op::ROPE;
  Params rope{{"head_dim", ParamValue::integer(HD)}};
  if (!scaled_rope) rope.set_real("theta", m.rope.theta);
  const std::optional<int64_t> inv_freq =
      scaled_rope ? std::optional(p.new_buffer("rope_inv_freq", BufferKind::CONST, DType::F32,
                                               {HD / 2}, MemSpace::HBM,
                                               std::string(kRopeInvFreqSource)))
                  : std::nullopt;
  const auto rope_inputs = [&](int64_t x) {
    std::vector<int64_t> in{x, pos};
    if (inv_freq) in.push_back(*inv_freq);
    return in;
  };

  // A projection of RMSNORM(x, norm_w): with the ["rmsnorm", "gemv"] group every tile normalises
  // x itself (RMSNORM_GEMV_TILE), which removes the norm task, its buffer and its counter.
  struct Normed {
    int64_t x, norm_w, norm_task_out;  // norm_task_out: the RMSNORM output, unfused only
  };
  const auto normed = [&](int64_t x, int64_t norm_w, const std::string& buffer,
                          const std::string& label) {
    if (fusion.rmsnorm_gemv) return Normed{x, norm_w, -1};
    const int64_t xn = g.act(buffer, {1, H});
    g.task(Op::RMSNORM, {x, norm_w}, xn, norm, label, g.wbytes(H), 4 * H);
    return Normed{x, norm_w, xn};
  };
  const auto normed_gemv = [&](const Normed& n, int64_t w, std::optional<int64_t> b, int64_t out,
                               int64_t N, const std::string& proj, const std::string& label) {
    if (n.norm_task_out >= 0) return g.gemv(n.norm_task_out, w, b, out, H, N, tiling.n_tile(proj),
                                            label);
    std::vector<int64_t> in{n.x, n.norm_w, w};
    if (b) in.push_back(*b);
    g.tiles(Op::RMSNORM_GEMV_TILE, std::move(in), norm, g.wbytes(H), b.has_value(), out, H, N,
            tiling.n_tile(proj), label);
  };
  // Rows [n_begin, n_begin + rows) of normed_gemv's tiles under a shared `counter`; returns how
  // many tiles.
  const auto normed_range_tiles = [&](const Normed& n, int64_t w, std::optional<int64_t> b,
                                      int64_t out, int64_t n_begin, int64_t rows,
                                      const std::string& proj, const std::string& label,
                                      int64_t counter) {
    const bool norm_in_tile = n.norm_task_out < 0;
    std::vector<int64_t> in{norm_in_tile ? n.x : n.norm_task_out};
    if (norm_in_tile) in.push_back(n.norm_w);
    in.push_back(w);
    if (b) in.push_back(*b);
    return g.range_tiles(norm_in_tile ? Op::RMSNORM_GEMV_TILE : Op::GEMV_TILE, std::move(in),
                         norm_in_tile ? norm : Params{}, norm_in_tile ? g.wbytes(H) : 0,
                         b.has_value(), out, H, n_begin, n_begin + rows, tiling.n_tile(proj),
                         label, counter);
  };
  // out = x @ W.T (+ b) + residual: one GEMV_ADD_TILE per tile with ["gemv", "add"], else the
  // GEMV into its own buffer and an ADD task.
  // `copy` >= 0 (fused only): the tiles also write their columns there.
  const auto gemv_add = [&](int64_t x, int64_t w, std::optional<int64_t> b, int64_t residual,
                            int64_t K, const std::string& proj, const std::string& prefix,
                            const std::string& add_name, bool fuse, int64_t copy = -1) {
    if (fuse) {
      const int64_t out = g.act(prefix + add_name, {1, H});
      std::vector<int64_t> in{x, w, residual};
      if (b) in.push_back(*b);
      g.tiles(Op::GEMV_ADD_TILE, std::move(in), {}, g.abytes(H), b.has_value(), out, K, H,
              tiling.n_tile(proj), prefix + proj, 1, copy);
      return out;
    }
    const int64_t y = g.act(prefix + (proj == "o_proj" ? "o" : "down"), {1, H});
    g.gemv(x, w, b, y, K, H, tiling.n_tile(proj), prefix + proj);
    const int64_t out = g.act(prefix + add_name, {1, H});
    g.task(Op::ADD, {y, residual}, out, {}, prefix + add_name, 0, H);
    return out;
  };

  int64_t h = g.act("embed", {1, H});
  g.task(Op::EMBED, {token, w_embed}, h, ints({{"hidden", H}}), "embed", g.wbytes(H), 0);

  // The cluster of attention head group gi in a tensor-parallel step (-1: none).
  const auto cluster_of_group = [&](int64_t gi) -> int64_t {
    return tiling.tp ? gi / (NKV / kv_heads / tiling.tp->attention) : -1;
  };
  // A tensor-parallel step (tiling.tp, docs/CLUSTER_TP.md): every cluster keeps its own copy of
  // the hidden vector; PA clusters hold the attention's heads, all P the MLP's features.
  const bool tp = tiling.tp.has_value();
  const int64_t P = tp ? tiling.tp->clusters : 1, CS = tp ? tiling.tp->size : 1;
  const int64_t PA = tp ? tiling.tp->attention : 1;
  std::vector<int64_t> hs(size_t(P), h);  // cluster p's hidden vector (p < PA after layer 0)
  int64_t zeros = -1;                     // the residual of every cluster's partial but the first
  // The slices of the hidden vector the clusters' sums write, one a CTA: multiples of 4 floats.
  const int64_t slice4 = schedule::tp_slice_width(H, CS), n_slices = (H + slice4 - 1) / slice4;
  if (tp) {
    zeros = p.new_buffer("zeros", BufferKind::CONST, A, {1, H}, MemSpace::HBM,
                         std::string(kZerosSource));
  }
  // The tiles of a cluster's partial of the hidden vector (`out`, [1, H]); returns, per slice of
  // the sums, the wait that makes it readable. Tiles as wide as a slice signal a counter each,
  // so a slice's sum waits for the one tile that wrote it (ALLREDUCE_SHARD's read region).
  const auto partial_tiles = [&](Op op, std::vector<int64_t> inputs, const Params& extra,
                                 int64_t extra_bytes, int64_t out, int64_t K,
                                 const std::string& proj, const std::string& label) {
    const int64_t tile = tiling.n_tile(proj);
    std::vector<Wait> ready;
    if (tile != slice4) {
      g.tiles(op, std::move(inputs), extra, extra_bytes, false, out, K, H, tile, label);
      const int64_t counter = p.tasks.back().out_counter;
      ready.assign(size_t(n_slices), Wait{counter, (H + tile - 1) / tile});
      return ready;
    }
    for (int64_t r = 0; r < n_slices; ++r) {
      const int64_t counter = g.shared_counter(fmt::format("{}[s{}] tile", label, r));
      g.range_tiles(op, inputs, extra, extra_bytes, false, out, K, r * slice4,
                    std::min(H, (r + 1) * slice4), tile, fmt::format("{}[s{}]", label, r), counter);
      ready.push_back(Wait{counter, 1});
    }
    return ready;
  };
  // The sum of the partials `parts` (each [1, H]; `ready[q][r]`: the wait for slice r of part
  // q) into a copy for each of the first `copies` clusters, those that read it: CTA r of such a
  // cluster sums slice r, so each copy is written inside its cluster. More partials than one
  // ALLREDUCE_SHARD takes (kMaxInputs) are summed by a chain of them on that CTA, each adding up
  // to kMaxInputs - 1 more to the previous one's slice (under a counter of its own, which the
  // next link, on the same SM, finds signalled): no hop between the links.
  const auto cluster_sums = [&](const std::vector<int64_t>& parts,
                                const std::vector<std::vector<Wait>>& ready,
                                const std::string& name, int64_t copies) {
    // The parts each link adds: the first kMaxInputs, then kMaxInputs - 1 beside the carry.
    std::vector<std::vector<int64_t>> links(1);
    for (const int64_t part : parts) {
      if (int64_t(links.back().size()) == kMaxInputs - (links.size() > 1 ? 1 : 0))
        links.emplace_back();
      links.back().push_back(part);
    }
    std::vector<int64_t> out;
    for (int64_t c = 0; c < copies; ++c) {
      const int64_t sum = g.act(fmt::format("{}[c{}]", name, c), {1, H});
      const int64_t counter = g.shared_counter(fmt::format("{}[c{}] slices", name, c));
      std::vector<int64_t> carries;  // a link's running sum, but the last's
      for (size_t k = 0; k + 1 < links.size(); ++k)
        carries.push_back(g.act(fmt::format("{}[c{}] partial{}", name, c, k), {1, H}));
      for (int64_t r = 0; r < n_slices; ++r) {
        const int64_t off = r * slice4, width = std::min(slice4, H - off);
        for (size_t q = 0; q < parts.size(); ++q) g.mark_ready(parts[q], ready[q][size_t(r)]);
        g.place(c, r);
        const Params range = ints({{"n_off", off}, {"N_tile", width}});
        for (size_t k = 0; k < links.size(); ++k) {
          std::vector<int64_t> in = links[k];
          if (k > 0) in.insert(in.begin(), carries[k - 1]);
          const std::string label = fmt::format("{}[c{}][s{}]", name, c, r) +
                                    (links.size() > 1 ? fmt::format("[link{}]", k) : "");
          const int64_t bytes = width * int64_t(in.size());
          if (k + 1 == links.size()) {
            g.shared_task(Op::ALLREDUCE_SHARD, std::move(in), sum, counter, range, label, 0, bytes);
          } else {
            const int64_t link = g.shared_counter(label);
            g.shared_task(Op::ALLREDUCE_SHARD, std::move(in), carries[k], link, range, label, 0,
                          bytes);
            g.mark_ready(carries[k], Wait{link, 1});
          }
        }
      }
      g.mark_ready(sum, Wait{counter, n_slices});
      out.push_back(sum);
    }
    return out;
  };

  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    const std::string wp = fmt::format("model.layers.{}.", l);
    const std::string ap = fmt::format("L{}.", l);
    const auto bias = [&](bool present, const std::string& name,
                          int64_t n) -> std::optional<int64_t> {
      if (!present) return std::nullopt;
      return g.weight(wp + name, {n});
    };
    const int64_t w_anorm = g.weight(wp + "input_layernorm.weight", {H});
    const int64_t w_q = g.weight(wp + "self_attn.q_proj.weight", {QD, H});
    const int64_t w_k = g.weight(wp + "self_attn.k_proj.weight", {KVD, H});
    const int64_t w_v = g.weight(wp + "self_attn.v_proj.weight", {KVD, H});
    const int64_t w_o = tp ? -1 : g.weight(wp + "self_attn.o_proj.weight", {H, QD});
    const auto b_q = bias(m.attention_qkv_bias, "self_attn.q_proj.bias", QD);
    const auto b_k = bias(m.attention_qkv_bias, "self_attn.k_proj.bias", KVD);
    const auto b_v = bias(m.attention_qkv_bias, "self_attn.v_proj.bias", KVD);
    const auto b_o = bias(m.attention_out_bias, "self_attn.o_proj.bias", H);
    const int64_t w_mnorm = g.weight(wp + "post_attention_layernorm.weight", {H});
    const int64_t w_gate = tp ? -1 : g.weight(wp + "mlp.gate_proj.weight", {F, H});
    const int64_t w_up = tp ? -1 : g.weight(wp + "mlp.up_proj.weight", {F, H});
    const int64_t w_down = tp ? -1 : g.weight(wp + "mlp.down_proj.weight", {H, F});
    const auto b_gate = bias(m.mlp_bias, "mlp.gate_proj.bias", F);
    const auto b_up = bias(m.mlp_bias, "mlp.up_proj.bias", F);
    const auto b_down = bias(m.mlp_bias, "mlp.down_proj.bias", H);
    const int64_t k_cache =
        p.new_buffer(kv_cache_name(l, 'k'), BufferKind::KV_CACHE, kv_dtype, {NKV, C, HD});
    const int64_t v_cache =
        p.new_buffer(kv_cache_name(l, 'v'), BufferKind::KV_CACHE, kv_dtype, {NKV, C, HD});

    // ---- attention ----
    const Normed xn = tp ? Normed{h, w_anorm, -1}
                         : normed(h, w_anorm, ap + "attn_norm", ap + "input_layernorm");
    const int64_t q = g.act(ap + "q", {1, QD});
    const int64_t k = g.act(ap + "k", {1, KVD});
    const int64_t v = g.act(ap + "v", {1, KVD});
    // Per projection, each under a counter of its own; or (tiling.attention.qkv_by_group) per
    // head group, the group's q, k and v rows under one counter, which its attention tasks wait
    // for alone: they read only their heads' columns of q, k and v.
    // A tensor-parallel step's q/k/v are per group always, each group's tiles on its cluster,
    // normalising that cluster's copy of the hidden vector.
    std::vector<Wait> qkv_group_ready;
    if (tiling.qkv_by_group || tp) {
      const int64_t n_groups = NKV / kv_heads, group_heads = NH / n_groups;
      for (int64_t gi = 0; gi < n_groups; ++gi) {
        const std::string group = fmt::format("[h{}]", gi);
        const Normed gxn = tp ? Normed{hs[size_t(cluster_of_group(gi))], w_anorm, -1} : xn;
        if (tp) g.place(cluster_of_group(gi));
        const int64_t counter = g.shared_counter(ap + "q/k/v" + group + " tiles");
        const int64_t q_rows = group_heads * HD, kv_rows = kv_heads * HD;
        const int64_t n = normed_range_tiles(gxn, w_q, b_q, q, gi * q_rows, q_rows, "q_proj",
                                             ap + "q_proj" + group, counter) +
                          normed_range_tiles(gxn, w_k, b_k, k, gi * kv_rows, kv_rows, "k_proj",
                                             ap + "k_proj" + group, counter) +
                          normed_range_tiles(gxn, w_v, b_v, v, gi * kv_rows, kv_rows, "v_proj",
                                             ap + "v_proj" + group, counter);
        qkv_group_ready.push_back(Wait{counter, n});
      }
    } else {
      normed_gemv(xn, w_q, b_q, q, QD, "q_proj", ap + "q_proj");
      normed_gemv(xn, w_k, b_k, k, KVD, "k_proj", ap + "k_proj");
      normed_gemv(xn, w_v, b_v, v, KVD, "v_proj", ap + "v_proj");
    }

    // With ["rope", "attention"] the attention tasks take q, k, v as the GEMVs wrote them and do
    // the per-head norm, RoPE and the KV row themselves (ROPE_KV_ATTENTION_TILE).
    int64_t q_rot = q;
    std::vector<int64_t> fused_extra;  // the fused attention's inputs after the caches
    int64_t fused_flags = 0;
    Params fused_params;
    if (fusion.rope_attention) {
      if (m.qk_norm) {
        fused_extra.push_back(g.weight(wp + "self_attn.q_norm.weight", {HD}));
        fused_extra.push_back(g.weight(wp + "self_attn.k_norm.weight", {HD}));
        fused_flags |= attention_flags::kHeadNorm;
        fused_params.set_real("eps", eps);
      }
      if (inv_freq) {
        fused_extra.push_back(*inv_freq);
        fused_flags |= attention_flags::kRopeTable;
      } else {
        fused_params.set_real("theta", m.rope.theta);
      }
    } else {
      // A GEMV writes a flat [1, N] row. ROPE reads such a row as [heads, head_dim] directly;
      // the per-head RMSNORM of qk_norm needs head-shaped rows, and COPY (a flat element copy)
      // into a head-shaped buffer is that reshape.
      int64_t q_heads = q, k_heads = k;
      if (m.qk_norm) {
        q_heads = g.act(ap + "q_heads", {NH, HD});
        g.task(Op::COPY, {q}, q_heads, {}, ap + "q_heads", 0, 0);
        k_heads = g.act(ap + "k_heads", {NKV, HD});
        g.task(Op::COPY, {k}, k_heads, {}, ap + "k_heads", 0, 0);
      }
      if (m.qk_norm) {  // Qwen3: RMSNorm over each head's head_dim before RoPE
        const int64_t w_qn = g.weight(wp + "self_attn.q_norm.weight", {HD});
        const int64_t w_kn = g.weight(wp + "self_attn.k_norm.weight", {HD});
        const int64_t qn = g.act(ap + "q_norm", {NH, HD});
        g.task(Op::RMSNORM, {q_heads, w_qn}, qn, head_norm, ap + "q_norm", g.wbytes(HD), 4 * QD);
        const int64_t kn = g.act(ap + "k_norm", {NKV, HD});
        g.task(Op::RMSNORM, {k_heads, w_kn}, kn, head_norm, ap + "k_norm", g.wbytes(HD), 4 * KVD);
        q_heads = qn;
        k_heads = kn;
      }
      q_rot = g.act(ap + "q_rope", {NH, HD});
      g.task(rope_op, rope_inputs(q_heads), q_rot, rope, ap + "rope_q", 0, 6 * QD);
      const int64_t k_rot = g.act(ap + "k_rope", {NKV, HD});
      g.task(rope_op, rope_inputs(k_heads), k_rot, rope, ap + "rope_k", 0, 6 * KVD);

      // The row is the step's position (flags bit 0), so one program serves every step.
      const Params append = ints({{"pos", 0}, {"flags", kv_append_flags::kRuntimePos}});
      g.task(Op::KV_APPEND, {k_rot, k_cache}, k_cache, append, ap + "kv_append_k", g.abytes(KVD), 0);
      g.task(Op::KV_APPEND, {v, v_cache}, v_cache, append, ap + "kv_append_v", g.abytes(KVD), 0);
    }

    const auto attn_params = [&](int64_t kv_start, int64_t kv_len, int64_t flags) {
      Params a = ints({{"head_dim", HD}, {"kv_start", kv_start}, {"kv_len", kv_len}});
      a.set_real("scale", scale);
      a.set_int("n_heads", NH);
      a.set_int("n_kv_heads", NKV);
      a.set_int("flags", flags);
      return a;
    };
    // Split-KV block b's task params: keys [b B, b B + B) (the last block clipped to C), or with
    // kv_run R < B the strided window of runs [b R + i n_blocks R, + R).
    const auto block_params = [&](int64_t b, int64_t flags) {
      const int64_t B = *tiling.kv_block;
      if (tiling.kv_run && *tiling.kv_run < B) {
        const int64_t R = *tiling.kv_run;
        Params a = attn_params(b * R, R, flags);
        a.set_int("kv_stride", n_blocks * R);
        return a;
      }
      return attn_params(b * B, std::min(B, C - b * B), flags);
    };
    // The keys of block b's window (est_bytes, flops): strided or not, B (kv_run needs B to
    // divide C), but the last contiguous block's clip.
    const auto block_keys = [&](int64_t b) {
      return std::min(*tiling.kv_block, C - b * *tiling.kv_block);
    };
    // [attention_combine, gemv]: no attention row; the block tasks write a stack of partials
    // that the o_proj tiles merge.
    const int64_t attn = fusion.combine_gemv ? -1 : g.act(ap + "attn", {1, QD});
    int64_t partial_stack = -1;
    std::vector<Wait> attention_ready;  // the stack's counter, or each cluster's (tiling.tp)
    // KV bytes at the full window: the runtime window is at most this.
    const auto kv_bytes = [&](int64_t len) { return 2 * g.abytes(len * KVD); };
    // One attention task into `out` under `counter` (< 0: its own counter, returned): the plain
    // ATTENTION_TILE over the roped q, or the fused one that also writes the caches.
    // `group`: the task's head group (0 when it covers every head), whose q/k/v counter it
    // waits for with qkv_by_group.
    const auto attention_task = [&](Params params, int64_t out, int64_t counter,
                                    const std::string& label, int64_t bytes, int64_t flops,
                                    int64_t group) {
      if (!qkv_group_ready.empty())
        for (int64_t x : {q, k, v}) g.mark_ready(x, qkv_group_ready[size_t(group)]);
      if (!fusion.rope_attention) {
        if (counter < 0) {
          g.task(Op::ATTENTION_TILE, {q_rot, k_cache, v_cache}, out, std::move(params), label,
                 bytes, flops);
          return int64_t(-1);
        }
        g.shared_task(Op::ATTENTION_TILE, {q_rot, k_cache, v_cache}, out, counter,
                      std::move(params), label, bytes, flops);
        return counter;
      }
      for (const auto& [key, value] : fused_params.items()) params.set(key, value);
      params.set_int("flags", params.get_int("flags", 0) | fused_flags);
      std::vector<int64_t> in{q, k, v, k_cache, v_cache};
      in.insert(in.end(), fused_extra.begin(), fused_extra.end());
      return g.multi_task(Op::ROPE_KV_ATTENTION_TILE, std::move(in), {out, k_cache, v_cache},
                          counter, std::move(params), label, bytes + g.abytes(2 * KVD), flops);
    };
    if (n_blocks == 1 && tiling.kv_heads) {
      // One task a head group over the whole window, each writing its heads' slice of attn.
      const int64_t n_groups = NKV / kv_heads, group_heads = NH / n_groups;
      const int64_t counter = g.shared_counter(ap + "attention heads");
      for (int64_t gi = 0; gi < n_groups; ++gi) {
        Params params = attn_params(0, C, attention_flags::kRuntimeWindow);
        params.set_int("n_off", gi * group_heads);
        params.set_int("N_tile", group_heads);
        attention_task(std::move(params), attn, counter, fmt::format("{}attention[h{}]", ap, gi),
                       kv_bytes(C) / n_groups, 4 * QD * C / n_groups, gi);
      }
      g.mark_ready(attn, Wait{counter, n_groups});
    } else if (n_blocks == 1) {
      const int64_t counter =
          attention_task(attn_params(0, C, attention_flags::kRuntimeWindow), attn, -1,
                         ap + "attention", kv_bytes(C), 4 * QD * C, 0);
      if (counter >= 0) g.mark_ready(attn, Wait{counter, 1});
    } else if (fusion.combine_gemv) {
      // Split-KV into one stack of partials [n_blocks * NH, HD + 2]: block b's task writes slab
      // b (param m_off), its head group's rows; one counter for every block task (in a
      // tensor-parallel step, one a cluster: its o_proj merges its own heads alone).
      const int64_t n_groups = NKV / kv_heads, group_heads = NH / n_groups;
      partial_stack = g.act(ap + "attn_partials", {n_blocks * NH, HD + 2});
      int64_t counter = -1;
      for (int64_t gi = 0; gi < n_groups; ++gi) {
        if (gi == 0 || cluster_of_group(gi) != cluster_of_group(gi - 1)) {
          counter = g.shared_counter(
              ap + "attention partials" +
              (tp ? fmt::format("[c{}]", cluster_of_group(gi)) : std::string()));
          attention_ready.push_back(Wait{counter, 0});
        }
        attention_ready.back().threshold += n_blocks;
        g.place(cluster_of_group(gi));
        for (int64_t b = 0; b < n_blocks; ++b) {
          const int64_t len = block_keys(b);
          Params params =
              block_params(b, attention_flags::kPartial | attention_flags::kRuntimeWindow);
          params.set_int("n_off", gi * group_heads);
          params.set_int("N_tile", group_heads);
          params.set_int("m_off", b);
          attention_task(std::move(params), partial_stack, counter,
                         fmt::format("{}attention[h{}][kv{}]", ap, gi, b),
                         kv_bytes(len) / n_groups, 4 * QD * len / n_groups, gi);
        }
      }
      g.mark_ready(partial_stack, attention_ready.front());
    } else {
      // Split-KV (flash decoding): each block's partial [acc | m | l]; blocks past the step's
      // position are empty partials, which the combine weighs as zero. With kv_heads, also split
      // by head: each group of kv_heads KV heads (and their query heads) gets its own partials
      // and its own combine, which writes its heads' slice of attn, so a group's combine waits
      // only for that group's blocks.
      const int64_t n_groups = NKV / kv_heads, group_heads = NH / n_groups;
      const bool by_head = tiling.kv_heads.has_value();
      const int64_t attn_counter = by_head ? g.shared_counter(ap + "attention heads") : -1;
      // More blocks than one combine merges: runs of up to kMaxInputs blocks (as even as they
      // go), each merged into a partial by its own combine as soon as its blocks are done, then
      // one combine of those partials.
      const bool tree = n_blocks > kMaxInputs;
      const int64_t n_runs = (n_blocks + kMaxInputs - 1) / kMaxInputs;
      const int64_t run_blocks = (n_blocks + n_runs - 1) / n_runs;
      // Three passes: every group's block tasks, then the runs' merges, then the combines. The
      // list order is each SM's queue order and round_robin deals the list out in order, so the
      // level's block tasks take consecutive SMs, one each while they fit (interleaved with the
      // merges, llama-3.2-1b's 128 blocks and 16 merges at a 4,096 context wrapped past 132 SMs
      // and put two ~17 µs walks on one SM, back to back).
      const auto group_of = [&](int64_t gi) { return by_head ? fmt::format("[h{}]", gi) : ""; };
      const auto head_tag = [&](int64_t gi) { return by_head ? fmt::format("_h{}", gi) : ""; };
      // runs[gi][run]: the run's block partials.
      std::vector<std::vector<std::vector<int64_t>>> runs(static_cast<size_t>(n_groups));
      for (int64_t gi = 0; gi < n_groups; ++gi) {
        const std::string group = group_of(gi);
        for (int64_t b0 = 0; b0 < n_blocks; b0 += run_blocks) {
          const int64_t run = b0 / run_blocks, b1 = std::min(n_blocks, b0 + run_blocks);
          const int64_t counter = g.shared_counter(
              ap + "attention partials" + group + (tree ? fmt::format("[run{}]", run) : ""));
          std::vector<int64_t>& run_parts = runs[size_t(gi)].emplace_back();
          for (int64_t b = b0; b < b1; ++b) {
            const int64_t len = block_keys(b);
            const int64_t part =
                g.act(fmt::format("{}attn{}_part{}", ap, head_tag(gi), b), {group_heads, HD + 2});
            Params params =
                block_params(b, attention_flags::kPartial | attention_flags::kRuntimeWindow);
            if (by_head) {
              params.set_int("n_off", gi * group_heads);
              params.set_int("N_tile", group_heads);
            }
            attention_task(std::move(params), part, counter,
                           fmt::format("{}attention{}[kv{}]", ap, group, b),
                           kv_bytes(len) / n_groups, 4 * QD * len / n_groups, gi);
            run_parts.push_back(part);
          }
          for (int64_t part : run_parts) g.mark_ready(part, Wait{counter, b1 - b0});
        }
      }
      // What each group's last combine merges: its blocks' partials, or its runs' merges.
      std::vector<std::vector<int64_t>> partials(static_cast<size_t>(n_groups));
      for (int64_t gi = 0; gi < n_groups; ++gi) {
        if (!tree) {
          partials[size_t(gi)] = std::move(runs[size_t(gi)].front());
          continue;
        }
        const std::string group = group_of(gi);
        const int64_t merge_counter = g.shared_counter(ap + "attention partial merges" + group);
        for (size_t run = 0; run < runs[size_t(gi)].size(); ++run) {
          const std::vector<int64_t>& run_parts = runs[size_t(gi)][run];
          const int64_t merged = g.act(fmt::format("{}attn{}_merge{}", ap, head_tag(gi), run),
                                       {group_heads, HD + 2});
          g.shared_task(Op::ATTENTION_COMBINE, run_parts, merged, merge_counter,
                        ints({{"head_dim", HD}, {"flags", attention_flags::kPartial}}),
                        fmt::format("{}attention_merge{}[run{}]", ap, group, run), 0,
                        4 * QD * int64_t(run_parts.size()) / n_groups);
          partials[size_t(gi)].push_back(merged);
        }
        for (int64_t merged : partials[size_t(gi)])
          g.mark_ready(merged, Wait{merge_counter, int64_t(partials[size_t(gi)].size())});
      }
      for (int64_t gi = 0; gi < n_groups; ++gi) {
        const std::vector<int64_t>& parts = partials[size_t(gi)];
        if (by_head) {
          g.shared_task(Op::ATTENTION_COMBINE, parts, attn, attn_counter,
                        ints({{"head_dim", HD}, {"n_off", gi * group_heads}, {"N_tile", group_heads}}),
                        ap + "attention_combine" + group_of(gi), 0,
                        4 * QD * int64_t(parts.size()) / n_groups);
        } else {
          g.task(Op::ATTENTION_COMBINE, parts, attn, ints({{"head_dim", HD}, {"n_heads", NH}}),
                 ap + "attention_combine", 0, 4 * QD * int64_t(parts.size()));
        }
      }
      if (by_head) g.mark_ready(attn, Wait{attn_counter, n_groups});
    }

    if (tp) {
      // Cluster c < PA: o_proj of its heads' merge (their columns of W_o), plus the residual on
      // cluster 0 and zeros elsewhere, into a partial of the hidden vector; every cluster sums
      // the partials into its copy. Then cluster c's features: gate/up rows, SwiGLU, down
      // columns (the residual again on cluster 0 alone), and the same sums.
      const std::string w_o_name = wp + "self_attn.o_proj.weight";
      const int64_t heads = NH / PA, K = heads * HD;
      std::vector<int64_t> o_parts;
      std::vector<std::vector<Wait>> o_ready;
      for (int64_t c = 0; c < PA; ++c) {
        g.place(c);
        const std::string tag = fmt::format("[c{}]", c);
        const int64_t w = g.weight_box(w_o_name, SourceBox{0, H, c * K, K}, tag);
        const int64_t o = g.act(ap + "attn_partial_sum" + tag, {1, H});
        g.mark_ready(partial_stack, attention_ready[size_t(c)]);
        Params merge = ints({{"head_dim", HD},
                             {"n_heads", NH},
                             {"m_off", c * heads},
                             {"kv_len", tiling.kv_run.value_or(*tiling.kv_block)},
                             {"flags", attention_flags::kRuntimeWindow}});
        o_ready.push_back(partial_tiles(Op::COMBINE_GEMV_ADD_TILE,
                                        {partial_stack, w, c == 0 ? hs[0] : zeros}, merge,
                                        g.abytes(H), o, K, "o_proj", ap + "o_proj" + tag));
        o_parts.push_back(o);
      }
      // Every cluster's MLP reads the attention's sum.
      const std::vector<int64_t> h1s = cluster_sums(o_parts, o_ready, ap + "attn_residual", P);
      std::vector<int64_t> d_parts;
      std::vector<std::vector<Wait>> d_ready;
      for (int64_t c = 0; c < P; ++c) {
        g.place(c);
        const std::string tag = fmt::format("[c{}]", c);
        const int64_t f0 = schedule::tp_feature_start(F, P, c);
        const int64_t fc = schedule::tp_feature_start(F, P, c + 1) - f0;
        const int64_t gate = g.weight_box(wp + "mlp.gate_proj.weight", SourceBox{f0, fc, 0, H}, tag);
        const int64_t up = g.weight_box(wp + "mlp.up_proj.weight", SourceBox{f0, fc, 0, H}, tag);
        const int64_t down = g.weight_box(wp + "mlp.down_proj.weight", SourceBox{0, H, f0, fc}, tag);
        const int64_t act = g.act(ap + "silu_mul" + tag, {1, fc});
        g.tiles(Op::RMSNORM_GEMV_GLU_TILE, {h1s[size_t(c)], w_mnorm, gate, up}, norm, g.wbytes(H),
                false, act, H, fc, tiling.n_tile("gate_proj"), ap + "gate_up_proj" + tag,
                /*n_weights=*/2);
        const int64_t d = g.act(ap + "mlp_partial_sum" + tag, {1, H});
        d_ready.push_back(partial_tiles(Op::GEMV_ADD_TILE, {act, down, c == 0 ? h1s[0] : zeros},
                                        {}, g.abytes(H), d, fc, "down_proj",
                                        ap + "down_proj" + tag));
        d_parts.push_back(d);
      }
      // The MLP's sum is read by the next layer's attention clusters (cluster 0's o_proj adds
      // it as the residual), after the last layer by the final norm alone: no copy nobody reads.
      const bool last = l + 1 == m.num_hidden_layers;
      hs = cluster_sums(d_parts, d_ready, ap + "mlp_residual", last ? 1 : PA);
      h = hs[0];
      g.place(-1);
      continue;
    }

    // [gemv, silu_mul, gemv]: o_proj's tiles also write h1 into the layer's output, where the
    // MLP's tiles then add their slices of down_proj.
    const int64_t mlp_out = fusion.glu_down ? g.act(ap + "mlp_residual", {1, H}) : -1;
    int64_t h1 = -1;
    if (partial_stack >= 0) {
      // COMBINE_GEMV_ADD_TILE: each tile merges the live blocks' partials (flags bit 2 with the
      // blocks' length) into its x, then o_proj and the residual.
      h1 = g.act(ap + "attn_residual", {1, H});
      std::vector<int64_t> in{partial_stack, w_o, h};
      if (b_o) in.push_back(*b_o);
      // Partial s's first key is s x kv_len: s B, or s R for strided blocks (whose first runs
      // come first), so the partials past pos / kv_len are empty either way.
      Params merge = ints({{"head_dim", HD},
                           {"n_heads", NH},
                           {"kv_len", tiling.kv_run.value_or(*tiling.kv_block)},
                           {"flags", attention_flags::kRuntimeWindow}});
      // est_bytes as GEMV_ADD_TILE's (the partials, like the combine's, are L2 traffic).
      g.tiles(Op::COMBINE_GEMV_ADD_TILE, std::move(in), merge, g.abytes(H), b_o.has_value(), h1,
              QD, H, tiling.n_tile("o_proj"), ap + "o_proj", 1, mlp_out);
    } else {
      h1 = gemv_add(attn, w_o, b_o, h, QD, "o_proj", ap, "attn_residual", fusion.gemv_add, mlp_out);
    }
    if (fusion.glu_down) {
      // RMSNORM_GEMV_GLU_DOWN_TILE: each tile's features, silu(gate) * up, times their columns of
      // down_proj, added into mlp_out (the biases, with mlp_bias: gate, up, down, the last added
      // once, by the tile at feature 0). The tiles wait on h1's counter, which also covers
      // o_proj's copy into mlp_out; readers of the sum wait for all of them.
      std::vector<int64_t> in{h1, w_mnorm, w_gate, w_up, w_down};
      if (b_gate) {
        in.push_back(*b_gate);
        in.push_back(*b_up);
        in.push_back(*b_down);
      }
      g.tiles(Op::RMSNORM_GEMV_GLU_DOWN_TILE, std::move(in), norm, g.wbytes(H), b_gate.has_value(),
              mlp_out, H, F, tiling.n_tile("gate_proj"), ap + "mlp", /*n_weights=*/3);
      h = mlp_out;
      continue;
    }

    // ---- MLP ----
    const Normed h1n = normed(h1, w_mnorm, ap + "mlp_norm", ap + "post_attention_layernorm");
    if (fusion.gemv_silu_mul) {
      // ["gemv", "silu_mul"]: one GLU tile per range of features reads those gate rows and
      // those up rows and writes silu(gate) * up, so down_proj's input is one buffer and the
      // gate/up level writes half as many values.
      const int64_t act = g.act(ap + "silu_mul", {1, F});
      const bool norm_in_tile = h1n.norm_task_out < 0;
      std::vector<int64_t> in{norm_in_tile ? h1n.x : h1n.norm_task_out};
      if (norm_in_tile) in.push_back(h1n.norm_w);
      in.push_back(w_gate);
      in.push_back(w_up);
      if (b_gate) {  // mlp_bias gives gate_proj and up_proj a bias each
        in.push_back(*b_gate);
        in.push_back(*b_up);
      }
      g.tiles(norm_in_tile ? Op::RMSNORM_GEMV_GLU_TILE : Op::GEMV_GLU_TILE, std::move(in),
              norm_in_tile ? norm : Params{}, norm_in_tile ? g.wbytes(H) : 0, b_gate.has_value(),
              act, H, F, tiling.n_tile("gate_proj"), ap + "gate_up_proj", /*n_weights=*/2);
      h = gemv_add(act, w_down, b_down, h1, F, "down_proj", ap, "mlp_residual", fusion.gemv_add);
      continue;
    }
    const int64_t gate = g.act(ap + "gate", {1, F});
    const int64_t up = g.act(ap + "up", {1, F});
    normed_gemv(h1n, w_gate, b_gate, gate, F, "gate_proj", ap + "gate_proj");
    normed_gemv(h1n, w_up, b_up, up, F, "up_proj", ap + "up_proj");
    if (fusion.silu_mul_gemv && fusion.gemv_add) {
      // Both groups: every down_proj tile computes silu(gate) * up, its rows, and adds the
      // residual (SILU_MUL_GEMV_ADD_TILE): the layer ends with the down level, no ADD hop.
      const int64_t h2 = g.act(ap + "mlp_residual", {1, H});
      std::vector<int64_t> in{gate, up, w_down, h1};
      if (b_down) in.push_back(*b_down);
      g.tiles(Op::SILU_MUL_GEMV_ADD_TILE, std::move(in), {}, g.abytes(H), b_down.has_value(), h2,
              F, H, tiling.n_tile("down_proj"), ap + "down_proj");
      h = h2;
    } else if (fusion.silu_mul_gemv) {
      // Every down_proj tile computes silu(gate) * up itself; the residual is an ADD task.
      const int64_t down = g.act(ap + "down", {1, H});
      std::vector<int64_t> in{gate, up, w_down};
      if (b_down) in.push_back(*b_down);
      g.tiles(Op::SILU_MUL_GEMV_TILE, std::move(in), {}, 0, b_down.has_value(), down, F, H,
              tiling.n_tile("down_proj"), ap + "down_proj");
      const int64_t h2 = g.act(ap + "mlp_residual", {1, H});
      g.task(Op::ADD, {down, h1}, h2, {}, ap + "mlp_residual", 0, H);
      h = h2;
    } else {
      const int64_t act = g.act(ap + "silu_mul", {1, F});
      g.task(Op::SILU_MUL, {gate, up}, act, {}, ap + "silu_mul", 0, 4 * F);
      h = gemv_add(act, w_down, b_down, h1, F, "down_proj", ap, "mlp_residual", fusion.gemv_add);
    }
  }

  const int64_t w_fnorm = g.weight("model.norm.weight", {H});
  const int64_t w_lm = m.tie_word_embeddings ? w_embed : g.weight("lm_head.weight", {V, H});
  const Normed hn = normed(h, w_fnorm, "final_norm", "final_norm");
  const int64_t logits =
      p.new_buffer(std::string(names::kLogits), BufferKind::IO_OUTPUT, A, {1, V});
  normed_gemv(hn, w_lm, std::nullopt, logits, V, "lm_head", "lm_head");
  const int64_t next =
      p.new_buffer(std::string(names::kNextToken), BufferKind::IO_OUTPUT, DType::I32, {1});
  const int64_t sampling_floats = p.new_buffer(std::string(names::kSamplingFloats), BufferKind::IO_INPUT,
                                               DType::F32, {PackedSampling::kFloats});
  const int64_t sampling_ints = p.new_buffer(std::string(names::kSamplingInts), BufferKind::IO_INPUT,
                                             DType::I32, {PackedSampling::kInts});
  if (tiling.argmax_n_tile && *tiling.argmax_n_tile < V) {
    // Partial argmaxes over slices of the logits, on many SMs, then one reduce of their
    // (value, index) pairs (docs/OPCODES.md): one SM scanning all V logits was a 17 us task.
    // Slices start at multiples of 4, so the device reads them with 16-byte loads.
    const int64_t n = (*tiling.argmax_n_tile + 3) / 4 * 4;
    const int64_t parts = (V + n - 1) / n;
    const int64_t pairs = g.act("sample_argmax_pairs", {parts, 2});
    const int64_t counter = g.shared_counter("sample_argmax partials");
    for (int64_t k = 0; k < parts; ++k) {
      const int64_t len = std::min(n, V - k * n);
      g.shared_task(Op::SAMPLE_ARGMAX, {logits}, pairs, counter,
                    ints({{"n_off", k * n}, {"N_tile", len}, {"m_off", k}}),
                    fmt::format("sample_argmax[t{}]", k), 0, len);
    }
    g.mark_ready(pairs, Wait{counter, parts});
    // The reduce is the step's last level: greedy from the pairs, or a draw from the logits
    // with the settings the host wrote (docs/OPCODES.md, SAMPLE_ARGMAX flags bit 1).
    g.task(Op::SAMPLE_ARGMAX, {pairs, logits, sampling_floats, sampling_ints}, next,
           ints({{"flags", sample_flags::kReduce | sample_flags::kSample}}), "sample_argmax_reduce",
           0, parts);
  } else {
    g.task(Op::SAMPLE_ARGMAX, {logits, sampling_floats, sampling_ints}, next,
           ints({{"flags", sample_flags::kSample}}), "sample_argmax", 0, V);
  }

  if (tp) {
    // Each cluster's tasks dealt round robin over its SMs (a sum's slice on its rank), the
    // rest over every cluster's.
    std::vector<int64_t> next(size_t(P), 0);
    int64_t next_any = 0;
    for (size_t i = 0; i < p.tasks.size(); ++i) {
      const auto& place = g.placements()[i];
      p.tasks[i].sm = place.cluster < 0 ? next_any++ % (P * CS)
                      : place.rank >= 0 ? place.cluster * CS + place.rank
                                        : place.cluster * CS + next[size_t(place.cluster)]++ % CS;
    }
  } else {
    schedule::assign_sms(p, config, target);
  }
  p.pages = schedule::allocate_pages(p, config.page_allocation);

  const ValidationResult v = validate(p);
  if (!v.ok)
    throw LoweringError("lowering bug: validate() rejected the lowered program\n" + v.report());
  return p;
}

}  // namespace amk
