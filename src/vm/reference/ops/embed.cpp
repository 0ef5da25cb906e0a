// EMBED: out = table[ids], the gathered rows laid out one after another.
//
// The output is a page viewed in any shape with the right element count. The Python lowerer
// relies on that to reshape a flat [1, n*d] activation into [n, d] heads (ids = [0], the
// activation as the table, hidden = d), so `hidden` must divide the row width rather than equal
// it; for a plain embedding it equals the width.
#include <string>
#include <vector>

#include "vm/reference/ops/numeric.h"
#include "vm/reference/ops/ops.h"

namespace amk::ref {

void op_embed(const OpContext& c) {
  c.check_registry();
  const Tensor& ids = c.input(0);
  const Tensor& table = c.input(1);
  if (!is_integer_dtype(ids.dtype))
    c.fail("input 0 (ids) must have an integer dtype, got " + std::string(name_of(ids.dtype)));
  require_rank(c, table, "input 1 (table)", 2);
  const int64_t V = table.shape[0];
  const int64_t H = table.shape[1];
  const int64_t hidden = c.int_param("hidden");
  if (hidden < 1 || H % hidden != 0)
    c.fail("param hidden " + std::to_string(hidden) + " must be >= 1 and divide the table row "
           "width " + std::to_string(H));
  const int64_t n = ids.numel();
  require_numel(c, c.output(0), "output 0", n * H,
                std::to_string(n) + " ids x row width " + std::to_string(H));

  std::vector<double> rows(static_cast<size_t>(n * H));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids.get_int(i);
    if (id < 0 || id >= V)
      c.fail("input 0 (ids) element " + std::to_string(i) + " is " + std::to_string(id) +
             ", outside the table's rows [0, " + std::to_string(V) + ")");
    for (int64_t j = 0; j < H; ++j) rows[size_t(i * H + j)] = load(table, id * H + j);
  }
  store_all(c.output(0), rows);
}

}  // namespace amk::ref
