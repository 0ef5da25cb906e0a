// Sampling inside the megakernel's last level (SAMPLE_ARGMAX flags bit 1, ops/sampling.cuh)
// against the host's exact distribution (amk/sampler.h) of the same logits: the step at one KV
// state is drawn thousands of times with consecutive draw indices, and the token frequencies
// must pass a chi-square test against sampling_distribution() of the logits the GPU computed
// there. Also: a seed repeats its tokens, temperature 0 is the argmax, and the host reads back
// one token per step, never the logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/cuda_vm.h"
#include "amk/lowering.h"
#include "amk/random_checkpoint.h"
#include "amk/sampler.h"
#include "gpu/gpu_support.h"

namespace {

using namespace amk;
using namespace amk::gpu_testing;

constexpr int64_t kContext = 64;
constexpr int64_t kPosition = 20;  // the KV state every draw starts from (seeded rows 0..19)
constexpr uint64_t kKvSeed = 5;
constexpr int64_t kToken = 17;

// The distribution the device should draw from: the host's, with the settings rounded as the
// program carries them (float32).
std::vector<double> host_distribution(const std::vector<float>& logits, const SamplingParams& s) {
  const PackedSampling packed = pack_sampling(s, 0);
  return sampling_distribution(logits, unpack_sampling(packed.floats, packed.ints, nullptr));
}

// Chi-square at significance 1e-4 (Wilson-Hilferty) over bins of consecutive token ids, each
// expecting >= 10 draws; a token the host gives no mass is never drawn.
void expect_frequencies(const std::vector<int64_t>& counts, const std::vector<double>& p,
                        int64_t draws, const std::string& what) {
  double stat = 0, bin_e = 0, bin_c = 0;
  int bins = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << what << ": token " << i << " has no mass on the host";
      continue;
    }
    bin_e += p[i] * double(draws);
    bin_c += double(counts[i]);
    if (bin_e >= 10.0) {
      stat += (bin_c - bin_e) * (bin_c - bin_e) / bin_e;
      ++bins;
      bin_e = bin_c = 0;
    }
  }
  if (bin_e > 0) stat += (bin_c - bin_e) * (bin_c - bin_e) / std::max(bin_e, 1e-9), ++bins;
  const int df = std::max(bins - 1, 1);
  const double a = 2.0 / (9.0 * df);
  const double critical = df * std::pow(1.0 - a + 3.719 * std::sqrt(a), 3);
  EXPECT_LT(stat, critical) << what << ": chi-square " << stat << " over " << bins << " bins";
  std::cout << "  " << what << ": chi-square " << stat << " (critical " << critical << ", " << bins
            << " bins)\n";
}

struct Case {
  std::string name;
  SamplingParams params;
};

// Draws `draws` tokens from the step at kPosition (draw indices 0, 1, ...) and checks them.
void check_sampling(CudaDecoder& dec, const std::vector<Case>& cases, int64_t draws) {
  dec.seek(kPosition, kKvSeed);
  const std::vector<float> logits = dec.step(kToken);
  dec.seek(kPosition, kKvSeed);
  dec.set_sampling(SamplingParams{}, 0);
  EXPECT_EQ(dec.step_sample(kToken), argmax(logits)) << "temperature 0 is the argmax";
  for (const Case& c : cases) {
    const std::vector<double> expected = host_distribution(logits, c.params);
    std::vector<int64_t> counts(logits.size(), 0), first;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t n = 0; n < draws; ++n) {
      dec.seek(kPosition, kKvSeed);
      dec.set_sampling(c.params, uint64_t(n) - uint64_t(kPosition));
      const int64_t token = dec.step_sample(kToken);
      ASSERT_GE(token, 0);
      ASSERT_LT(token, int64_t(logits.size()));
      ++counts[size_t(token)];
      if (n < 32) first.push_back(token);
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "  " << c.name << ": " << draws << " draws, " << us / double(draws)
              << " us per seek + step\n";
    expect_frequencies(counts, expected, draws, c.name);
    std::vector<int64_t> again;
    for (int64_t n = 0; n < 32; ++n) {
      dec.seek(kPosition, kKvSeed);
      dec.set_sampling(c.params, uint64_t(n) - uint64_t(kPosition));
      again.push_back(dec.step_sample(kToken));
    }
    EXPECT_EQ(again, first) << c.name << ": the same seed and draws gave other tokens";
  }
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"temperature 1", {1.0, 0, 1.0, 0.0, 11}},
      {"temperature 0.5, top-p 0.8", {0.5, 0, 0.8, 0.0, 12}},
      {"temperature 1.5, top-k 40, min-p 0.05", {1.5, 40, 1.0, 0.05, 13}},
      {"temperature 0.7, top-k 100, top-p 0.9, min-p 0.02", {0.7, 100, 0.9, 0.02, 14}},
  };
  return all;
}

TEST(CudaSampling, TinyFixtureFrequenciesMatchTheHostDistribution) {
  AMK_REQUIRE_GPU();
  const Checkpoint ck = Checkpoint::open(fixture_dir("tiny-llama"));
  ScheduleConfig partials;
  partials.tiling = {{"sample_argmax", {{"N_tile", 40}}}};
  for (const auto& [label, config] : {std::pair{"whole row", ScheduleConfig{}}, std::pair{"partials", partials}}) {
    SCOPED_TRACE(label);
    std::cout << "tiny-llama, " << label << ":\n";
    CudaDecoder dec(ck, lower(ck.config(), config, device_target(), kContext, DType::F32));
    check_sampling(dec, cases(), 4000);
  }
}

// A 49,152-token vocabulary with nearly flat logits (random weights): the threshold searches
// run over the whole row.
TEST(CudaSampling, LargeVocabularyFrequenciesMatchTheHostDistribution) {
  AMK_REQUIRE_GPU();
  const TempDir dir("smollm2_sampling");
  write_random_checkpoint(dir.path(), "smollm2-135m", DType::BF16, 99);
  const Checkpoint ck = Checkpoint::open(dir.path());
  CudaDecoder dec(ck, lower(ck.config(), {}, device_target(), kContext, DType::BF16));
  std::cout << "smollm2-135m shape, random weights:\n";
  check_sampling(dec, {cases()[1], cases()[3]}, 3000);
}

}  // namespace
