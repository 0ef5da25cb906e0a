// The fused GEMV tiles of ScheduleConfig.fusion_grouping: RMSNORM_GEMV_TILE, SILU_MUL_GEMV_TILE,
// GEMV_ADD_TILE, SILU_MUL_GEMV_ADD_TILE, and the gated-unit tiles GEMV_GLU_TILE and
// RMSNORM_GEMV_GLU_TILE, COMBINE_GEMV_ADD_TILE (o_proj over the split-KV attention's
// partials) and RMSNORM_GEMV_GLU_DOWN_TILE (an MLP's feature slice, accumulated into its output).
//
// Each one runs the existing ops (op_rmsnorm, op_silu_mul, op_gemv_gemm, op_add) under their own
// contexts rather than restating their arithmetic, so a fused tile can never drift from the
// unfused ops it replaces: one implementation per instruction. The intermediate (the normalised
// x, silu(gate) * up, the tile's GEMV result) is an F32 tensor, exactly the F32 activation buffer
// the unfused lowering writes, so fused and unfused programs compute the same values. A
// constituent's error arrives as "<FUSED_OP>: <CONSTITUENT_OP>: ..." (operands numbered as the
// constituent sees them).
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "amk/op_flags.h"
#include "vm/reference/ops/numeric.h"
#include "vm/reference/ops/ops.h"

namespace amk::ref {

namespace {

std::string num(int64_t v) { return std::to_string(v); }

// GEMV_TILE over `x` (the fused op's intermediate), with W and the optional bias taken from the
// fused op's inputs starting at `w_index`, into the fused op's output.
void gemv_into(const OpContext& c, const Tensor& x, size_t w_index, size_t bias_index,
               Tensor& out) {
  std::array<const Tensor*, 3> in{&x, &c.input(w_index), nullptr};
  size_t n = 2;
  if (c.num_inputs() > bias_index) in[n++] = &c.input(bias_index);
  std::array<Tensor*, 1> outs{&out};
  op_gemv_gemm(OpContext(Op::GEMV_TILE, c.params(), std::span(in.data(), n), outs, c.step()));
}

// SILU_MUL(gate = input 0, up = input 1) into an F32 tensor of gate's shape.
Tensor silu_mul_of(const OpContext& c) {
  Tensor act = Tensor::zeros(DType::F32, c.input(0).shape);
  const std::array<const Tensor*, 2> act_in{&c.input(0), &c.input(1)};
  const std::array<Tensor*, 1> act_out{&act};
  op_silu_mul(OpContext(Op::SILU_MUL, c.params(), act_in, act_out, c.step()));
  return act;
}

// out[.., n_off:+N_tile] = GEMV_TILE(x, W = input w_index, bias) + residual (input w_index + 1)
// over the tile's columns: the GEMV writes its tile of an F32 copy of the output's shape; then
// ADD runs over just the tile's columns (gathered, added, scattered back), leaving sibling
// tiles' columns alone.
void gemv_add_into(const OpContext& c, const Tensor& x, size_t w_index) {
  Tensor& out = c.output(0);
  const Tensor& residual = c.input(w_index + 1);
  require_numel(c, residual, "input " + num(int64_t(w_index) + 1) + " (residual)", out.numel(),
                "the size of output 0");
  Tensor y = Tensor::zeros(DType::F32, out.shape);
  gemv_into(c, x, w_index, w_index + 2, y);  // validates K, N_tile, n_off against x, W and out
  const int64_t n_off = c.int_param("n_off"), N_tile = c.int_param("N_tile");
  const int64_t cols = out.shape.back(), rows = out.numel() / cols;
  Tensor y_tile = Tensor::zeros(DType::F32, {rows, N_tile});
  Tensor r_tile = Tensor::zeros(residual.dtype, {rows, N_tile});
  Tensor sum = Tensor::zeros(out.dtype, {rows, N_tile});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < N_tile; ++j) {
      y_tile.set(r * N_tile + j, y.get(r * cols + n_off + j));
      store(r_tile, r * N_tile + j, load(residual, r * cols + n_off + j));
    }
  const std::array<const Tensor*, 2> add_in{&y_tile, &r_tile};
  const std::array<Tensor*, 1> add_out{&sum};
  op_add(OpContext(Op::ADD, Params{}, add_in, add_out, c.step()));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < N_tile; ++j)
      store(out, r * cols + n_off + j, load(sum, r * N_tile + j));
  if (c.num_outputs() < 2) return;
  // Output 1 receives the same tile: the initial value of an MLP's accumulator
  // (RMSNORM_GEMV_GLU_DOWN_TILE), which adds into it while output 0 stays the MLP's input.
  Tensor& copy = c.output(1);
  if (copy.shape != out.shape)
    c.fail("output 1 " + shape_str(copy.shape) + " must have output 0's shape " +
           shape_str(out.shape));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < N_tile; ++j)
      store(copy, r * cols + n_off + j, load(sum, r * N_tile + j));
}

// RMSNORM(x = input 0, w = input 1) into an F32 tensor of x's shape: the RMSNORM_ prologue.
Tensor rmsnorm_of(const OpContext& c) {
  // The norm's width is the GEMV's reduction length: one x feeds both.
  if (c.int_param("hidden") != c.int_param("K"))
    c.fail("param hidden " + num(c.int_param("hidden")) + " must equal param K " +
           num(c.int_param("K")));
  Tensor xn = Tensor::zeros(DType::F32, c.input(0).shape);
  const std::array<const Tensor*, 2> norm_in{&c.input(0), &c.input(1)};
  const std::array<Tensor*, 1> norm_out{&xn};
  op_rmsnorm(OpContext(Op::RMSNORM, c.params(), norm_in, norm_out, c.step()));
  return xn;
}

// out[.., n_off:+N_tile] = SILU_MUL(GEMV_TILE(x, W_gate(, b_gate)), GEMV_TILE(x, W_up(, b_up)))
// with inputs [.., W_gate, W_up(, b_gate, b_up)] from `w_index` on. Each GEMV writes its tile of
// an F32 copy of the output's shape (the F32 gate and up buffers of the unfused lowering); SILU_MUL
// then runs over just the tile's columns (gathered, activated, scattered back), leaving sibling
// tiles' columns alone.
//
// `out` is the fused op's output, or (RMSNORM_GEMV_GLU_DOWN_TILE) an F32 row of the features;
// the biases, when the op has them, are inputs bias_index and bias_index + 1.
void gemv_glu_into(const OpContext& c, const Tensor& x, size_t w_index, size_t bias_index,
                   Tensor& out) {
  const Tensor& gate_w = c.input(w_index);
  const Tensor& up_w = c.input(w_index + 1);
  // The GEMV checks each weight against K, N_tile and n_off, which a taller up weight (or one of
  // another dtype) would pass: the two projections of one unit must agree outright.
  if (up_w.shape != gate_w.shape || up_w.dtype != gate_w.dtype)
    c.fail("input " + num(int64_t(w_index) + 1) + " (up weight) " +
           std::string(name_of(up_w.dtype)) + " " + shape_str(up_w.shape) + " differs from input " +
           num(int64_t(w_index)) + " (gate weight) " + std::string(name_of(gate_w.dtype)) + " " +
           shape_str(gate_w.shape) + ": both must have the same shape and dtype");
  Tensor gate = Tensor::zeros(DType::F32, out.shape), up = Tensor::zeros(DType::F32, out.shape);
  gemv_into(c, x, w_index, bias_index, gate);  // validates K, N_tile, n_off against x, W, out
  gemv_into(c, x, w_index + 1, bias_index + 1, up);
  const int64_t n_off = c.int_param("n_off"), N_tile = c.int_param("N_tile");
  const int64_t cols = out.shape.back(), rows = out.numel() / cols;
  Tensor gate_tile = Tensor::zeros(DType::F32, {rows, N_tile});
  Tensor up_tile = Tensor::zeros(DType::F32, {rows, N_tile});
  Tensor act = Tensor::zeros(out.dtype, {rows, N_tile});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < N_tile; ++j) {
      gate_tile.set(r * N_tile + j, gate.get(r * cols + n_off + j));
      up_tile.set(r * N_tile + j, up.get(r * cols + n_off + j));
    }
  const std::array<const Tensor*, 2> act_in{&gate_tile, &up_tile};
  const std::array<Tensor*, 1> act_out{&act};
  op_silu_mul(OpContext(Op::SILU_MUL, Params{}, act_in, act_out, c.step()));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < N_tile; ++j)
      store(out, r * cols + n_off + j, load(act, r * N_tile + j));
}

// COMBINE_GEMV_ADD_TILE's prologue: ATTENTION_COMBINE's merge (merge_flash_partials) of the
// stack of S partials at input 0, [S * n_heads, head_dim + 2], into an F32 row of K = count x
// head_dim: heads [m_off, m_off + count) (all of them without m_off). Flags bit 2 with kv_len B: partial s holds keys [s B, s B + B), and those past the
// step's position (empty, m = -inf, l = 0, as the attention writes them) are not read.
Tensor combined_of(const OpContext& c) {
  const Tensor& stack = c.input(0);
  if (stack.dtype != DType::F32)
    c.fail("input 0 (partials) is " + std::string(name_of(stack.dtype)) + ", not F32");
  const int64_t head_dim = c.int_param("head_dim"), n_heads = c.int_param("n_heads");
  const int64_t K = c.int_param("K"), first = c.int_param_or("m_off", 0);
  // The heads [first, first + count) of every partial (m_off: IR 0.12.0), K = count x head_dim.
  if (head_dim < 1 || n_heads < 1 || first < 0 || K < head_dim || K % head_dim != 0 ||
      first + K / head_dim > n_heads)
    c.fail("param K " + num(K) + " must be a whole number of heads of head_dim " +
           num(head_dim) + " from head m_off " + num(first) + " within n_heads " + num(n_heads));
  const int64_t count = K / head_dim;
  const int64_t slab = n_heads * (head_dim + 2);
  if (stack.numel() < slab || stack.numel() % slab != 0)
    c.fail("input 0 (partials) has " + num(stack.numel()) +
           " elements, not a stack of partials of n_heads x (head_dim + 2) = " + num(slab));
  int64_t S = stack.numel() / slab;
  const int64_t flags = c.int_param_or("flags", 0);
  if ((flags & ~attention_flags::kRuntimeWindow) != 0)
    c.fail("param flags " + num(flags) + " has unknown bits (bit 2: runtime window)");
  if ((flags & attention_flags::kRuntimeWindow) != 0) {
    const int64_t block = c.int_param("kv_len");
    if (block < 1) c.fail("param kv_len " + num(block) + " (the blocks' keys) must be >= 1");
    const int64_t pos = c.step_position("flags bit 2 (runtime window)");
    S = std::min(S, std::max<int64_t>(pos, 0) / block + 1);
  }
  const std::vector<double> all = load_all(stack);
  std::vector<const double*> parts;
  for (int64_t s = 0; s < S; ++s) parts.push_back(all.data() + s * slab + first * (head_dim + 2));
  std::vector<double> x(size_t(K), 0.0);
  merge_flash_partials(parts, count, head_dim, x.data(), nullptr);
  Tensor row = Tensor::zeros(DType::F32, {1, K});
  store_all(row, x);
  return row;
}

}  // namespace

void op_combine_gemv_add_tile(const OpContext& c) {
  c.check_registry();
  gemv_add_into(c, combined_of(c), 1);
}

void op_rmsnorm_gemv_tile(const OpContext& c) {
  c.check_registry();
  gemv_into(c, rmsnorm_of(c), 2, 3, c.output(0));
}

void op_silu_mul_gemv_tile(const OpContext& c) {
  c.check_registry();
  gemv_into(c, silu_mul_of(c), 2, 3, c.output(0));
}

void op_gemv_add_tile(const OpContext& c) {
  c.check_registry();
  gemv_add_into(c, c.input(0), 1);
}

void op_silu_mul_gemv_add_tile(const OpContext& c) {
  c.check_registry();
  gemv_add_into(c, silu_mul_of(c), 2);
}

// The GLU tiles' inputs from w_index on: the gate and up weights and optionally both biases. The
// registry's 3..5 (4..6) inputs admit one bias: a gate bias without an up bias (or the reverse) is
// not a gated unit that any model has, so it is refused rather than guessed at.
void require_glu_biases_paired(const OpContext& c, size_t w_index) {
  const size_t weights_and_biases = c.num_inputs() - w_index;
  if (weights_and_biases != 2 && weights_and_biases != 4)
    c.fail("takes the gate and up weights (inputs " + num(int64_t(w_index)) + ", " +
           num(int64_t(w_index) + 1) + ") and optionally both biases (inputs " +
           num(int64_t(w_index) + 2) + ", " + num(int64_t(w_index) + 3) +
           "): biases come in pairs, got " + num(int64_t(c.num_inputs())) + " inputs");
}

void op_gemv_glu_tile(const OpContext& c) {
  c.check_registry();
  require_glu_biases_paired(c, 1);
  gemv_glu_into(c, c.input(0), 1, 3, c.output(0));
}

void op_rmsnorm_gemv_glu_tile(const OpContext& c) {
  c.check_registry();
  require_glu_biases_paired(c, 2);
  gemv_glu_into(c, rmsnorm_of(c), 2, 4, c.output(0));
}

// [x, norm_w, W_gate, W_up, W_down(, b_gate, b_up, b_down)] -> acc. The features a of columns
// [n_off, n_off + N_tile) are RMSNORM_GEMV_GLU_TILE's (an F32 row, as the unfused lowering's
// silu_mul buffer), then GEMV_TILE(a's slice, W_down's columns of the slice (, b_down on the tile
// at n_off 0 only, so the bias is added once per MLP)) is ADDed to acc: out = acc + y, acc being
// the output's own value before the op (the op reads its output: an accumulator).
void op_rmsnorm_gemv_glu_down_tile(const OpContext& c) {
  c.check_registry();
  if (c.num_inputs() != 5 && c.num_inputs() != 8)
    c.fail("takes x, the norm weight, the gate, up and down weights (inputs 0-4) and optionally "
           "the three biases (inputs 5-7): got " + num(int64_t(c.num_inputs())) + " inputs");
  const Tensor& gate_w = c.input(2);
  const Tensor& down_w = c.input(4);
  Tensor& acc = c.output(0);
  require_float(c, down_w, "input 4 (down weight)");
  require_rank(c, down_w, "input 4 (down weight)", 2);
  require_rank(c, gate_w, "input 2 (gate weight)", 2);
  const int64_t F = gate_w.shape[0], H = down_w.shape[0];
  if (down_w.shape[1] != F)
    c.fail("input 4 (down weight) " + shape_str(down_w.shape) + " must have the gate weight's " +
           num(F) + " rows as its columns");
  const int64_t K = c.int_param("K");
  if (c.input(0).numel() != K)
    c.fail("input 0 (x) " + shape_str(c.input(0).shape) + " must be one row of K = " + num(K) +
           " (the MLP of one token)");
  // F32: the tiles' adds round as the device's F32 reductions do, whatever their order.
  if (acc.dtype != DType::F32)
    c.fail("output 0 (accumulator) is " + std::string(name_of(acc.dtype)) + ", not F32");
  require_numel(c, acc, "output 0 (accumulator)", H, "the down weight's rows");
  if (!acc.shape.empty() && acc.shape.back() != H)
    c.fail("output 0 (accumulator) " + shape_str(acc.shape) + " must be one row of " + num(H));
  const bool biased = c.num_inputs() == 8;
  if (biased) require_numel(c, c.input(7), "input 7 (down bias)", H, "the down weight's rows");

  Tensor a = Tensor::zeros(DType::F32, {1, F});
  gemv_glu_into(c, rmsnorm_of(c), 2, 5, a);  // validates K, N_tile, n_off against F
  const int64_t n_off = c.int_param("n_off"), N_tile = c.int_param("N_tile");
  Tensor a_tile = Tensor::zeros(DType::F32, {1, N_tile});
  Tensor w_tile = Tensor::zeros(down_w.dtype, {H, N_tile});
  for (int64_t j = 0; j < N_tile; ++j) a_tile.set(j, a.get(n_off + j));
  for (int64_t i = 0; i < H; ++i)
    for (int64_t j = 0; j < N_tile; ++j) store(w_tile, i * N_tile + j, load(down_w, i * F + n_off + j));
  Params down{{"K", ParamValue::integer(N_tile)},
              {"N_tile", ParamValue::integer(H)},
              {"n_off", ParamValue::integer(0)}};
  Tensor y = Tensor::zeros(DType::F32, {1, H});
  std::array<const Tensor*, 3> down_in{&a_tile, &w_tile, nullptr};
  size_t n = 2;
  if (biased && n_off == 0) down_in[n++] = &c.input(7);
  std::array<Tensor*, 1> down_out{&y};
  op_gemv_gemm(OpContext(Op::GEMV_TILE, down, std::span(down_in.data(), n), down_out, c.step()));
  Tensor sum = Tensor::zeros(acc.dtype, {1, H});
  const std::array<const Tensor*, 2> add_in{&y, &acc};  // ADD reads pages: acc's shape is free
  const std::array<Tensor*, 1> add_out{&sum};
  op_add(OpContext(Op::ADD, Params{}, add_in, add_out, c.step()));
  for (int64_t i = 0; i < H; ++i) store(acc, i, load(sum, i));
}

}  // namespace amk::ref
