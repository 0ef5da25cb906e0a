// ROPE: Llama rotate-half rotary embedding. For each head and i < half = head_dim / 2, the pair
// (x[i], x[i + half]) is rotated by the angle pos * inv_freq[i], inv_freq[i] = 1 / theta^(i/half)
// (= theta^(-2i/head_dim)).
//
// The angle is computed in float32 exactly the way reference.py (and HF eager Llama) computes it:
// exponent i/half in fp32, theta^exponent rounded to fp32, its fp32 reciprocal, then the fp32
// product with the position converted to fp32. The model was trained with those angles and at
// long positions they differ from exact ones by far more than the output rounding, so the oracle
// must use them too. The rotation itself is done in double and rounded once.
#include <cmath>
#include <string>
#include <vector>

#include "vm/reference/ops/numeric.h"
#include "vm/reference/ops/ops.h"

namespace amk::ref {

namespace {

// The fp32 angle table of reference.py's _rope_tables for one position.
std::vector<double> rope_angles(int64_t pos, int64_t head_dim, float theta) {
  const int64_t half = head_dim / 2;
  std::vector<double> angle(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = float(i) / float(half);
    const auto power = static_cast<float>(std::pow(double(theta), double(exponent)));
    const float inv_freq = 1.0f / power;
    angle[size_t(i)] = double(static_cast<float>(pos) * inv_freq);
  }
  return angle;
}

}  // namespace

void op_rope(const OpContext& c) {
  c.check_registry();
  const Tensor& x = c.input(0);
  const Tensor& positions = c.input(1);
  const int64_t head_dim = c.int_param("head_dim");
  if (head_dim < 2 || head_dim % 2 != 0)
    c.fail("param head_dim must be even and >= 2, got " + std::to_string(head_dim));
  const auto theta = static_cast<float>(c.real_param("theta"));
  if (!(theta > 0)) c.fail("param theta must be > 0, got " + std::to_string(theta));
  require_float(c, x, "input 0 (x)");
  if (x.shape.size() != 2 && x.shape.size() != 3)
    c.fail("input 0 (x) must be [n_heads, head_dim] or [S, n_heads, head_dim], got shape " +
           shape_str(x.shape));
  if (x.shape.back() != head_dim)
    c.fail("input 0 (x) has shape " + shape_str(x.shape) + ", its last dimension must equal "
           "param head_dim " + std::to_string(head_dim));
  if (!is_integer_dtype(positions.dtype))
    c.fail("input 1 (positions) must have an integer dtype, got " +
           std::string(name_of(positions.dtype)));
  const int64_t S = x.shape.size() == 3 ? x.shape[0] : 1;
  require_numel(c, positions, "input 1 (positions)", S,
                x.shape.size() == 3 ? "one position per row of x's first dimension"
                                    : "one position for a rank-2 x");
  require_float(c, c.output(0), "output 0");
  require_numel(c, c.output(0), "output 0", x.numel(), "the size of input 0");

  const int64_t heads = x.shape[x.shape.size() - 2];
  const int64_t half = head_dim / 2;
  std::vector<double> v = load_all(x);
  for (int64_t s = 0; s < S; ++s) {
    const std::vector<double> angle = rope_angles(positions.get_int(s), head_dim, theta);
    for (int64_t h = 0; h < heads; ++h) {
      double* row = &v[size_t((s * heads + h) * head_dim)];
      for (int64_t i = 0; i < half; ++i) {
        const double cs = std::cos(angle[size_t(i)]), sn = std::sin(angle[size_t(i)]);
        const double a = row[i], b = row[i + half];
        row[i] = a * cs - b * sn;
        row[i + half] = b * cs + a * sn;
      }
    }
  }
  store_all(c.output(0), v);
}

}  // namespace amk::ref
