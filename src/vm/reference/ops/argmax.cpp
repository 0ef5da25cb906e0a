// SAMPLE_ARGMAX: the index of the largest logit of each row of the last dimension.
//
// Ties go to the first index and NaN counts as larger than every number (so the first NaN wins),
// exactly as torch.argmax, which reference.py calls: a NaN in the logits then shows in the token
// instead of being silently skipped.
#include <cmath>
#include <string>
#include <vector>

#include "vm/reference/ops/numeric.h"
#include "vm/reference/ops/ops.h"

namespace amk::ref {

void op_sample_argmax(const OpContext& c) {
  c.check_registry();
  const Tensor& logits = c.input(0);
  require_float(c, logits, "input 0 (logits)");
  const int64_t V = last_dim(c, logits, "input 0 (logits)");
  if (V < 1) c.fail("input 0 (logits) has an empty last dimension, shape " + shape_str(logits.shape));
  const int64_t rows = logits.numel() / V;
  Tensor& out = c.output(0);
  if (!is_integer_dtype(out.dtype))
    c.fail("output 0 must have an integer dtype, got " + std::string(name_of(out.dtype)));
  require_numel(c, out, "output 0", rows, "one token per row of logits");

  std::vector<double> best(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t arg = 0;
    double max = load(logits, r * V);
    for (int64_t j = 1; j < V && !std::isnan(max); ++j) {
      const double v = load(logits, r * V + j);
      if (std::isnan(v) || v > max) {
        max = v;
        arg = j;
      }
    }
    best[size_t(r)] = double(arg);
  }
  store_all(out, best);
}

}  // namespace amk::ref
