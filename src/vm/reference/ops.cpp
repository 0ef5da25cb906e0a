// STUB: replaced by the reference op semantics.
#include "amk/reference_ops.h"
namespace amk {
void run_reference_op(Op op, const Params&, std::span<const Tensor* const>, std::span<Tensor* const>) {
  throw OpError(std::string("not implemented: ") + std::string(name_of(op)));
}
}  // namespace amk
