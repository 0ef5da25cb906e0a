// RoPE inverse-frequency tables in float32, the precision the model was trained with.
//
// transformers builds inv_freq as a float32 tensor (modeling_rope_utils.py) and multiplies it by
// float32 positions; at long positions an angle from an exactly computed table differs from the
// trained one by more than an output ulp, so AMK reproduces the float32 arithmetic step by step.
// The ROPE opcode computes the default table itself from `theta`; ROPE_FREQ reads one of these
// tables from a CONST buffer (docs/OPCODES.md).
#pragma once

#include <cstdint>
#include <vector>

namespace amk {

struct ModelConfig;

// head_dim / 2 values 1 / theta^(i / half): exponent in fp32, the power rounded to fp32, its fp32
// reciprocal (reference.py's _rope_tables; HF's _compute_default_rope_parameters).
std::vector<float> default_rope_inv_freq_f32(float theta, int64_t head_dim);

// The default table with the config's scaling applied in float32 as transformers applies it
// (linear: / factor; llama3: _compute_llama3_parameters). rope_inv_freq() in model_config.h is
// the same formula in double.
std::vector<float> rope_inv_freq_f32(const ModelConfig& config);

}  // namespace amk
