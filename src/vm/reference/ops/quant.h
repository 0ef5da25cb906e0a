// Group-wise weight-only quantization, shared by DEQUANT and the quantized GEMV/GEMM mode.
//
// Storage: q is I8 (signed) or I4 (unsigned nibbles, two per byte, low nibble first) with
// logical shape [..., K]; scales (and optional zeros) are float [..., ceil(K / group)], and
// column k uses group k / group (the last group may be short).
//   symmetric (no zeros):  I8: real = q * s          I4: real = (nibble - 8) * s
//   asymmetric (zeros z):  I8: real = (q - z) * s    I4: real = (nibble - z) * s
// The asymmetric int4 rule follows the quantizer (it stores unsigned nibbles and the zero point
// in that domain) and the CUDA kernel of the reference project; reference.py's dequant helper
// would subtract 8 as well, which dequantizes every asymmetric weight it produces 8 * s too low.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "vm/reference/ops/op_context.h"

namespace amk::ref {

// params qdtype 6 -> I8, 7 -> I4; anything else fails.
DType quant_dtype(const OpContext& c, int64_t qdtype);

// Checks q (dtype, rank >= 1, even rows for I4) and returns its row width K.
int64_t check_quantized(const OpContext& c, const Tensor& q, std::string_view what, DType qdtype);

// Checks a scales / zeros operand: float, shape == q.shape[:-1] + [ceil(K / group)].
void check_group_operand(const OpContext& c, const Tensor& t, std::string_view what,
                         const Tensor& q, int64_t group);

inline double dequant_value(DType qdtype, double stored, double scale, const double* zero) {
  if (zero != nullptr) return (stored - *zero) * scale;
  return (qdtype == DType::I4 ? stored - 8.0 : stored) * scale;
}

}  // namespace amk::ref
