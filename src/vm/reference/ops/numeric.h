// Element access in double precision for the reference ops (internal to amk_core).
//
// The ops compute in double and round once on the way out, so they need a store that rounds
// straight from double to the storage type: going through float first would round twice.
// Implemented in src/vm/reference/tensor.cpp, next to the storage codecs it shares with Tensor.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "amk/ir.h"
#include "amk/tensor.h"

namespace amk::ref {

bool is_float_dtype(DType d);    // F32, F16, BF16, F8E4M3, F8E5M2
bool is_integer_dtype(DType d);  // I32, I8, I4, U8 (BOOL is neither)

// The stored value, widened exactly (I4 reads as its unsigned nibble 0..15, BOOL as 0/1).
double load(const Tensor& t, int64_t i);
// Elements first .. first + out.size() - 1, as load() reads each, with the range checked once:
// the attention ops read a cached key or value row of head_dim elements per window position.
void load_range(const Tensor& t, int64_t first, std::span<double> out);
// Rounds `v` once to t.dtype: floats round to nearest even (F8E4M3 has no inf: overflow is
// NaN); integers truncate toward zero and throw OpError when the result does not fit; BOOL
// stores v != 0.
void store(Tensor& t, int64_t i, double v);

std::string shape_str(std::span<const int64_t> shape);

}  // namespace amk::ref
