// RMSNORM and LAYERNORM over the last dimension (size `hidden`), one row at a time.
#include <cmath>
#include <string>
#include <vector>

#include "vm/reference/ops/numeric.h"
#include "vm/reference/ops/ops.h"

namespace amk::ref {

namespace {

struct NormShape {
  int64_t hidden = 0;
  int64_t rows = 0;
  double eps = 0;
};

NormShape check_norm(const OpContext& c) {
  c.check_registry();
  NormShape s;
  s.hidden = c.int_param("hidden");
  if (s.hidden < 1) c.fail("param hidden must be >= 1, got " + std::to_string(s.hidden));
  s.eps = c.real_param("eps");
  if (s.eps < 0) c.fail("param eps must be >= 0, got " + std::to_string(s.eps));
  const Tensor& x = c.input(0);
  require_float(c, x, "input 0 (x)");
  if (last_dim(c, x, "input 0 (x)") != s.hidden)
    c.fail("input 0 (x) has shape " + shape_str(x.shape) + ", its last dimension must equal "
           "param hidden " + std::to_string(s.hidden));
  s.rows = x.numel() / s.hidden;
  require_float(c, c.input(1), "input 1 (weight)");
  require_numel(c, c.input(1), "input 1 (weight)", s.hidden, "param hidden");
  if (c.num_inputs() > 2) {
    require_float(c, c.input(2), "input 2 (bias)");
    require_numel(c, c.input(2), "input 2 (bias)", s.hidden, "param hidden");
  }
  require_float(c, c.output(0), "output 0");
  require_numel(c, c.output(0), "output 0", x.numel(), "the size of input 0");
  return s;
}

}  // namespace

void op_rmsnorm(const OpContext& c) {
  const NormShape s = check_norm(c);
  std::vector<double> x = load_all(c.input(0));
  const std::vector<double> w = load_all(c.input(1));
  const auto H = size_t(s.hidden);
  for (size_t r = 0; r < size_t(s.rows); ++r) {
    double* row = &x[r * H];
    double sum_sq = 0;
    for (size_t j = 0; j < H; ++j) sum_sq += row[j] * row[j];
    const double inv_rms = 1.0 / std::sqrt(sum_sq / double(H) + s.eps);
    for (size_t j = 0; j < H; ++j) row[j] = row[j] * inv_rms * w[j];
  }
  store_all(c.output(0), x);
}

void op_layernorm(const OpContext& c) {
  const NormShape s = check_norm(c);
  std::vector<double> x = load_all(c.input(0));
  const std::vector<double> w = load_all(c.input(1));
  const std::vector<double> b =
      c.num_inputs() > 2 ? load_all(c.input(2)) : std::vector<double>(size_t(s.hidden), 0.0);
  const auto H = size_t(s.hidden);
  for (size_t r = 0; r < size_t(s.rows); ++r) {
    double* row = &x[r * H];
    double mean = 0;
    for (size_t j = 0; j < H; ++j) mean += row[j];
    mean /= double(H);
    double var = 0;  // biased (divide by H), as torch.nn.functional.layer_norm
    for (size_t j = 0; j < H; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= double(H);
    const double inv_std = 1.0 / std::sqrt(var + s.eps);
    for (size_t j = 0; j < H; ++j) row[j] = (row[j] - mean) * inv_std * w[j] + b[j];
  }
  store_all(c.output(0), x);
}

}  // namespace amk::ref
