// The sampling algorithm of amk/sampler.h, step by step as the header specifies it.
#include "amk/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "amk/hash.h"

namespace amk {

namespace {

// The kept tokens (ids) and their scaled logits z, ranked best first (ties: lower id first).
struct Candidates {
  std::vector<int64_t> ids;
  std::vector<double> z;  // indexed by token id
};

// softmax weights exp(z - max) of the kept ids, in their rank order, and their sum.
std::vector<double> weights(const Candidates& c, double* total) {
  const double zmax = c.z[static_cast<size_t>(c.ids.front())];
  std::vector<double> w;
  w.reserve(c.ids.size());
  *total = 0.0;
  for (int64_t id : c.ids) {
    w.push_back(std::exp(c.z[static_cast<size_t>(id)] - zmax));
    *total += w.back();
  }
  return w;
}

// Steps 1 and 2 of the header: the kept tokens after temperature, top-k, top-p and min-p.
Candidates filtered(std::span<const float> logits, const SamplingParams& params) {
  Candidates c;
  c.z.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    const double z = static_cast<double>(logits[i]) / params.temperature;
    // A NaN logit cannot be ranked; it is treated as impossible (-inf) rather than poisoning
    // the softmax.
    c.z[i] = std::isnan(z) ? -std::numeric_limits<double>::infinity() : z;
  }
  c.ids.resize(logits.size());
  std::iota(c.ids.begin(), c.ids.end(), int64_t{0});
  const auto better = [&](int64_t a, int64_t b) {
    const double za = c.z[static_cast<size_t>(a)], zb = c.z[static_cast<size_t>(b)];
    return za != zb ? za > zb : a < b;
  };
  // Impossible tokens go, unless every token is impossible (then the best-ranked, id 0, stays).
  const size_t k = params.top_k > 0 ? std::min<size_t>(static_cast<size_t>(params.top_k), c.ids.size())
                                    : c.ids.size();
  std::partial_sort(c.ids.begin(), c.ids.begin() + static_cast<std::ptrdiff_t>(k), c.ids.end(), better);
  c.ids.resize(k);
  while (c.ids.size() > 1 && std::isinf(c.z[static_cast<size_t>(c.ids.back())]) &&
         c.z[static_cast<size_t>(c.ids.back())] < 0)
    c.ids.pop_back();
  if (params.top_p < 1.0) {
    double total = 0.0;
    const std::vector<double> w = weights(c, &total);
    double running = 0.0;
    size_t keep = 0;
    while (keep < w.size()) {
      running += w[keep] / total;
      ++keep;
      if (running >= params.top_p) break;
    }
    c.ids.resize(std::max<size_t>(keep, 1));
  }
  if (params.min_p > 0.0) {
    double total = 0.0;
    const std::vector<double> w = weights(c, &total);
    const double threshold = params.min_p * (w.front() / total);
    size_t keep = 1;  // the best token has the largest probability and always stays
    while (keep < w.size() && w[keep] / total >= threshold) ++keep;
    c.ids.resize(keep);
  }
  return c;
}

void check(std::span<const float> logits, const SamplingParams& params) {
  if (logits.empty()) throw std::invalid_argument("sampling: no logits");
  if (const std::string problem = sampling_params_problem(params); !problem.empty())
    throw std::invalid_argument("sampling: " + problem);
}

}  // namespace

std::string sampling_params_problem(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    return fmt::format("temperature must be a finite number >= 0, got {}", p.temperature);
  if (p.top_k < 0) return fmt::format("top-k must be >= 0 (0 turns it off), got {}", p.top_k);
  if (!(p.top_p > 0.0 && p.top_p <= 1.0)) return fmt::format("top-p must be in (0, 1], got {}", p.top_p);
  if (!(p.min_p >= 0.0 && p.min_p <= 1.0)) return fmt::format("min-p must be in [0, 1], got {}", p.min_p);
  return "";
}

int64_t greedy_token(std::span<const float> logits) {
  if (logits.empty()) throw std::invalid_argument("sampling: no logits");
  int64_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[static_cast<size_t>(best)] || std::isnan(logits[static_cast<size_t>(best)]))
      best = static_cast<int64_t>(i);
  return best;
}

double sampling_uniform(uint64_t seed, uint64_t draw_index) {
  const uint64_t bits = splitmix64(seed + draw_index * kSplitmixGamma);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

std::vector<double> sampling_distribution(std::span<const float> logits, const SamplingParams& params) {
  check(logits, params);
  std::vector<double> p(logits.size(), 0.0);
  if (params.temperature == 0.0) {
    p[static_cast<size_t>(greedy_token(logits))] = 1.0;
    return p;
  }
  Candidates c = filtered(logits, params);
  std::sort(c.ids.begin(), c.ids.end());  // the header's sum order: ascending id
  double zbest = -std::numeric_limits<double>::infinity();
  for (int64_t id : c.ids) zbest = std::max(zbest, c.z[static_cast<size_t>(id)]);
  // exp(z - zbest); with an infinite best (every kept logit -inf, or one +inf) the mass goes to
  // the tokens equal to it, instead of NaN from inf - inf.
  const auto weight = [&](int64_t id) {
    const double z = c.z[static_cast<size_t>(id)];
    return std::isinf(zbest) ? (z == zbest ? 1.0 : 0.0) : std::exp(z - zbest);
  };
  double total = 0.0;
  for (int64_t id : c.ids) total += weight(id);
  for (int64_t id : c.ids) p[static_cast<size_t>(id)] = weight(id) / total;
  return p;
}

int64_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t draw_index) {
  check(logits, params);
  if (params.temperature == 0.0) return greedy_token(logits);
  const std::vector<double> p = sampling_distribution(logits, params);
  const double u = sampling_uniform(params.seed, draw_index);
  double running = 0.0;
  int64_t last_kept = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0) continue;
    last_kept = static_cast<int64_t>(i);
    running += p[i];
    if (running > u) return last_kept;
  }
  return last_kept;
}

PackedSampling pack_sampling(const SamplingParams& params, uint64_t draw_offset) {
  PackedSampling packed;
  packed.floats = {static_cast<float>(params.temperature), static_cast<float>(params.top_p),
                   static_cast<float>(params.min_p), 0.0f};
  const int64_t k = std::clamp<int64_t>(params.top_k, -1, std::numeric_limits<int32_t>::max());
  const auto lo = [](uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); };
  const auto hi = [](uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v >> 32)); };
  packed.ints = {static_cast<int32_t>(k), lo(params.seed), hi(params.seed), lo(draw_offset), hi(draw_offset), 0, 0, 0};
  return packed;
}

SamplingParams unpack_sampling(std::span<const float> floats, std::span<const int32_t> ints, uint64_t* draw_offset) {
  if (floats.size() < 3 || ints.size() < 5)
    throw std::invalid_argument(fmt::format("sampling settings need 3 floats and 5 ints, got {} and {}",
                                            floats.size(), ints.size()));
  const auto u64 = [&](size_t at) {
    return static_cast<uint64_t>(static_cast<uint32_t>(ints[at])) |
           static_cast<uint64_t>(static_cast<uint32_t>(ints[at + 1])) << 32;
  };
  SamplingParams p;
  p.temperature = floats[0];
  p.top_p = floats[1];
  p.min_p = floats[2];
  p.top_k = ints[0];
  p.seed = u64(1);
  if (draw_offset != nullptr) *draw_offset = u64(3);
  return p;
}

}  // namespace amk
