// Choosing the next token from a step's logits: greedy, or a seeded draw from the distribution
// that temperature, top-k, top-p and min-p leave. The algorithm is specified exactly, so that
// another backend (the megakernel's final level) can reproduce the same token for the same seed:
//
//   0. temperature == 0: greedy. The argmax of the raw fp32 logits; on a tie the lowest token id.
//      No filter and no draw is involved.
//   1. Temperature: z_i = double(logit_i) / temperature (fp64 from here on).
//   2. Filters, in the order Hugging Face transformers applies its warpers (temperature, top-k,
//      top-p, min-p), so the temperature shapes what top-p and min-p see. (llama.cpp's default
//      chain applies the temperature last; the two orders differ when temperature != 1.)
//      Tokens are ranked by z descending, ties by lower id first.
//      - top-k (k > 0): keep the k best-ranked tokens.
//      - top-p (p < 1): softmax over the kept tokens; keep the shortest best-ranked prefix whose
//        probability sums to >= p (always at least one token).
//      - min-p (m > 0): softmax over the kept tokens; keep those with probability >= m * the
//        largest probability.
//      A token with z = -inf (logit -inf) is never kept unless nothing else is left.
//   3. The draw: probabilities p_i = exp(z_i - z_max) / sum over kept tokens (fp64, the sum taken
//      in ascending token id order). The uniform number for draw n of a seed is
//        u = (splitmix64(seed + n * 0x9e3779b97f4a7c15) >> 11) * 2^-53      (amk/hash.h; u in [0,1))
//      and the token is the first kept token, in ascending id order, at which the running sum of
//      p_i exceeds u (the last kept token if rounding leaves u above the total).
//   n counts the draws of one generation from 0 (the Generator passes the index of the token
//   being generated), so the same seed, prompt and settings give the same tokens.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace amk {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  double min_p = 0.0;        // 0: off
  uint64_t seed = 0;
};

// "" when the parameters are usable, else the problem naming the parameter ("top-p must be in
// (0, 1], got 1.5"). Temperature must be finite and >= 0, top-k >= 0.
std::string sampling_params_problem(const SamplingParams& params);

// The exact distribution step 3 draws from: a probability per token id (0 for filtered-out
// tokens), summing to 1. For temperature 0: 1 at the greedy token. Throws std::invalid_argument
// for bad parameters or empty logits.
std::vector<double> sampling_distribution(std::span<const float> logits, const SamplingParams& params);

// The greedy token: argmax, lowest id on ties (NaN logits never win).
int64_t greedy_token(std::span<const float> logits);

// Step 3's uniform number for draw `draw_index` of `seed`, in [0, 1).
double sampling_uniform(uint64_t seed, uint64_t draw_index);

// The token for `logits` at draw `draw_index`: greedy when temperature is 0, else the draw.
// Throws std::invalid_argument for bad parameters or empty logits.
int64_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t draw_index);

// The sampling settings as a lowered program carries them (SAMPLE_ARGMAX flags bit 1,
// docs/OPCODES.md): two small IO_INPUT buffers the host writes before a step, so a request
// changes them without recompiling. The step at position P draws with index draw_offset + P
// (mod 2^64): a generation whose first token comes from the step at P0 and is draw n0 sets
// draw_offset = n0 - P0. Temperature, top-p and min-p travel as float32 (the op samples with
// those rounded values); top-k above INT32_MAX is stored as INT32_MAX (the same: no filter).
struct PackedSampling {
  static constexpr int64_t kFloats = 4;  // temperature, top_p, min_p, 0
  static constexpr int64_t kInts = 8;    // top_k, seed lo, seed hi, draw_offset lo, hi, 0, 0, 0
  std::array<float, kFloats> floats{};
  std::array<int32_t, kInts> ints{};
};
PackedSampling pack_sampling(const SamplingParams& params, uint64_t draw_offset);
// The settings and the draw offset back. A SamplingParams that pack_sampling rounded comes back
// rounded; sampling_params_problem() says whether the result is usable.
SamplingParams unpack_sampling(std::span<const float> floats, std::span<const int32_t> ints,
                               uint64_t* draw_offset);

}  // namespace amk
