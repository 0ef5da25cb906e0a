// ATTENTION_TILE (one decode query against a KV window, GQA) and ATTENTION_COMBINE (the
// flash-decoding merge of split-KV partials).
//
// Head h reads KV head h / (n_heads / n_kv_heads): torch's repeat_interleave of the KV heads.
// Per head, with s_j = scale * q . k_j over the window j in [kv_start, kv_start + kv_len) (param
// kv_stride > 0: that run every kv_stride positions while whole runs fit the cache, amk/kv_window.h):
//   m = max_j s_j,  l = sum_j exp(s_j - m),  acc = sum_j exp(s_j - m) v_j
// A full tile writes acc / l; a PARTIAL tile (flags bit 1) writes [acc | m | l] per head so
// that ATTENTION_COMBINE can merge shards exactly:
//   M = max_p m_p,  out = sum_p exp(m_p - M) acc_p / sum_p exp(m_p - M) l_p.
//
// Head ranges (optional params n_off and N_tile, both or neither; docs/OPCODES.md): a tile runs
// only query heads [n_off, n_off + N_tile), whole GQA groups, and its output holds just those
// heads (or, not partial, is a row of every head of which it writes those); a combine merges
// partials of N_tile heads into heads [n_off, n_off + N_tile) of its one-row output and leaves
// the rest of it alone. This splits a layer's attention over SMs by
// KV head as well as by KV block.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "amk/kv_window.h"
#include "amk/op_flags.h"
#include "vm/reference/ops/numeric.h"
#include "vm/reference/ops/ops.h"

namespace amk::ref {

namespace {

constexpr int64_t kFlagCausal = attention_flags::kCausal;
constexpr int64_t kFlagPartial = attention_flags::kPartial;
constexpr int64_t kFlagRuntimeWindow = attention_flags::kRuntimeWindow;

std::string num(int64_t v) { return std::to_string(v); }

// The optional head range [n_off, n_off + N_tile) of `n_heads`: both params or neither; with
// neither, every head. Each must be a multiple of `align` (the GQA group size for a tile).
struct HeadRange {
  int64_t first = 0, count = 0;
};
HeadRange head_range(const OpContext& c, int64_t n_heads, int64_t align) {
  const bool has_off = c.has_param("n_off"), has_tile = c.has_param("N_tile");
  if (!has_off && !has_tile) return {0, n_heads};
  if (has_off != has_tile) c.fail("params n_off and N_tile (a head range) come together");
  const int64_t off = c.int_param("n_off"), tile = c.int_param("N_tile");
  if (off < 0 || tile < 1 || off + tile > n_heads || off % align != 0 || tile % align != 0)
    c.fail("head range n_off " + num(off) + ", N_tile " + num(tile) + " must lie in the " +
           num(n_heads) + " heads" +
           (align > 1 ? " and be whole GQA groups (multiples of " + num(align) + ")" : ""));
  return {off, tile};
}

}  // namespace

void op_attention_tile(const OpContext& c) {
  c.check_registry();
  const int64_t head_dim = c.int_param("head_dim");
  const int64_t n_heads = c.int_param("n_heads");
  const int64_t n_kv = c.int_param("n_kv_heads");
  const int64_t kv_start = c.int_param("kv_start");
  const int64_t kv_len_max = c.int_param("kv_len");
  const int64_t kv_stride = c.int_param_or("kv_stride", 0);
  const double scale = c.real_param("scale");
  const int64_t flags = c.int_param_or("flags", 0);
  if (head_dim < 1) c.fail("param head_dim must be >= 1, got " + num(head_dim));
  if (n_heads < 1 || n_kv < 1 || n_heads % n_kv != 0)
    c.fail("param n_heads " + num(n_heads) + " must be a positive multiple of n_kv_heads " +
           num(n_kv));
  if (kv_start < 0) c.fail("param kv_start must be >= 0, got " + num(kv_start));
  if (kv_len_max < 0) c.fail("param kv_len must be >= 0, got " + num(kv_len_max));
  if (kv_stride < 0 || (kv_stride > 0 && (kv_len_max < 1 || kv_stride < kv_len_max)))
    c.fail("param kv_stride " + num(kv_stride) + " must be 0 or a strided window's period, >= kv_len " +
           num(kv_len_max) + " >= 1");
  if ((flags & ~(kFlagCausal | kFlagPartial | kFlagRuntimeWindow)) != 0)
    c.fail("param flags " + num(flags) +
           " has unknown bits (bit 0 causal, bit 1 partial, bit 2 runtime window)");
  const bool partial = (flags & kFlagPartial) != 0;

  const Tensor& q = c.input(0);
  const Tensor& k = c.input(1);
  const Tensor& v = c.input(2);
  // Input 3 is accepted and not read, as in reference.py: giving it a meaning here would make
  // programs written for that reference compute something else.
  require_float(c, q, "input 0 (q)");
  require_numel(c, q, "input 0 (q)", n_heads * head_dim, "n_heads x head_dim");
  require_float(c, k, "input 1 (k cache)");
  require_float(c, v, "input 2 (v cache)");
  require_rank(c, k, "input 1 (k cache)", 3);
  if (k.shape[0] != n_kv || k.shape[2] != head_dim)
    c.fail("input 1 (k cache) has shape " + shape_str(k.shape) + ", expected [" + num(n_kv) +
           ", max_seq, " + num(head_dim) + "] (n_kv_heads, head_dim)");
  require_shape(c, v, "input 2 (v cache)", k.shape);
  const int64_t max_seq = k.shape[1];
  if (kv_start + kv_len_max > max_seq)
    c.fail("kv_start " + num(kv_start) + " + kv_len " + num(kv_len_max) + " exceeds the cache's " +
           num(max_seq) + " rows");
  // Runtime window: the window's keys at positions <= pos (the keys written so far); a block
  // wholly past pos is empty.
  const KvWindow window{kv_start, kv_len_max, kv_stride, max_seq};
  const int64_t kv_len = (flags & kFlagRuntimeWindow) != 0
                             ? window.seen(c.step_position("flags bit 2 (runtime window)"))
                             : window.keys();
  const int64_t rep = n_heads / n_kv;
  const HeadRange heads = head_range(c, n_heads, rep);
  Tensor& out = c.output(0);
  require_float(c, out, "output 0");
  const int64_t width = partial ? head_dim + 2 : head_dim;
  // A head range's full (not partial) result may also go to heads [n_off, n_off + N_tile) of a
  // row of every head, as a head-ranged ATTENTION_COMBINE writes it: one task per head group
  // then covers the whole window with no combine.
  const bool slice =
      attention_flags::writes_head_slice(partial, heads.count, n_heads, head_dim, out.numel());
  // A partial may go to its rows of slab m_off of a stack of partials of every head,
  // [S * n_heads, head_dim + 2], which COMBINE_GEMV_ADD_TILE merges.
  const bool stack =
      attention_flags::writes_partial_stack(partial, heads.count, n_heads, head_dim, out.numel());
  const int64_t m_off = c.int_param_or("m_off", 0);
  if (stack && (m_off < 0 || m_off >= out.numel() / (n_heads * width)))
    c.fail("param m_off " + num(m_off) + " is not a slab of output 0, a stack of " +
           num(out.numel() / (n_heads * width)) + " partials");
  if (!stack && m_off != 0)
    c.fail("param m_off " + num(m_off) + " needs output 0 to be a stack of partials");
  if (!slice && !stack)
    require_numel(c, out, "output 0", heads.count * width,
                  std::string(heads.count == n_heads ? "n_heads" : "N_tile") +
                      (partial ? " x (head_dim + 2) for a partial"
                               : " x head_dim (or n_heads x head_dim: the range's slice)"));

  const std::vector<double> qv = load_all(q);
  std::vector<double> result(size_t(heads.count * width), 0.0);
  std::vector<double> score(static_cast<size_t>(kv_len));
  std::vector<double> row(static_cast<size_t>(head_dim));
  for (int64_t h = heads.first; h < heads.first + heads.count; ++h) {
    const int64_t g = h / rep;
    const double* qh = &qv[size_t(h * head_dim)];
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < kv_len; ++j) {
      const int64_t base = kv_cache_offset(max_seq, head_dim, g, window.position(j), 0);
      double dot = 0;
      load_range(k, base, row);
      for (int64_t d = 0; d < head_dim; ++d) dot += qh[d] * row[size_t(d)];
      score[size_t(j)] = scale * dot;
      m = std::fmax(m, score[size_t(j)]);
    }
    double l = 0;
    double* acc = &result[size_t((h - heads.first) * width)];
    for (int64_t j = 0; j < kv_len; ++j) {
      const double e = std::exp(score[size_t(j)] - m);
      l += e;
      const int64_t base = kv_cache_offset(max_seq, head_dim, g, window.position(j), 0);
      load_range(v, base, row);
      for (int64_t d = 0; d < head_dim; ++d) acc[d] += e * row[size_t(d)];
    }
    if (partial) {
      // An empty window leaves acc = 0 and writes m = -inf, l = 0: zero weight in the combine.
      acc[head_dim] = m;
      acc[head_dim + 1] = l;
    } else if (kv_len > 0) {
      for (int64_t d = 0; d < head_dim; ++d) acc[d] /= l;
    }  // else: attention over nothing is 0, as torch's softmax/einsum over an empty axis gives
  }
  if (stack) {
    const int64_t first = (m_off * n_heads + heads.first) * width;
    for (int64_t i = 0; i < heads.count * width; ++i) store(out, first + i, result[size_t(i)]);
    return;
  }
  if (!slice) return store_all(out, result);
  for (int64_t i = 0; i < heads.count * head_dim; ++i)
    store(out, heads.first * head_dim + i, result[size_t(i)]);
}

void merge_flash_partials(const std::vector<const double*>& parts, int64_t n_heads,
                          int64_t head_dim, double* out, double* partial_out) {
  const int64_t width = head_dim + 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    // Only shards that saw keys (l > 0) take part, so an empty shard never yields exp(-inf + inf).
    double M = -std::numeric_limits<double>::infinity();
    for (const double* part : parts)
      if (part[h * width + head_dim + 1] > 0) M = std::fmax(M, part[h * width + head_dim]);
    double L = 0;
    double* acc = out + h * head_dim;
    for (const double* part : parts) {
      const double* ph = part + h * width;
      if (!(ph[head_dim + 1] > 0)) continue;
      const double w = std::exp(ph[head_dim] - M);
      L += w * ph[head_dim + 1];
      for (int64_t d = 0; d < head_dim; ++d) acc[d] += w * ph[d];
    }
    if (partial_out) {
      partial_out[h * width + head_dim] = M;  // -inf when every shard is empty
      partial_out[h * width + head_dim + 1] = L;
      for (int64_t d = 0; d < head_dim; ++d) partial_out[h * width + d] = acc[d];
      continue;
    }
    // Every shard empty: the head attended to nothing and is 0, as in reference.py.
    if (L > 0)
      for (int64_t d = 0; d < head_dim; ++d) acc[d] /= L;
  }
}

void op_attention_combine(const OpContext& c) {
  c.check_registry();
  Tensor& out = c.output(0);
  require_float(c, out, "output 0");
  const int64_t pn = c.input(0).numel();
  // With a head range the output is one row of all heads and this combine fills its slice.
  const bool ranged = c.has_param("n_off") || c.has_param("N_tile");
  if (ranged && !c.has_param("head_dim"))
    c.fail("a head range (n_off, N_tile) needs param head_dim");
  // flags bit 1 (attention_flags::kPartial): the merge stays a flash partial [acc | m | l] per
  // head, unnormalised, so a second combine can merge it again (a combine tree over more
  // shards than one combine's inputs).
  const int64_t flags = c.int_param_or("flags", 0);
  if ((flags & ~attention_flags::kPartial) != 0)
    c.fail("param flags " + num(flags) + ": ATTENTION_COMBINE knows only bit 1 (partial output)");
  const bool partial = (flags & attention_flags::kPartial) != 0;
  if (partial && ranged)
    c.fail("a partial combine (flags bit 1) writes its heads' partial whole: no head range");
  if (ranged && out.shape.size() > 1 && out.numel() != out.shape.back())
    c.fail("a head range writes a slice of a one-row output; output 0 has shape " +
           shape_str(out.shape));
  if (partial && !c.has_param("head_dim"))
    c.fail("a partial combine (flags bit 1) needs param head_dim");
  if (partial && out.numel() != pn)
    c.fail("a partial combine writes a partial: output 0 has " + num(out.numel()) +
           " elements, its partials " + num(pn));
  // The merged heads' elements as a final output counts them (head_dim a head).
  const int64_t hd_param = c.int_param_or("head_dim", 0);
  const int64_t on = ranged    ? c.int_param("N_tile") * hd_param
                     : partial ? (hd_param > 0 ? pn / (hd_param + 2) * hd_param : 0)
                               : out.numel();
  for (size_t p = 0; p < c.num_inputs(); ++p) {
    const std::string what = "input " + num(int64_t(p)) + " (partial)";
    require_float(c, c.input(p), what);
    require_numel(c, c.input(p), what, pn, "the size of input 0");
  }
  // head_dim / n_heads are optional: the partial and output sizes determine them, since
  // partial = n_heads * (head_dim + 2) and output = n_heads * head_dim.
  int64_t n_heads = c.int_param_or("n_heads", (pn - on) / 2);
  int64_t head_dim = c.int_param_or("head_dim", n_heads > 0 ? on / n_heads : 0);
  if (!c.has_param("n_heads") && c.has_param("head_dim") && head_dim > 0) n_heads = on / head_dim;
  if (ranged) n_heads = c.int_param("N_tile");
  if (n_heads < 1 || head_dim < 1 || n_heads * head_dim != on || n_heads * (head_dim + 2) != pn)
    c.fail("partials of " + num(pn) + " elements and an output of " + num(on) + " elements (shape " +
           shape_str(out.shape) + ") are not [n_heads, head_dim + 2] and [n_heads, head_dim]" +
           (c.has_param("head_dim") || c.has_param("n_heads")
                ? " for params head_dim " + num(head_dim) + ", n_heads " + num(n_heads)
                : std::string()));

  std::vector<std::vector<double>> loaded;
  std::vector<const double*> parts;
  for (size_t p = 0; p < c.num_inputs(); ++p) loaded.push_back(load_all(c.input(p)));
  for (const auto& part : loaded) parts.push_back(part.data());
  std::vector<double> result(size_t(on), 0.0);
  std::vector<double> partial_result(partial ? size_t(pn) : 0, 0.0);
  merge_flash_partials(parts, n_heads, head_dim, result.data(),
                       partial ? partial_result.data() : nullptr);
  if (partial) return store_all(out, partial_result);
  if (!ranged) return store_all(out, result);
  const int64_t all_heads = out.numel() / head_dim;
  if (c.has_param("n_heads") && c.int_param("n_heads") != all_heads)
    c.fail("with a head range, param n_heads " + num(c.int_param("n_heads")) +
           " must be the output's head count " + num(all_heads));
  const HeadRange heads = head_range(c, all_heads, 1);
  if (heads.count != n_heads || out.numel() % head_dim != 0)
    c.fail("head range n_off " + num(heads.first) + ", N_tile " + num(heads.count) +
           " does not fit an output of " + num(out.numel()) + " elements (head_dim " +
           num(head_dim) + ")");
  for (int64_t i = 0; i < on; ++i) store(out, heads.first * head_dim + i, result[size_t(i)]);
}

}  // namespace amk::ref

namespace amk::ref {

// ROPE_KV_ATTENTION_TILE: the decode attention of one task with its prologue, composed of the
// existing ops run under their own contexts (one implementation per instruction):
//   q_t = the task's query heads of q; k_t, v_t = their KV heads of k, v (flat GEMV rows)
//   flags bit 3: q_t = RMSNORM(q_t, q_norm_w), k_t = RMSNORM(k_t, k_norm_w) per head (eps)
//   q_t, k_t = ROPE(.., pos) (flags bit 4: ROPE_FREQ with the inv_freq input)
//   if the window (kv_start, kv_len, kv_stride: amk/kv_window.h) holds pos: position pos of the task's KV heads'
//     histories = k_t, v_t (KV_APPEND's row write, restricted to those heads)
//   out = ATTENTION_TILE(q_t, k_cache, v_cache) with the same window, head range and flags.
// pos is the step's position; the runtime window (flags bit 2) is required. The F32
// intermediates are the unfused program's activation buffers, so the logits match it exactly.
void op_rope_kv_attention_tile(const OpContext& c) {
  c.check_registry();
  const int64_t flags = c.int_param("flags");
  const int64_t known = kFlagCausal | kFlagPartial | kFlagRuntimeWindow | attention_flags::kHeadNorm |
                        attention_flags::kRopeTable;
  if ((flags & ~known) != 0)
    c.fail("param flags " + num(flags) + " has unknown bits (bit 0 causal, bit 1 partial, bit 2 "
           "runtime window, bit 3 head norm, bit 4 rope table)");
  if ((flags & kFlagRuntimeWindow) == 0)
    c.fail("param flags " + num(flags) + " must set bit 2 (runtime window): the new row is the "
           "step's position");
  const bool norm = (flags & attention_flags::kHeadNorm) != 0;
  const bool table = (flags & attention_flags::kRopeTable) != 0;
  const size_t n_in = 5 + (norm ? 2 : 0) + (table ? 1 : 0);
  if (c.num_inputs() != n_in)
    c.fail("has " + num(int64_t(c.num_inputs())) + " inputs, flags " + num(flags) + " need " +
           num(int64_t(n_in)) + " (q, k, v, k_cache, v_cache" + (norm ? ", q_norm_w, k_norm_w" : "") +
           (table ? ", inv_freq" : "") + ")");
  const int64_t head_dim = c.int_param("head_dim");
  const int64_t n_heads = c.int_param("n_heads"), n_kv = c.int_param("n_kv_heads");
  if (head_dim < 2 || head_dim % 2 != 0)
    c.fail("param head_dim must be even and >= 2, got " + num(head_dim));
  if (n_heads < 1 || n_kv < 1 || n_heads % n_kv != 0)
    c.fail("param n_heads " + num(n_heads) + " must be a positive multiple of n_kv_heads " +
           num(n_kv));
  const int64_t rep = n_heads / n_kv;
  const HeadRange heads = head_range(c, n_heads, rep);
  const int64_t kv0 = heads.first / rep, kvc = heads.count / rep;
  const Tensor& q = c.input(0);
  const Tensor& k = c.input(1);
  const Tensor& v = c.input(2);
  require_float(c, q, "input 0 (q)");
  require_float(c, k, "input 1 (k)");
  require_float(c, v, "input 2 (v)");
  require_numel(c, q, "input 0 (q)", n_heads * head_dim, "n_heads x head_dim");
  require_numel(c, k, "input 1 (k)", n_kv * head_dim, "n_kv_heads x head_dim");
  require_numel(c, v, "input 2 (v)", n_kv * head_dim, "n_kv_heads x head_dim");
  Tensor& k_cache = c.output(1);
  Tensor& v_cache = c.output(2);
  for (int i : {1, 2}) {
    const Tensor& in = c.input(size_t(i) + 2);
    const Tensor& out = c.output(size_t(i));
    if (out.dtype != in.dtype || out.shape != in.shape)
      c.fail("output " + num(i) + " must be the cache, input " + num(i + 2));
  }
  require_rank(c, k_cache, "output 1 (k cache)", 3);
  if (k_cache.shape[0] != n_kv || k_cache.shape[2] != head_dim)
    c.fail("output 1 (k cache) has shape " + shape_str(k_cache.shape) + ", expected [" +
           num(n_kv) + ", max_seq, " + num(head_dim) + "]");
  const int64_t max_seq = k_cache.shape[1];
  if (&k_cache != &c.input(3)) k_cache.bytes = c.input(3).bytes;
  if (&v_cache != &c.input(4)) v_cache.bytes = c.input(4).bytes;

  const int64_t pos = c.step_position("flags bit 2 (runtime window)");
  Tensor positions = Tensor::zeros(DType::I32, {1});
  positions.set_int(0, pos);
  // Rows of head_dim: copy the task's heads, then norm and rotate them as the unfused ops do.
  const auto heads_of = [&](const Tensor& src, int64_t first, int64_t count) {
    Tensor t = Tensor::zeros(DType::F32, {count, head_dim});
    for (int64_t i = 0; i < count * head_dim; ++i) store(t, i, load(src, first * head_dim + i));
    return t;
  };
  const auto prologue = [&](Tensor x, size_t norm_input) {
    if (norm) {
      Params np;
      np.set_real("eps", c.real_param("eps"));
      np.set_int("hidden", head_dim);
      Tensor xn = Tensor::zeros(DType::F32, x.shape);
      const std::array<const Tensor*, 2> in{&x, &c.input(norm_input)};
      const std::array<Tensor*, 1> out{&xn};
      op_rmsnorm(OpContext(Op::RMSNORM, np, in, out, c.step()));
      x = std::move(xn);
    }
    Params rp;
    rp.set_int("head_dim", head_dim);
    if (!table) rp.set_real("theta", c.real_param("theta"));
    Tensor xr = Tensor::zeros(DType::F32, x.shape);
    std::array<const Tensor*, 3> in{&x, &positions, table ? &c.input(n_in - 1) : nullptr};
    const std::array<Tensor*, 1> out{&xr};
    const OpContext rc(table ? Op::ROPE_FREQ : Op::ROPE, rp, std::span(in.data(), table ? 3 : 2),
                       out, c.step());
    if (table) op_rope_freq(rc); else op_rope(rc);
    return xr;
  };
  const Tensor q_t = prologue(heads_of(q, heads.first, heads.count), 5);
  const KvWindow window{c.int_param("kv_start"), c.int_param("kv_len"),
                        c.int_param_or("kv_stride", 0), max_seq};
  if (window.index_of(pos) >= 0) {
    if (pos >= max_seq)
      c.fail("the step's position " + num(pos) + " is past the cache's " + num(max_seq) +
             " rows");
    const Tensor k_t = prologue(heads_of(k, kv0, kvc), 6);
    for (int64_t g = 0; g < kvc; ++g)
      for (int64_t d = 0; d < head_dim; ++d) {
        const int64_t at = kv_cache_offset(max_seq, head_dim, kv0 + g, pos, d);
        store(k_cache, at, load(k_t, g * head_dim + d));
        store(v_cache, at, load(v, (kv0 + g) * head_dim + d));
      }
  }
  // ATTENTION_TILE over a q whose other heads it does not read (zeros).
  Tensor q_full = Tensor::zeros(DType::F32, {1, n_heads * head_dim});
  for (int64_t i = 0; i < heads.count * head_dim; ++i)
    store(q_full, heads.first * head_dim + i, load(q_t, i));
  Params ap = c.params();
  ap.set_int("flags", flags & (kFlagCausal | kFlagPartial | kFlagRuntimeWindow));
  const std::array<const Tensor*, 3> in{&q_full, &k_cache, &v_cache};
  const std::array<Tensor*, 1> out{&c.output(0)};
  op_attention_tile(OpContext(Op::ATTENTION_TILE, ap, in, out, c.step()));
}

}  // namespace amk::ref
