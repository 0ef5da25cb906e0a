// ROPE and ROPE_FREQ: Llama rotate-half rotary embedding. For each head and i < half =
// head_dim / 2, the pair (x[i], x[i + half]) is rotated by the angle pos * inv_freq[i]. The two
// opcodes differ only in where inv_freq comes from: ROPE derives the default table from `theta`,
// ROPE_FREQ reads it from input 2 (a scaled table: Llama 3 "llama3", "linear").
//
// The angle is computed in float32 exactly the way reference.py (and HF eager Llama) computes it:
// the float32 table (amk/rope.h), then the fp32 product with the position converted to fp32. The
// model was trained with those angles and at long positions they differ from exact ones by far
// more than the output rounding, so the oracle must use them too. The rotation itself is done in
// double and rounded once.
#include <cmath>
#include <string>
#include <vector>

#include "amk/rope.h"
#include "vm/reference/ops/numeric.h"
#include "vm/reference/ops/ops.h"

namespace amk::ref {

namespace {

int64_t checked_head_dim(const OpContext& c) {
  const int64_t head_dim = c.int_param("head_dim");
  if (head_dim < 2 || head_dim % 2 != 0)
    c.fail("param head_dim must be even and >= 2, got " + std::to_string(head_dim));
  return head_dim;
}

// Checks x, positions and the output, then rotates with `inv_freq` (head_dim / 2 values).
void rotate_half(const OpContext& c, int64_t head_dim, const std::vector<float>& inv_freq) {
  const Tensor& x = c.input(0);
  const Tensor& positions = c.input(1);
  require_float(c, x, "input 0 (x)");
  if (x.shape.size() != 2 && x.shape.size() != 3)
    c.fail("input 0 (x) must be [n_heads, head_dim] or [S, n_heads, head_dim], got shape " +
           shape_str(x.shape));
  // A flat row [1, n_heads * head_dim] (a GEMV's output) is read as [n_heads, head_dim]: the
  // same elements, so the lowering needs no reshaping COPY before RoPE.
  const bool flat_row = x.shape.size() == 2 && x.shape[0] == 1 && x.shape[1] % head_dim == 0;
  if (x.shape.back() != head_dim && !flat_row)
    c.fail("input 0 (x) has shape " + shape_str(x.shape) + ", its last dimension must equal "
           "param head_dim " + std::to_string(head_dim) + " (or be a flat row of whole heads)");
  if (!is_integer_dtype(positions.dtype))
    c.fail("input 1 (positions) must have an integer dtype, got " +
           std::string(name_of(positions.dtype)));
  const int64_t S = x.shape.size() == 3 ? x.shape[0] : 1;
  require_numel(c, positions, "input 1 (positions)", S,
                x.shape.size() == 3 ? "one position per row of x's first dimension"
                                    : "one position for a rank-2 x");
  require_float(c, c.output(0), "output 0");
  require_numel(c, c.output(0), "output 0", x.numel(), "the size of input 0");

  const int64_t heads = x.shape.back() == head_dim ? x.shape[x.shape.size() - 2] : x.shape[1] / head_dim;
  const int64_t half = head_dim / 2;
  std::vector<double> v = load_all(x);
  std::vector<double> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int64_t s = 0; s < S; ++s) {
    const auto pos = static_cast<float>(positions.get_int(s));
    for (int64_t i = 0; i < half; ++i) {
      const auto angle = double(pos * inv_freq[size_t(i)]);
      cs[size_t(i)] = std::cos(angle);
      sn[size_t(i)] = std::sin(angle);
    }
    for (int64_t h = 0; h < heads; ++h) {
      double* row = &v[size_t((s * heads + h) * head_dim)];
      for (int64_t i = 0; i < half; ++i) {
        const double a = row[i], b = row[i + half];
        row[i] = a * cs[size_t(i)] - b * sn[size_t(i)];
        row[i + half] = b * cs[size_t(i)] + a * sn[size_t(i)];
      }
    }
  }
  store_all(c.output(0), v);
}

}  // namespace

void op_rope(const OpContext& c) {
  c.check_registry();
  const int64_t head_dim = checked_head_dim(c);
  const auto theta = static_cast<float>(c.real_param("theta"));
  if (!(theta > 0)) c.fail("param theta must be > 0, got " + std::to_string(theta));
  rotate_half(c, head_dim, default_rope_inv_freq_f32(theta, head_dim));
}

void op_rope_freq(const OpContext& c) {
  c.check_registry();
  const int64_t head_dim = checked_head_dim(c);
  const Tensor& table = c.input(2);
  require_float(c, table, "input 2 (inv_freq)");
  require_numel(c, table, "input 2 (inv_freq)", head_dim / 2, "head_dim / 2 frequencies");
  // Read as the float32 the angle arithmetic uses; F32 tables (what the lowering writes) are
  // exact, narrower ones widen exactly.
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = static_cast<float>(table.get(int64_t(i)));
    if (!std::isfinite(inv_freq[i]))
      c.fail("input 2 (inv_freq) element " + std::to_string(i) + " is not finite");
  }
  rotate_half(c, head_dim, inv_freq);
}

}  // namespace amk::ref
