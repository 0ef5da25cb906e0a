// Dequantising GGUF tensors to f32: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K.
//
// The arithmetic is ggml's reference dequantisation, one rounding per operation in the order the
// `gguf` Python package (gguf.quants.dequantize) performs it, so that the results are
// bit-identical to that independent implementation (tests/test_gguf.cpp checks it). Most products
// of an f16 scale and a few-bit quant are exact in f32, so what decides the bits is the order of
// the roundings that remain: Q6_K's (d * sc) * q is not d * (sc * q) (the test catches that
// swap), and K-quant sub-block scales are rounded before use. The file is compiled with
// -ffp-contract=off so that no multiply-add is fused where a product could round.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "amk/gguf.h"

namespace amk {

bool can_dequantize(GgmlType t);
// "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K", for messages and docs.
std::string_view dequantizable_types_text();

// Converts the out.size() weights of type `t` encoded in `src` (exactly out.size() / block
// blocks) to f32. Throws GgufError "<what>: ..." for a type it does not convert, a count that is
// not a whole number of blocks or a byte size that does not match.
void dequantize_to_f32(GgmlType t, std::span<const std::byte> src, std::span<float> out,
                       std::string_view what);

// The whole tensor, in GGUF element order (dims[0] fastest). `file` names it in messages.
std::vector<float> dequantize(const GgufTensor& tensor, std::string_view file);

// An IEEE half's bits widened to float, exactly (subnormals, infinities and NaN payloads kept).
float f16_bits_to_f32(uint16_t h);

}  // namespace amk
