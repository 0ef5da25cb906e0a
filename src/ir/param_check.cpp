// Params against buffer shapes: a task whose params address outside its buffers (a GEMV tile
// past the weight's rows or the output's columns or at a negative offset, a GEMM tile past x's
// rows, K that is not x's last dimension or the weight's columns, an append before or past the
// cache's rows, an attention window outside them, head counts that disagree with the cache or
// q, a head range outside the heads, a partial argmax outside the logits or its pairs, an embed
// row width that hidden does not divide, a norm whose hidden is not x's last dimension, a GLU
// tile whose up weight is not its gate weight's twin or whose biases are not a pair) would only
// fail in the VM, after other tasks may have written GPU memory. validate() rejects it first.
// Driven by op; each check mirrors the reference op's (src/vm/reference/ops/), and is skipped
// where a param is missing or malformed or a buffer reference is bad (those are reported by the
// structural checks).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "amk/op_flags.h"
#include "amk/op_traits.h"
#include "ir/validate_context.h"

namespace amk::detail {

namespace {

// An int32 param (a larger one is already an error of its own), or nullopt.
std::optional<int64_t> int_param(const Task& task, std::string_view key) {
  const ParamValue* v = task.params.find(key);
  if (!v || v->kind != ParamValue::Kind::Int || v->i < INT32_MIN || v->i > INT32_MAX)
    return std::nullopt;
  return v->i;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

struct TaskParams {
  const Program& p;
  int32_t t;
  Diagnostics& d;
  const Task& task() const { return p.tasks[static_cast<size_t>(t)]; }

  // Buffer `i` of inputs (or outputs), or nullptr when absent or a bad reference.
  const Buffer* in(size_t i) const { return at(task().inputs, i); }
  const Buffer* out(size_t i) const { return at(task().outputs, i); }
  const Buffer* at(const std::vector<int64_t>& list, size_t i) const {
    if (i >= list.size() || list[i] < 0 || list[i] >= static_cast<int64_t>(p.buffers.size()))
      return nullptr;
    return &p.buffers[static_cast<size_t>(list[i])];
  }
  std::string ref(const Buffer& b) const {
    return "buffer " + buffer_ref(p, static_cast<int32_t>(&b - p.buffers.data())) + " shape " +
           shape_text(b.shape);
  }
  void error(const std::string& what) const {
    d.error("task " + task_ref(p, t) + " " + std::string(name_of(task().op)) + ": " + what +
            " (params address outside the buffers)");
  }
  // Operands that disagree with each other rather than with the params.
  void operand_error(const std::string& what) const {
    d.error("task " + task_ref(p, t) + " " + std::string(name_of(task().op)) + ": " + what);
  }
};

// A present param below its minimum is an error naming it; returns whether it is usable.
bool at_least(const TaskParams& c, std::string_view key, const std::optional<int64_t>& v,
              int64_t min) {
  if (!v) return false;
  if (*v >= min) return true;
  c.error("param " + std::string(key) + " " + std::to_string(*v) + " must be >= " +
          std::to_string(min));
  return false;
}

std::string num(int64_t v) { return std::to_string(v); }

// `output_columns`: output 0 holds the tile's columns (every GEMV-shaped op but the accumulating
// RMSNORM_GEMV_GLU_DOWN_TILE, whose output is the down projection's whole row).
void check_gemv(const TaskParams& c, size_t x_at, size_t w_at, bool output_columns = true) {
  const auto K = int_param(c.task(), "K"), n_off = int_param(c.task(), "n_off"),
             n_tile = int_param(c.task(), "N_tile");
  const bool k_ok = at_least(c, "K", K, 1);
  const bool off_ok = at_least(c, "n_off", n_off, 0);
  const bool tile_ok = at_least(c, "N_tile", n_tile, 1);
  if (!k_ok || !off_ok || !tile_ok) return;
  const int64_t end = *n_off + *n_tile;  // int32 params: no int64 overflow
  // COMBINE_GEMV_ADD_TILE's x is merged from its stack of partials (check_partial_stack).
  if (const Buffer* x = c.in(x_at);
      x && !x->shape.empty() && x->shape.back() != *K && c.task().op != Op::COMBINE_GEMV_ADD_TILE)
    c.error("param K " + std::to_string(*K) + " is not the last dimension of input " +
            std::to_string(x_at) + " (x) " + c.ref(*x));
  if (c.task().op == Op::GEMM_TILE) {
    const auto m_tile = int_param(c.task(), "M_tile");
    const std::optional<int64_t> m_off =
        c.task().params.find("m_off") ? int_param(c.task(), "m_off") : std::optional<int64_t>(0);
    const bool m_tile_ok = at_least(c, "M_tile", m_tile, 1);
    const bool m_off_ok = at_least(c, "m_off", m_off, 0);
    const Buffer* x = c.in(x_at);
    if (m_tile_ok && m_off_ok && x && !x->shape.empty() && x->shape.back() == *K &&
        *m_off + *m_tile > x->numel() / *K)
      c.error("param m_off " + num(*m_off) + " + M_tile " + num(*m_tile) + " exceeds the " +
              num(x->numel() / *K) + " rows of input " + num(int64_t(x_at)) + " (x) " + c.ref(*x));
  }
  if (const Buffer* w = c.in(w_at); w && w->shape.size() == 2) {
    if (end > w->shape[0])
      c.error("param n_off " + std::to_string(*n_off) + " + N_tile " + std::to_string(*n_tile) +
              " exceeds the weight rows N " + std::to_string(w->shape[0]) + " of input " +
              std::to_string(w_at) + " (weight) " + c.ref(*w));
    if (w->shape[1] != *K)
      c.error("param K " + std::to_string(*K) + " is not the columns of input " +
              std::to_string(w_at) + " (weight) " + c.ref(*w));
  }
  if (const Buffer* o = c.out(0); output_columns && o && !o->shape.empty() && end > o->shape.back())
    c.error("param n_off " + std::to_string(*n_off) + " + N_tile " + std::to_string(*n_tile) +
            " exceeds the columns of output 0 " + c.ref(*o));
}

// A GLU tile's operands beyond check_gemv's (which checks the gate weight at w_at): the up
// weight at w_at + 1 is the gate weight's twin (shape and dtype), and the biases come as a pair
// of [N] after them (fp weights; quantized ones put their scales there, as GEMV_TILE's input 2).
// The up weight at w_at + 1 is the gate weight's twin (shape and dtype).
void check_glu_twins(const TaskParams& c, size_t w_at) {
  const Buffer* gate = c.in(w_at);
  const Buffer* up = c.in(w_at + 1);
  if (gate && up && (gate->shape != up->shape || gate->dtype != up->dtype))
    c.operand_error("input " + num(int64_t(w_at) + 1) + " (up weight) " + c.ref(*up) + " " +
                    std::string(name_of(up->dtype)) + " differs from input " +
                    num(int64_t(w_at)) + " (gate weight) " + c.ref(*gate) + " " +
                    std::string(name_of(gate->dtype)) +
                    ": both must have the same shape and dtype");
}

void check_glu(const TaskParams& c, size_t w_at) {
  const size_t n_in = c.task().inputs.size();
  if (n_in == w_at + 3)
    c.operand_error("takes the gate and up weights and optionally both biases: a bias for one "
                    "projection alone (" + num(int64_t(n_in)) + " inputs) is refused");
  check_glu_twins(c, w_at);
  const Buffer* gate = c.in(w_at);
  const auto qdtype = int_param(c.task(), "qdtype");
  if (n_in != w_at + 4 || !gate || gate->shape.size() != 2 || (qdtype && *qdtype > 4)) return;
  for (size_t i = w_at + 2; i < w_at + 4; ++i)
    if (const Buffer* b = c.in(i); b && b->shape != std::vector<int64_t>{gate->shape[0]})
      c.operand_error("input " + num(int64_t(i)) +
                      (i == w_at + 2 ? " (gate bias) " : " (up bias) ") + c.ref(*b) +
                      " is not [N] for the weights' " + num(gate->shape[0]) + " rows");
}

// GEMV_ADD_TILE / COMBINE_GEMV_ADD_TILE's optional output 1 gets output 0's tile: it must be
// another buffer of output 0's shape (the tile's columns of each).
void check_second_output(const TaskParams& c) {
  const Buffer* first = c.out(0);
  const Buffer* second = c.out(1);
  if (!first || !second) return;
  if (first->id == second->id)
    c.operand_error("output 1 " + c.ref(*second) + " is output 0: a second output is another buffer");
  else if (first->shape != second->shape)
    c.operand_error("output 1 " + c.ref(*second) + " must have the shape of output 0 " +
                    c.ref(*first));
}

// RMSNORM_GEMV_GLU_DOWN_TILE [x, norm_w, W_gate, W_up, W_down(, b_gate, b_up, b_down)] -> acc:
// W_down [H, F] with F the gate weight's rows, acc one F32 row of H, the biases all three or none.
void check_glu_down(const TaskParams& c) {
  const size_t n_in = c.task().inputs.size();
  if (n_in != 5 && n_in != 8)
    c.operand_error("takes x, the norm weight, the gate, up and down weights and optionally all "
                    "three biases: " + num(int64_t(n_in)) + " inputs");
  check_glu_twins(c, 2);
  const Buffer* gate = c.in(2);
  const Buffer* down = c.in(4);
  const Buffer* acc = c.out(0);
  if (!gate || !down || !acc || gate->shape.size() != 2) return;
  if (down->shape.size() != 2 || down->shape[1] != gate->shape[0]) {
    c.operand_error("input 4 (down weight) " + c.ref(*down) + " must be [H, " +
                    num(gate->shape[0]) + "]: the gate weight's rows as its columns");
    return;
  }
  const int64_t H = down->shape[0];
  if (acc->dtype != DType::F32 || acc->numel() != H || (!acc->shape.empty() && acc->shape.back() != H))
    c.operand_error("output 0 (accumulator) " + c.ref(*acc) + " must be one F32 row of the down "
                    "weight's " + num(H) + " rows");
  if (n_in == 8) {
    for (size_t i = 5; i < 7; ++i)
      if (const Buffer* b = c.in(i); b && b->numel() != gate->shape[0])
        c.operand_error("input " + num(int64_t(i)) + (i == 5 ? " (gate bias) " : " (up bias) ") +
                        c.ref(*b) + " is not [N] for the weights' " + num(gate->shape[0]) + " rows");
    if (const Buffer* b = c.in(7); b && b->numel() != H)
      c.operand_error("input 7 (down bias) " + c.ref(*b) + " is not [H] for the down weight's " +
                      num(H) + " rows");
  }
}

void check_norm(const TaskParams& c) {
  const auto hidden = int_param(c.task(), "hidden");
  if (!hidden || *hidden < 1) return;
  if (const Buffer* x = c.in(0); x && !x->shape.empty() && x->shape.back() != *hidden)
    c.error("param hidden " + std::to_string(*hidden) +
            " is not the last dimension of input 0 (x) " + c.ref(*x));
}

void check_kv_append(const TaskParams& c) {
  const auto pos = int_param(c.task(), "pos");
  const Buffer* fresh = c.in(0);
  const Buffer* cache = c.in(1);
  if (!at_least(c, "pos", pos, 0) || !fresh || !cache || cache->shape.size() != 3) return;
  int64_t row = 0;
  const int64_t numel = fresh->numel();
  if (__builtin_mul_overflow(cache->shape[0], cache->shape[2], &row) || row < 1 || numel < 1 || numel % row != 0) {
    c.error("input 0 (new) " + c.ref(*fresh) +
            " is not a positive multiple of the cache row of input 1 (cache) " + c.ref(*cache));
    return;
  }
  // With flags bit 0 pos is an offset from the step's position (>= 0): still a lower bound.
  const int64_t n = numel / row;
  if (*pos > cache->shape[1] - n)  // [n_kv_heads, max_seq, head_dim]
    c.error("param pos " + std::to_string(*pos) + " + " + std::to_string(n) +
            " new row(s) exceeds the rows of input 1 (cache) " + c.ref(*cache));
}

// The head range [n_off, n_off + N_tile) of an attention task (both params or neither: all
// heads), in whole GQA groups of `align`; nullopt (after reporting) when it is outside.
std::optional<std::pair<int64_t, int64_t>> head_range(const TaskParams& c, int64_t n_heads,
                                                      int64_t align) {
  const bool has_off = c.task().params.find("n_off"), has_tile = c.task().params.find("N_tile");
  if (!has_off && !has_tile) return std::make_pair(int64_t{0}, n_heads);
  const auto off = int_param(c.task(), "n_off"), tile = int_param(c.task(), "N_tile");
  if (has_off != has_tile) {
    c.error("params n_off and N_tile (a head range) come together");
    return std::nullopt;
  }
  if (!off || !tile) return std::nullopt;
  if (*off < 0 || *tile < 1 || *off + *tile > n_heads || *off % align != 0 || *tile % align != 0) {
    c.error("head range n_off " + num(*off) + ", N_tile " + num(*tile) + " must lie in the " +
            num(n_heads) + " heads" +
            (align > 1 ? " in whole GQA groups (multiples of " + num(align) + ")" : ""));
    return std::nullopt;
  }
  return std::make_pair(*off, *tile);
}

void check_numel(const TaskParams& c, const Buffer* b, std::string_view what, int64_t expected,
                 std::string_view why) {
  if (b && b->numel() != expected)
    c.error(std::string(what) + " " + c.ref(*b) + " has " + num(b->numel()) + " elements, " +
            std::string(why) + " make " + num(expected));
}

// The head params of ATTENTION_TILE (q at input 0) and ROPE_KV_ATTENTION_TILE (q, k, v at 0-2):
// q's size, the head range and the output's size.
void check_attention_heads(const TaskParams& c, bool fused) {
  const Task& t = c.task();
  const auto head_dim = int_param(t, "head_dim"), n_heads = int_param(t, "n_heads"),
             n_kv = int_param(t, "n_kv_heads"), kv_start = int_param(t, "kv_start"),
             kv_len = int_param(t, "kv_len");
  at_least(c, "kv_start", kv_start, 0);
  at_least(c, "kv_len", kv_len, 0);
  // A strided window (amk/kv_window.h): runs of kv_len >= 1 keys every kv_stride >= kv_len
  // positions, so the runs never overlap.
  if (t.params.find("kv_stride")) {
    const auto stride = int_param(t, "kv_stride");
    if (at_least(c, "kv_stride", stride, 0) && *stride > 0 && kv_len &&
        (*kv_len < 1 || *stride < *kv_len))
      c.error("param kv_stride " + num(*stride) + " (a strided window) needs 1 <= kv_len " +
              num(*kv_len) + " <= kv_stride");
  }
  if (!head_dim || !n_heads || !n_kv) return;
  if (*head_dim < 1 || (fused && *head_dim % 2 != 0)) {
    c.error("param head_dim " + num(*head_dim) + " must be " + (fused ? "even and " : "") +
            ">= 1");
    return;
  }
  if (*n_heads < 1 || *n_kv < 1 || *n_heads % *n_kv != 0) {
    c.error("param n_heads " + num(*n_heads) + " must be a positive multiple of n_kv_heads " +
            num(*n_kv));
    return;
  }
  const std::string qd = "n_heads " + num(*n_heads) + " x head_dim " + num(*head_dim);
  check_numel(c, c.in(0), "input 0 (q)", *n_heads * *head_dim, qd);
  if (fused) {
    const std::string kd = "n_kv_heads " + num(*n_kv) + " x head_dim " + num(*head_dim);
    check_numel(c, c.in(1), "input 1 (k)", *n_kv * *head_dim, kd);
    check_numel(c, c.in(2), "input 2 (v)", *n_kv * *head_dim, kd);
  }
  const auto heads = head_range(c, *n_heads, *n_heads / *n_kv);
  if (!heads) return;
  const int64_t flags = int_param(t, "flags").value_or(0);
  const bool partial = (flags & attention_flags::kPartial) != 0;
  const int64_t width = partial ? *head_dim + 2 : *head_dim;
  // Not partial, a head range may write its slice of a row of every head (docs/OPCODES.md).
  const Buffer* out = c.out(0);
  // A partial may write its rows of slab m_off of a stack of partials of every head.
  const std::optional<int64_t> m_off =
      t.params.find("m_off") ? int_param(t, "m_off") : std::optional<int64_t>(0);
  if (out && attention_flags::writes_partial_stack(partial, heads->second, *n_heads, *head_dim,
                                                   out->numel())) {
    const int64_t slabs = out->numel() / (*n_heads * width);
    if (!m_off || *m_off < 0 || *m_off >= slabs)
      c.error("param m_off " + (m_off ? num(*m_off) : std::string("(not an integer)")) +
              " is not a slab of output 0 " + c.ref(*out) + ", a stack of " + num(slabs) +
              " partials of n_heads " + num(*n_heads) + " x (head_dim + 2) " + num(width));
    return;
  }
  if (m_off && *m_off != 0)
    c.error("param m_off " + num(*m_off) + " needs output 0 to be a stack of partials [S x n_heads, "
            "head_dim + 2] (flags bit 1), not " + (out ? c.ref(*out) : std::string("absent")));
  if (out && attention_flags::writes_head_slice(partial, heads->second, *n_heads, *head_dim,
                                                out->numel()))
    return;
  check_numel(c, out, "output 0", heads->second * width,
              std::string(heads->second == *n_heads ? "n_heads " : "N_tile ") +
                  num(heads->second) + (partial ? " x (head_dim + 2) " + num(width) + " (a partial)"
                                                : " x head_dim " + num(width)));
}

// COMBINE_GEMV_ADD_TILE's input 0 is a stack of S flash partials [S * n_heads, head_dim + 2]
// whose merge is x: K = count x head_dim for the heads [m_off, m_off + count) it merges (m_off
// absent: 0; IR 0.12.0, a tensor-parallel cluster's heads); flags bit 2 (the blocks the step's
// position reached) needs kv_len, the blocks' length.
void check_partial_stack(const TaskParams& c) {
  const Task& t = c.task();
  const auto head_dim = int_param(t, "head_dim"), n_heads = int_param(t, "n_heads"),
             K = int_param(t, "K");
  const int64_t flags = int_param(t, "flags").value_or(0);
  if ((flags & ~attention_flags::kRuntimeWindow) != 0)
    c.error("param flags " + num(flags) + " has unknown bits (bit 2: runtime window)");
  if ((flags & attention_flags::kRuntimeWindow) != 0) {
    if (!t.params.find("kv_len"))
      c.error("param flags " + num(flags) + " sets bit 2 (runtime window) but param kv_len (the "
              "blocks' keys) is absent");
    else
      at_least(c, "kv_len", int_param(t, "kv_len"), 1);
  }
  // F32, as ATTENTION_TILE writes partials and the merge reads them (docs/OPCODES.md).
  if (const Buffer* s = c.in(0); s && s->dtype != DType::F32)
    c.operand_error("input 0 (partials) " + c.ref(*s) + " is " + std::string(name_of(s->dtype)) +
                    ", not F32");
  if (!at_least(c, "head_dim", head_dim, 1) || !at_least(c, "n_heads", n_heads, 1) || !K) return;
  const std::optional<int64_t> first =
      t.params.find("m_off") ? int_param(t, "m_off") : std::optional<int64_t>(0);
  if (!at_least(c, "m_off", first, 0)) return;
  if (*K % *head_dim != 0 || *K < *head_dim || *first + *K / *head_dim > *n_heads)
    c.error("param K " + num(*K) + " must be a whole number of heads of head_dim " +
            num(*head_dim) + " from head m_off " + num(*first) + " within n_heads " +
            num(*n_heads));
  const int64_t slab = *n_heads * (*head_dim + 2);
  if (const Buffer* s = c.in(0); s && (s->numel() < slab || s->numel() % slab != 0))
    c.error("input 0 (partials) " + c.ref(*s) + " is not a stack of partials of n_heads " +
            num(*n_heads) + " x (head_dim + 2) " + num(*head_dim + 2) + " floats each");
}

// A partial SAMPLE_ARGMAX (n_off, N_tile, m_off; flags bit 0 clear) reads logits
// [n_off, n_off + N_tile) of one row and writes row m_off of its [P, 2] pairs.
// Sampling (flags bit 1): [pairs,] a logits row, the settings floats F32 [>= 4] and ints
// I32 [>= 8] (amk/sampler.h PackedSampling), one token out.
void check_sampling(const TaskParams& c, int64_t flags) {
  const Task& t = c.task();
  const size_t first = (flags & 1) != 0 ? 1 : 0;
  if (t.inputs.size() != first + 3) {
    c.error("sampling (flags bit 1) takes " + std::string(first ? "the pairs, " : "") +
            "the logits row and the two settings buffers: " + num(int64_t(first + 3)) + " inputs, not " +
            num(int64_t(t.inputs.size())));
    return;
  }
  if (const Buffer* logits = c.in(first); logits && !logits->shape.empty() && logits->shape.back() != logits->numel())
    c.error("the logits " + c.ref(*logits) + " must be one row");
  if (const Buffer* f = c.in(first + 1); f && (f->dtype != DType::F32 || f->numel() < 4))
    c.error("the sampling floats " + c.ref(*f) + " must be F32 with at least 4 elements");
  if (const Buffer* i = c.in(first + 2); i && (i->dtype != DType::I32 || i->numel() < 8))
    c.error("the sampling ints " + c.ref(*i) + " must be I32 with at least 8 elements");
  if (const Buffer* out = c.out(0); out && out->numel() != 1)
    c.error("output 0 " + c.ref(*out) + " must hold one token");
}

void check_argmax(const TaskParams& c) {
  const Task& t = c.task();
  if (const int64_t flags = int_param(t, "flags").value_or(0); (flags & 2) != 0) return check_sampling(c, flags);
  const auto off = int_param(t, "n_off"), len = int_param(t, "N_tile"), slot = int_param(t, "m_off");
  if ((int_param(t, "flags").value_or(0) & 1) != 0 || !off || !len || !slot) return;
  if (const Buffer* logits = c.in(0); logits && !logits->shape.empty()) {
    const int64_t V = logits->numel();
    if (*off < 0 || *len < 1 || *off + *len > V)
      c.error("range n_off " + num(*off) + ", N_tile " + num(*len) + " must lie in the " + num(V) +
              " logits of input 0 " + c.ref(*logits));
  }
  if (const Buffer* out = c.out(0); out && !out->shape.empty()) {
    if (out->shape.back() != 2 || *slot < 0 || 2 * (*slot + 1) > out->numel())
      c.error("output 0 " + c.ref(*out) + " must be [P, 2] (value, index) pairs with a row m_off " +
              num(*slot));
  }
}

// EMBED: hidden divides the table's row width W; the output holds one row of W per id.
void check_embed(const TaskParams& c) {
  const auto hidden = int_param(c.task(), "hidden");
  const Buffer* ids = c.in(0);
  const Buffer* table = c.in(1);
  if (!hidden || !table || table->shape.size() != 2) return;
  const int64_t W = table->shape[1];
  if (*hidden < 1 || W % *hidden != 0) {
    c.error("param hidden " + num(*hidden) + " must be >= 1 and divide the row width " + num(W) +
            " of input 1 (table) " + c.ref(*table));
    return;
  }
  if (ids) check_numel(c, c.out(0), "output 0", ids->numel() * W, num(ids->numel()) + " ids x row width " + num(W));
}

// A head-ranged ATTENTION_COMBINE writes elements [n_off * head_dim, (n_off + N_tile) * head_dim)
// of its one-row output.
// flags bit 1 (partial output): the merged partial has its inputs' size, needs head_dim and
// takes no head range (docs/OPCODES.md).
void check_combine(const TaskParams& c) {
  const Task& t = c.task();
  const auto off = int_param(t, "n_off"), tile = int_param(t, "N_tile"), hd = int_param(t, "head_dim");
  const Buffer* out = c.out(0);
  const int64_t flags = int_param(t, "flags").value_or(0);
  if ((flags & ~attention_flags::kPartial) != 0)
    c.error("param flags " + num(flags) + ": ATTENTION_COMBINE knows only bit 1 (partial output)");
  if ((flags & attention_flags::kPartial) != 0) {
    if (off || tile) c.error("a partial combine (flags bit 1) takes no head range (n_off, N_tile)");
    if (!hd) c.error("a partial combine (flags bit 1) needs param head_dim");
    const Buffer* in = c.in(0);
    if (in && out && in->numel() != out->numel())
      c.error("a partial combine (flags bit 1) writes a partial of its inputs' " +
              num(in->numel()) + " elements; output 0 " + c.ref(*out) + " has " +
              num(out->numel()));
    return;
  }
  if (!off || !tile || !hd || *hd < 1 || !out) return;
  if (*off < 0 || *tile < 1 || (*off + *tile) * *hd > out->numel())
    c.error("head range n_off " + num(*off) + ", N_tile " + num(*tile) + " (head_dim " + num(*hd) +
            ") must lie in the " + num(out->numel()) + " elements of output 0 " + c.ref(*out));
}

// A ranged shard sum (IR 0.12.0): n_off and N_tile both or neither, the range inside the
// shards' elements (the reference's op_allreduce_shard).
void check_shard_range(const TaskParams& c) {
  const Task& t = c.task();
  const auto off = int_param(t, "n_off"), tile = int_param(t, "N_tile");
  if (!off && !tile) return;
  const Buffer* in = c.in(0);
  if (!off || !tile) {
    c.error("a ranged shard sum takes both n_off and N_tile");
    return;
  }
  if (in && (*off < 0 || *tile < 1 || *off > in->numel() - *tile))
    c.error("range n_off " + num(*off) + ", N_tile " + num(*tile) + " must lie in the " +
            num(in->numel()) + " elements of input 0 " + c.ref(*in));
}

void check_attention(const TaskParams& c, size_t k_at) {
  const auto kv_start = int_param(c.task(), "kv_start"), kv_len = int_param(c.task(), "kv_len"),
             head_dim = int_param(c.task(), "head_dim"), n_kv = int_param(c.task(), "n_kv_heads");
  for (size_t i = k_at; i < k_at + 2; ++i) {
    const Buffer* cache = c.in(i);
    if (!cache) continue;
    const std::string which =
        "input " + std::to_string(i) + (i == k_at ? " (k cache) " : " (v cache) ") + c.ref(*cache);
    if (cache->shape.size() != 3) {
      c.error(which + " is not [n_kv_heads, max_seq, head_dim]");
      continue;
    }
    if (kv_start && kv_len && *kv_start >= 0 && *kv_len >= 0 &&
        *kv_start + *kv_len > cache->shape[1])
      c.error("params kv_start " + std::to_string(*kv_start) + " + kv_len " +
              std::to_string(*kv_len) + " exceed the rows of " + which);
    if (head_dim && *head_dim != cache->shape[2])
      c.error("param head_dim " + std::to_string(*head_dim) + " disagrees with " + which);
    if (n_kv && *n_kv != cache->shape[0])
      c.error("param n_kv_heads " + std::to_string(*n_kv) + " disagrees with " + which);
  }
}

}  // namespace

void check_task_params(const Program& p, Diagnostics& d) {
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    const TaskParams c{p, static_cast<int32_t>(t), d};
    switch (p.tasks[t].op) {
      case Op::GEMV_TILE:
      case Op::GEMM_TILE:
        check_gemv(c, 0, 1);
        break;
      case Op::GEMV_ADD_TILE:
        check_gemv(c, 0, 1);
        check_second_output(c);
        break;
      case Op::RMSNORM_GEMV_TILE:
      case Op::SILU_MUL_GEMV_TILE:
      case Op::SILU_MUL_GEMV_ADD_TILE:
        check_gemv(c, 0, 2);
        if (p.tasks[t].op == Op::RMSNORM_GEMV_TILE) check_norm(c);
        break;
      case Op::COMBINE_GEMV_ADD_TILE:
        check_gemv(c, 0, 1);
        check_partial_stack(c);
        check_second_output(c);
        break;
      case Op::RMSNORM_GEMV_GLU_DOWN_TILE:
        check_gemv(c, 0, 2, /*output_columns=*/false);
        check_glu_down(c);
        check_norm(c);
        break;
      case Op::GEMV_GLU_TILE:
      case Op::RMSNORM_GEMV_GLU_TILE:
        check_gemv(c, 0, gemv_weight_input(p.tasks[t].op));
        check_glu(c, gemv_weight_input(p.tasks[t].op));
        if (p.tasks[t].op == Op::RMSNORM_GEMV_GLU_TILE) check_norm(c);
        break;
      case Op::RMSNORM:
      case Op::LAYERNORM:
        check_norm(c);
        break;
      case Op::KV_APPEND:
        check_kv_append(c);
        break;
      case Op::ATTENTION_TILE:
        check_attention(c, 1);
        check_attention_heads(c, /*fused=*/false);
        break;
      case Op::ROPE_KV_ATTENTION_TILE:
        check_attention(c, 3);
        check_attention_heads(c, /*fused=*/true);
        break;
      case Op::SAMPLE_ARGMAX:
        check_argmax(c);
        break;
      case Op::EMBED:
        check_embed(c);
        break;
      case Op::ATTENTION_COMBINE:
        check_combine(c);
        break;
      case Op::ALLREDUCE_SHARD:
        check_shard_range(c);
        break;
      default:
        break;
    }
  }
}

}  // namespace amk::detail
