// GEMV_TILE and GEMM_TILE: out[r, n_off + j] = sum_k x[r, k] * W[n_off + j, k] (+ bias[n_off + j])
// for j < N_tile, with W in torch Linear layout [N_out, K_in]. GEMV covers every row of x; GEMM
// only rows [m_off, m_off + M_tile). The rest of the output is left as it was: sibling tiles
// write the other columns / rows.
//
// Two weight modes, as reference.py: fp weights (inputs [x, W(, bias)]) or, when params qdtype is
// 6 (I8) or 7 (I4), group-quantized weights (inputs [x, qW, scales(, zeros)], see quant.h).
// GEMV deliberately ignores M_tile / m_off: the Python loader reuses GEMV's M_tile slot to carry
// its prefetch depth.
#include <algorithm>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "vm/reference/ops/numeric.h"
#include "vm/reference/ops/ops.h"
#include "vm/reference/ops/quant.h"

namespace amk::ref {

namespace {

std::string num(int64_t v) { return std::to_string(v); }

bool is_fp_weight_code(int64_t qdtype) { return qdtype >= 0 && qdtype <= int64_t(DType::F8E5M2); }

// A real model's tiles (an lm_head over the whole vocabulary, an 8B model's FFN) make a CPU
// reference step take minutes on one core. Output rows are independent, so large tiles split
// them over threads; each row's sum keeps its order, so the result is bit-identical to the
// sequential loop whatever the thread count.
void for_row_ranges(int64_t rows, int64_t work, const std::function<void(int64_t, int64_t)>& body) {
  constexpr int64_t kWorkPerThread = int64_t{1} << 18;  // multiply-adds; less is not worth a thread
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t threads = std::min({cores, rows, std::max<int64_t>(1, work / kWorkPerThread)});
  if (threads <= 1) return body(0, rows);
  const int64_t per = (rows + threads - 1) / threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads && t * per < rows; ++t)
    pool.emplace_back([&, t] {
      try {
        body(t * per, std::min(rows, (t + 1) * per));
      } catch (...) {
        errors[size_t(t)] = std::current_exception();
      }
    });
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

void op_gemv_gemm(const OpContext& c) {
  const bool gemm = c.op() == Op::GEMM_TILE;
  const int64_t qdtype = c.int_param_or("qdtype", 0);
  const bool quantized = qdtype == int64_t(DType::I8) || qdtype == int64_t(DType::I4);
  if (!quantized && !is_fp_weight_code(qdtype))
    c.fail("param qdtype " + num(qdtype) + " is neither a float weight dtype (0-4) nor a "
           "quantized one (6 = I8, 7 = I4)");
  c.check_registry(quantized ? 4 : 3);
  if (quantized && c.num_inputs() < 3)
    c.fail("param qdtype " + num(qdtype) + " selects quantized weights, which need inputs "
           "[x, qW, scales(, zeros)]; got " + num(int64_t(c.num_inputs())) + " inputs");

  const int64_t K = c.int_param("K");
  const int64_t N_tile = c.int_param("N_tile");
  const int64_t n_off = c.int_param("n_off");
  if (K < 1) c.fail("param K must be >= 1, got " + num(K));
  if (N_tile < 1) c.fail("param N_tile must be >= 1, got " + num(N_tile));
  if (n_off < 0) c.fail("param n_off must be >= 0, got " + num(n_off));

  // x: rows of K.
  const Tensor& x = c.input(0);
  require_float(c, x, "input 0 (x)");
  if (last_dim(c, x, "input 0 (x)") != K)
    c.fail("input 0 (x) has shape " + shape_str(x.shape) + ", its last dimension must equal "
           "param K " + num(K));
  const int64_t rows = x.numel() / K;

  int64_t m_begin = 0, m_end = rows;
  if (gemm) {
    const int64_t M_tile = c.int_param("M_tile");
    const int64_t m_off = c.int_param_or("m_off", 0);
    if (M_tile < 1) c.fail("param M_tile must be >= 1, got " + num(M_tile));
    if (m_off < 0) c.fail("param m_off must be >= 0, got " + num(m_off));
    if (m_off + M_tile > rows)
      c.fail("m_off " + num(m_off) + " + M_tile " + num(M_tile) + " exceeds input 0 (x) rows " +
             num(rows) + " (shape " + shape_str(x.shape) + ")");
    m_begin = m_off;
    m_end = m_off + M_tile;
  }

  // The weight: checked in whichever mode, then read a row at a time (load_range, or dequantized
  // element by element).
  const Tensor& W = c.input(1);
  require_rank(c, W, "input 1 (weight)", 2);
  const int64_t N = W.shape[0];
  if (n_off + N_tile > N)
    c.fail("n_off " + num(n_off) + " + N_tile " + num(N_tile) + " exceeds weight rows " + num(N) +
           " (input 1 shape " + shape_str(W.shape) + ")");
  if (W.shape[1] != K)
    c.fail("input 1 (weight) has shape " + shape_str(W.shape) + ", expected [N_out, K] with K " +
           num(K));
  DType qd = DType::F32;
  int64_t group = K;
  const bool has_bias = !quantized && c.num_inputs() > 2;
  const bool has_zeros = quantized && c.num_inputs() > 3;
  if (quantized) {
    qd = quant_dtype(c, qdtype);
    check_quantized(c, W, "input 1 (weight)", qd);
    group = c.int_param_or("group", K);
    if (group < 1) c.fail("param group must be >= 1, got " + num(group));
    check_group_operand(c, c.input(2), "input 2 (scales)", W, group);
    if (has_zeros) check_group_operand(c, c.input(3), "input 3 (zeros)", W, group);
  } else {
    if (!is_float_dtype(W.dtype))
      c.fail("input 1 (weight) has dtype " + std::string(name_of(W.dtype)) +
             "; integer weights need params qdtype (6 = I8, 7 = I4) and a scales input");
    if (has_bias) {
      require_float(c, c.input(2), "input 2 (bias)");
      require_shape(c, c.input(2), "input 2 (bias)", {N});
    }
  }

  // out: the same rows, at least n_off + N_tile columns.
  Tensor& out = c.output(0);
  require_float(c, out, "output 0");
  const int64_t out_cols = last_dim(c, out, "output 0");
  if (n_off + N_tile > out_cols)
    c.fail("n_off " + num(n_off) + " + N_tile " + num(N_tile) + " exceeds output 0 columns " +
           num(out_cols) + " (shape " + shape_str(out.shape) + ")");
  if (out.numel() / out_cols != rows)
    c.fail("output 0 has shape " + shape_str(out.shape) + " with " + num(out.numel() / out_cols) +
           " rows, input 0 (x) has " + num(rows));

  const int64_t G = (K + group - 1) / group;
  const auto dequantized = [&](int64_t n, int64_t k) {
    const int64_t g = n * G + k / group;
    const double zero = has_zeros ? load(c.input(3), g) : 0.0;
    return dequant_value(qd, load(W, n * K + k), load(c.input(2), g), has_zeros ? &zero : nullptr);
  };

  // One weight row at a time (dequantized or widened once), so memory stays O(K) per thread even
  // for a whole-vocabulary tile.
  const std::vector<double> xv = load_all(x);
  std::vector<double> result(static_cast<size_t>((m_end - m_begin) * N_tile));
  const auto compute_rows = [&](int64_t j_begin, int64_t j_end) {
    std::vector<double> wrow(static_cast<size_t>(K));
    for (int64_t j = j_begin; j < j_end; ++j) {
      if (quantized)
        for (int64_t k = 0; k < K; ++k) wrow[size_t(k)] = dequantized(n_off + j, k);
      else
        load_range(W, (n_off + j) * K, wrow);
      for (int64_t r = m_begin; r < m_end; ++r) {
        double acc = has_bias ? load(c.input(2), n_off + j) : 0.0;
        for (int64_t k = 0; k < K; ++k) acc += xv[size_t(r * K + k)] * wrow[size_t(k)];
        result[size_t((r - m_begin) * N_tile + j)] = acc;
      }
    }
  };
  for_row_ranges(N_tile, N_tile * K * (m_end - m_begin), compute_rows);
  for (int64_t r = m_begin; r < m_end; ++r)
    for (int64_t j = 0; j < N_tile; ++j)
      store(out, r * out_cols + n_off + j, result[size_t((r - m_begin) * N_tile + j)]);
}

}  // namespace amk::ref
