// SOFTMAX along one dimension (params dim, default -1), max-subtracted so large logits do not
// overflow.
#include <cmath>
#include <string>
#include <vector>

#include "vm/reference/ops/numeric.h"
#include "vm/reference/ops/ops.h"

namespace amk::ref {

void op_softmax(const OpContext& c) {
  c.check_registry();
  const Tensor& x = c.input(0);
  require_float(c, x, "input 0 (x)");
  require_float(c, c.output(0), "output 0");
  const auto rank = int64_t(x.shape.size());
  if (rank < 1) c.fail("input 0 (x) must have rank >= 1, got a scalar");
  const int64_t dim = c.int_param_or("dim", -1);
  if (dim < -rank || dim >= rank)
    c.fail("param dim " + std::to_string(dim) + " is out of range for input 0 (x) of shape " +
           shape_str(x.shape));
  require_numel(c, c.output(0), "output 0", x.numel(), "the size of input 0");

  const auto d = size_t(dim < 0 ? dim + rank : dim);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i) outer *= x.shape[i];
  for (size_t i = d + 1; i < x.shape.size(); ++i) inner *= x.shape[i];
  const int64_t len = x.shape[d];

  std::vector<double> v = load_all(x);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      const auto at = [&](int64_t j) -> double& { return v[size_t((o * len + j) * inner + in)]; };
      double max = -INFINITY;
      for (int64_t j = 0; j < len; ++j) max = std::fmax(max, at(j));
      double sum = 0;
      for (int64_t j = 0; j < len; ++j) sum += (at(j) = std::exp(at(j) - max));
      for (int64_t j = 0; j < len; ++j) at(j) /= sum;
    }
  }
  store_all(c.output(0), v);
}

}  // namespace amk::ref
