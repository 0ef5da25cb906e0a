// DEQUANT and the checks it shares with the quantized GEMV/GEMM (see quant.h).
#include "vm/reference/ops/quant.h"

#include <string>
#include <vector>

#include "vm/reference/ops/numeric.h"
#include "vm/reference/ops/ops.h"

namespace amk::ref {

DType quant_dtype(const OpContext& c, int64_t qdtype) {
  if (qdtype == int64_t(DType::I8)) return DType::I8;
  if (qdtype == int64_t(DType::I4)) return DType::I4;
  c.fail("param qdtype " + std::to_string(qdtype) + " is not a quantized weight dtype (6 = I8, 7 = I4)");
}

int64_t check_quantized(const OpContext& c, const Tensor& q, std::string_view what, DType qdtype) {
  if (q.dtype != qdtype)
    c.fail(std::string(what) + " has dtype " + std::string(name_of(q.dtype)) + " but param qdtype " +
           std::to_string(int(qdtype)) + " says " + std::string(name_of(qdtype)));
  const int64_t K = last_dim(c, q, what);
  // Packing is flat over the element order, so only even rows start on a byte boundary and
  // match the per-row packing of the quantizer and the GPU kernels.
  if (qdtype == DType::I4 && K % 2 != 0)
    c.fail(std::string(what) + " is I4 with an odd row width " + std::to_string(K) +
           " (shape " + shape_str(q.shape) + "); packed rows must start on a byte");
  return K;
}

void check_group_operand(const OpContext& c, const Tensor& t, std::string_view what,
                         const Tensor& q, int64_t group) {
  require_float(c, t, what);
  std::vector<int64_t> expected(q.shape.begin(), q.shape.end() - 1);
  expected.push_back((q.shape.back() + group - 1) / group);
  require_shape(c, t, what, expected);
}

void op_dequant(const OpContext& c) {
  c.check_registry();
  const DType qd = quant_dtype(c, c.int_param("qdtype"));
  const Tensor& q = c.input(0);
  const int64_t K = check_quantized(c, q, "input 0 (q)", qd);
  const int64_t group = c.int_param("group");
  if (group < 1) c.fail("param group must be >= 1, got " + std::to_string(group));
  check_group_operand(c, c.input(1), "input 1 (scales)", q, group);
  const bool has_zeros = c.num_inputs() > 2;
  if (has_zeros) check_group_operand(c, c.input(2), "input 2 (zeros)", q, group);
  require_float(c, c.output(0), "output 0");
  require_numel(c, c.output(0), "output 0", q.numel(), "the size of input 0");

  const int64_t G = (K + group - 1) / group;
  const int64_t rows = K == 0 ? 0 : q.numel() / K;
  std::vector<double> out(static_cast<size_t>(q.numel()));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t g = r * G + k / group;
      const double zero = has_zeros ? load(c.input(2), g) : 0.0;
      out[size_t(r * K + k)] =
          dequant_value(qd, load(q, r * K + k), load(c.input(1), g), has_zeros ? &zero : nullptr);
    }
  }
  store_all(c.output(0), out);
}

}  // namespace amk::ref
