// RoPE inverse frequencies with the scalings AMK supports; the formulas are transformers'
// (_compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
// _compute_llama3_parameters in modeling_rope_utils.py), so AMK rotates exactly as the model
// was trained to.
#include <cmath>
#include <numbers>

#include "amk/model_config.h"
#include "amk/rope.h"

namespace amk {

std::vector<double> rope_inv_freq(const ModelConfig& config) {
  const RopeConfig& rope = config.rope;
  const int64_t dim = config.head_dim;
  std::vector<double> inv(static_cast<size_t>(dim / 2));
  for (size_t i = 0; i < inv.size(); ++i)
    inv[i] = 1.0 / std::pow(rope.theta, static_cast<double>(2 * i) / static_cast<double>(dim));

  switch (rope.type) {
    case RopeType::Default:
      break;
    case RopeType::Linear:
      // Scaling positions by 1/factor is the same as scaling every frequency by it.
      for (double& f : inv) f /= rope.factor;
      break;
    case RopeType::Llama3: {
      // Wavelengths shorter than the original context / high_freq_factor keep their frequency;
      // longer than original context / low_freq_factor are slowed by `factor`; in between, the
      // two are blended linearly in (original context / wavelength).
      const double old_ctx = static_cast<double>(rope.original_max_position_embeddings);
      const double low_freq_wavelen = old_ctx / rope.low_freq_factor;
      const double high_freq_wavelen = old_ctx / rope.high_freq_factor;
      for (double& f : inv) {
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen < high_freq_wavelen) continue;
        if (wavelen > low_freq_wavelen) {
          f /= rope.factor;
          continue;
        }
        const double smooth = (old_ctx / wavelen - rope.low_freq_factor) /
                              (rope.high_freq_factor - rope.low_freq_factor);
        f = (1.0 - smooth) * f / rope.factor + smooth * f;
      }
      break;
    }
  }
  return inv;
}

std::vector<float> default_rope_inv_freq_f32(float theta, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(i) / static_cast<float>(half);
    const auto power = static_cast<float>(std::pow(double(theta), double(exponent)));
    inv[static_cast<size_t>(i)] = 1.0f / power;
  }
  return inv;
}

std::vector<float> rope_inv_freq_f32(const ModelConfig& config) {
  const RopeConfig& rope = config.rope;
  std::vector<float> inv =
      default_rope_inv_freq_f32(static_cast<float>(rope.theta), config.head_dim);
  // torch applies a Python scalar to a float32 tensor as a float32 operand.
  const auto factor = static_cast<float>(rope.factor);
  switch (rope.type) {
    case RopeType::Default:
      break;
    case RopeType::Linear:
      for (float& f : inv) f /= factor;
      break;
    case RopeType::Llama3: {
      const auto old_ctx = static_cast<float>(rope.original_max_position_embeddings);
      const auto low = static_cast<float>(rope.low_freq_factor);
      const auto high = static_cast<float>(rope.high_freq_factor);
      // The wavelength bounds are Python floats (double) in transformers, compared against a
      // float32 tensor: the comparison promotes nothing, so they are rounded to float32 too.
      const auto low_freq_wavelen = static_cast<float>(double(rope.original_max_position_embeddings) /
                                                       rope.low_freq_factor);
      const auto high_freq_wavelen = static_cast<float>(
          double(rope.original_max_position_embeddings) / rope.high_freq_factor);
      const auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
      for (float& f : inv) {
        const float wavelen = two_pi / f;
        const float scaled = wavelen > low_freq_wavelen ? f / factor : f;
        const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
        if (!medium) {
          f = scaled;
          continue;
        }
        const float smooth = (old_ctx / wavelen - low) / (high - low);
        f = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
      break;
    }
  }
  return inv;
}

}  // namespace amk
