// SAMPLE_ARGMAX flags bit 1 on the device: a seeded draw from the logits row with the settings
// the host wrote (amk/sampler.h PackedSampling), in the step's last level, so no logits leave the
// GPU. The distribution is amk/sampler.h's (temperature, then top-k, top-p, min-p, then a draw
// in ascending token order at u = splitmix64(seed + draw * gamma) >> 11 * 2^-53, draw =
// draw_offset + the step position), computed by one CTA in fp32 with 2^-40 fixed-point masses:
//
//   key(l)    an order-preserving u32 of the logit (ranking by logit = ranking by z = l / T);
//   e(l)      = __expf((l - l_max) / T) in [0, 1], and the mass m(l) = floor(e * 2^40);
//   top-k     T_k = the largest key t with count(key >= t) >= k;
//   top-p     T_p = the largest key t >= T_k with mass(key >= t) >= ceil(p * mass(key >= T_k));
//   min-p     e >= min_p (the largest kept probability is always the best token's, e = 1);
//   draw      the first token, in id order, where the running kept mass exceeds
//             floor(u * total kept mass).
//
// Integer masses make every sum exact, so the same seed gives the same token on every run. The
// thresholds are found by a 9-ary search over keys: each pass over the logits evaluates 8 probe
// thresholds, so ~11 passes settle a u32 key. Differences from the host's fp64 algorithm: tokens
// tied with a top-k / top-p boundary are all kept (the host keeps the lower ids first), and
// probabilities below 2^-40 of the best token's count as 0; the tokens a seed draws may differ
// from the host's where fp32 rounding moves a boundary, never the distribution beyond that.
//
// op_fail codes (code >> 4 = AMK_OP_SAMPLE_ARGMAX): 5 a NaN / +inf logit or every logit -inf,
// 6 unusable settings, 7 the sampling inputs' shapes or dtypes, 3 op scratch too small.
#pragma once

#include "amk/hash.h"
#include "vm/cuda/ops/elementwise.cuh"
#include "vm/cuda/ops/scratch.h"

namespace amk::cuda {

constexpr int kSampleProbes = 8;

// Larger logit, larger key; -inf is the smallest key a non-NaN gets.
__device__ __forceinline__ uint32_t logit_key(float v) {
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

struct SampleRow {
  const amk_buffer_t* logits;
  int64_t V;
  float l_max, inv_t;
  // The best token's is exactly 1, also when 1 / T overflows (0 * inf would be NaN).
  __device__ __forceinline__ float e(float l) const {
    return l == l_max ? 1.0f : __expf((l - l_max) * inv_t);
  }
  __device__ __forceinline__ static uint64_t mass(float e) { return __float2ull_rz(e * 0x1p40f); }
};

// Every thread gets the block's sums of `acc` (kSampleProbes values). Ends with a barrier, so
// the scratch is free again.
__device__ __forceinline__ void block_sum_u64(const OpContext& c, uint64_t (&acc)[kSampleProbes],
                                              uint64_t* red) {
  const int warp = c.tid >> 5, lane = c.tid & 31, n_warps = c.n_threads >> 5;
#pragma unroll
  for (int p = 0; p < kSampleProbes; ++p)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[p] += __shfl_xor_sync(0xffffffffu, acc[p], o);
  if (lane == 0)
#pragma unroll
    for (int p = 0; p < kSampleProbes; ++p) red[warp * kSampleProbes + p] = acc[p];
  consumer_sync(c.n_threads);
#pragma unroll
  for (int p = 0; p < kSampleProbes; ++p) {
    uint64_t total = 0;
    for (int w = 0; w < n_warps; ++w) total += red[w * kSampleProbes + p];
    acc[p] = total;
  }
  consumer_sync(c.n_threads);
}

// The largest key t in [lo, hi] with weight(key >= t) >= target, given weight(key >= lo) >=
// target; weight counts tokens (kMass false) or sums their masses.
template <bool kMass>
__device__ uint32_t sample_threshold(const OpContext& c, const SampleRow& row, uint32_t lo,
                                     uint32_t hi, uint64_t target, uint64_t* red) {
  while (lo < hi) {
    const uint64_t range = uint64_t(hi) - lo;
    uint32_t probe[kSampleProbes];
#pragma unroll
    for (int p = 0; p < kSampleProbes; ++p)
      probe[p] = uint32_t(lo + ((p + 1) * range + kSampleProbes) / (kSampleProbes + 1));
    uint64_t acc[kSampleProbes] = {};
    for (int64_t j = c.tid; j < row.V; j += c.n_threads) {
      const float l = load_f(*row.logits, j);
      const uint32_t key = logit_key(l);
      if (key < probe[0]) continue;
      const uint64_t w = kMass ? SampleRow::mass(row.e(l)) : 1;
#pragma unroll
      for (int p = 0; p < kSampleProbes; ++p) acc[p] += key >= probe[p] ? w : 0;
    }
    block_sum_u64(c, acc, red);
    int best = -1;
#pragma unroll
    for (int p = 0; p < kSampleProbes; ++p)
      if (acc[p] >= target) best = p;
    if (best < 0) {
      hi = probe[0] - 1;
    } else {
      lo = probe[best];
      if (best + 1 < kSampleProbes) hi = probe[best + 1] - 1;
    }
  }
  return lo;
}

// The token: runs on every consumer thread of the task; `best` is the argmax (thread 0's view
// is enough, it is broadcast here). Returns false after op_fail.
__device__ inline bool sample_from_logits(const OpContext& c, const amk_buffer_t& logits,
                                          const amk_buffer_t& floats, const amk_buffer_t& ints,
                                          const amk_buffer_t& out, float best_v, int32_t best_i) {
  constexpr int code = AMK_OP_SAMPLE_ARGMAX * 16;
  if (c.scratch_bytes < kSampleScratchBytes) return op_fail(c, code + 3), false;
  uint64_t* red = reinterpret_cast<uint64_t*>(c.scratch);
  // Broadcast thread 0's argmax.
  if (c.tid == 0) {
    red[0] = __float_as_uint(best_v);
    red[1] = uint32_t(best_i);
  }
  consumer_sync(c.n_threads);
  best_v = __uint_as_float(uint32_t(red[0]));
  best_i = int32_t(uint32_t(red[1]));
  consumer_sync(c.n_threads);
  if (best_v != best_v || best_v == __builtin_huge_valf() || best_v == -__builtin_huge_valf())
    return op_fail(c, code + 5), false;

  const float* f = static_cast<const float*>(floats.ptr);
  const int32_t* n = static_cast<const int32_t*>(ints.ptr);
  const float temperature = f[0], top_p = f[1], min_p = f[2];
  const int32_t top_k = n[0];
  if (temperature == 0.0f) {
    if (c.tid == 0) static_cast<int32_t*>(out.ptr)[0] = best_i;
    return true;
  }
  if (!(temperature > 0.0f && temperature <= 3.4e38f) || top_k < 0 || !(top_p > 0.0f && top_p <= 1.0f) ||
      !(min_p >= 0.0f && min_p <= 1.0f))
    return op_fail(c, code + 6), false;
  const auto u64 = [&](int at) { return uint64_t(uint32_t(n[at])) | uint64_t(uint32_t(n[at + 1])) << 32; };
  const uint64_t seed = u64(1), draw = u64(3) + uint64_t(int64_t(c.pos < 0 ? 0 : c.pos));

  const SampleRow row{&logits, logits.numel, best_v, 1.0f / temperature};
  const uint32_t top_key = logit_key(best_v);
  uint32_t threshold = 0;
  if (top_k > 0 && top_k < row.V)
    threshold = sample_threshold<false>(c, row, 0, top_key, uint64_t(top_k), red);
  if (top_p < 1.0f) {
    // The top-k set's mass, then the top-p cut inside it.
    uint64_t acc[kSampleProbes] = {};
    for (int64_t j = c.tid; j < row.V; j += c.n_threads) {
      const float l = load_f(logits, j);
      if (logit_key(l) >= threshold) acc[0] += SampleRow::mass(row.e(l));
    }
    block_sum_u64(c, acc, red);
    const double want = ceil(double(top_p) * double(acc[0]));
    const uint64_t target = want < 1.0 ? 1 : (want >= double(acc[0]) ? acc[0] : uint64_t(want));
    threshold = sample_threshold<true>(c, row, threshold, top_key, target, red);
  }

  // The draw: contiguous id ranges per thread, an exclusive scan of their kept masses (in
  // thread order, so in id order), and the one thread whose range holds the target walks it.
  const int64_t per = (row.V + c.n_threads - 1) / c.n_threads;
  const int64_t begin = min(row.V, int64_t(c.tid) * per), end = min(row.V, begin + per);
  const auto kept_mass = [&](int64_t j) -> uint64_t {
    const float l = load_f(logits, j);
    if (logit_key(l) < threshold) return 0;
    const float e = row.e(l);
    return e >= min_p ? SampleRow::mass(e) : 0;
  };
  uint64_t own = 0;
  for (int64_t j = begin; j < end; ++j) own += kept_mass(j);
  const int warp = c.tid >> 5, lane = c.tid & 31, n_warps = c.n_threads >> 5;
  uint64_t incl = own;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint64_t v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) red[warp] = incl;
  consumer_sync(c.n_threads);
  uint64_t before = incl - own, total = 0;
  for (int w = 0; w < n_warps; ++w) {
    if (w < warp) before += red[w];
    total += red[w];
  }
  consumer_sync(c.n_threads);
  const uint64_t u53 = splitmix64(seed + draw * kSplitmixGamma) >> 11;
  const uint64_t target = __umul64hi(u53 << 11, total);  // floor(u * total), < total
  if (own > 0 && before <= target && target < before + own) {
    uint64_t running = before;
    int64_t token = -1;
    for (int64_t j = begin; j < end && token < 0; ++j) {
      running += kept_mass(j);
      if (running > target) token = j;
    }
    static_cast<int32_t*>(out.ptr)[0] = int32_t(token);
  }
  return true;
}

}  // namespace amk::cuda
