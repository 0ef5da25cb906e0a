// The sampler (amk/sampler.h) against distributions computed here by hand from the header's
// definitions: chi-square goodness of fit over many seeded draws for several settings (and the
// same test rejecting a slightly wrong distribution, so it has the power to fail), the
// documented uniform draw and its mapping to a token, reproducibility, and greedy = argmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "amk/hash.h"
#include "amk/sampler.h"

namespace {

using namespace amk;

// Probabilities laid out out of rank order, so the filters must rank them.
//                                         id: 0     1     2     3     4     5     6     7
const std::vector<double> kProbabilities = {0.05, 0.30, 0.12, 0.03, 0.22, 0.08, 0.16, 0.04};

std::vector<float> logits_of(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

// p_i^(1/T) renormalised over the ids in `keep` (the expected result of a setting, worked out by
// hand below), 0 elsewhere.
std::vector<double> tempered_over(const std::vector<int>& keep, double temperature) {
  std::vector<double> q(kProbabilities.size(), 0.0);
  double total = 0;
  for (int id : keep) total += q[size_t(id)] = std::pow(kProbabilities[size_t(id)], 1.0 / temperature);
  for (double& x : q) x /= total;
  return q;
}

// The chi-square critical value at significance 1e-4 (Wilson-Hilferty), so a correct sampler
// fails one run in ten thousand.
double chi_square_critical(int df) {
  const double z = 3.719;  // the standard normal's 1 - 1e-4 quantile
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3);
}

// The statistic over the tokens `expected` gives mass; a draw of any other token is an outright
// failure (returned as infinity).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& expected, int64_t draws, int* df) {
  double stat = 0;
  *df = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] == 0) {
      if (counts[i] != 0) return INFINITY;
      continue;
    }
    const double e = expected[i] * static_cast<double>(draws);
    stat += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
    ++*df;
  }
  return stat;
}

std::vector<int64_t> draw_counts(const SamplingParams& params, int64_t draws) {
  const std::vector<float> logits = logits_of(kProbabilities);
  std::vector<int64_t> counts(logits.size(), 0);
  for (int64_t n = 0; n < draws; ++n) ++counts[size_t(sample_token(logits, params, uint64_t(n)))];
  return counts;
}

struct Setting {
  const char* name;
  SamplingParams params;
  std::vector<double> expected;
};

TEST(Sampler, DrawsFollowTheFilteredDistribution) {
  // Ranks by probability: 1 (.30), 4 (.22), 6 (.16), 2 (.12), 5 (.08), 0 (.05), 7 (.04), 3 (.03).
  const std::vector<Setting> settings = {
      {"plain", {.temperature = 1.0, .seed = 1}, kProbabilities},
      {"top-k 3", {.temperature = 1.0, .top_k = 3, .seed = 2}, tempered_over({1, 4, 6}, 1.0)},
      // .30 + .22 = .52 >= .5: two tokens.
      {"top-p 0.5", {.temperature = 1.0, .top_p = 0.5, .seed = 3}, tempered_over({1, 4}, 1.0)},
      // .09 = 0.3 * .30: .12 stays, .08 goes.
      {"min-p 0.3", {.temperature = 1.0, .min_p = 0.3, .seed = 4}, tempered_over({1, 4, 6, 2}, 1.0)},
      {"temperature 2, top-k 5", {.temperature = 2.0, .top_k = 5, .seed = 5}, tempered_over({1, 4, 6, 2, 5}, 2.0)},
      // T = 0.5 squares: .09 .0484 .0256 .0144 ...; min-p .2 of the largest (.09/sum) keeps those
      // >= .018/sum: three tokens (the temperature acts before min-p, as in transformers).
      {"temperature 0.5, min-p 0.2", {.temperature = 0.5, .min_p = 0.2, .seed = 6}, tempered_over({1, 4, 6}, 0.5)},
      // T = 2 roots: .548 .469 .4 .346 .283 .224 .2 .173 (sum 2.643); top-p .6: cumulative
      // .207 .385 .536 .667 -> four tokens; then top-k 3 first keeps three, and top-p over
      // those three (.548+.469 = 1.017 of 1.417 = .718 >= .6) keeps two.
      {"temperature 2, top-p 0.6", {.temperature = 2.0, .top_p = 0.6, .seed = 7}, tempered_over({1, 4, 6, 2}, 2.0)},
      {"temperature 2, top-k 3, top-p 0.6", {.temperature = 2.0, .top_k = 3, .top_p = 0.6, .seed = 8},
       tempered_over({1, 4}, 2.0)},
  };
  constexpr int64_t kDraws = 200'000;
  for (const Setting& s : settings) {
    // The exact distribution the header defines is this one ...
    const std::vector<double> exact = sampling_distribution(logits_of(kProbabilities), s.params);
    for (size_t i = 0; i < exact.size(); ++i) EXPECT_NEAR(exact[i], s.expected[i], 1e-6) << s.name << " token " << i;
    // ... and the draws follow it.
    const std::vector<int64_t> counts = draw_counts(s.params, kDraws);
    int df = 0;
    const double stat = chi_square(counts, s.expected, kDraws, &df);
    EXPECT_LT(stat, chi_square_critical(df)) << s.name << ": chi-square " << stat << " with " << df << " degrees of freedom";
  }
}

TEST(Sampler, TheChiSquareTestRejectsASlightlyWrongDistribution) {
  constexpr int64_t kDraws = 200'000;
  const std::vector<int64_t> counts = draw_counts({.temperature = 1.0, .seed = 11}, kDraws);
  int df = 0;
  const double right = chi_square(counts, kProbabilities, kDraws, &df);  // sets df before it is used
  ASSERT_LT(right, chi_square_critical(df));
  // One percent of mass moved from the best token to the second: the test must notice.
  std::vector<double> wrong = kProbabilities;
  wrong[1] -= 0.01;
  wrong[4] += 0.01;
  const double off = chi_square(counts, wrong, kDraws, &df);
  EXPECT_GT(off, chi_square_critical(df));
  // And the unfiltered draws are not the top-k ones.
  EXPECT_TRUE(std::isinf(chi_square(counts, tempered_over({1, 4, 6}, 1.0), kDraws, &df)));
}

TEST(Sampler, TheUniformDrawAndItsTokenAreTheDocumentedOnes) {
  const SamplingParams params{.temperature = 1.0, .seed = 0xC0FFEE};
  const std::vector<float> logits = logits_of(kProbabilities);
  const std::vector<double> p = sampling_distribution(logits, params);
  for (uint64_t n = 0; n < 2000; ++n) {
    const double u = static_cast<double>(splitmix64(params.seed + n * 0x9e3779b97f4a7c15ull) >> 11) / 9007199254740992.0;
    ASSERT_EQ(sampling_uniform(params.seed, n), u);
    // The first token, in id order, where the running sum passes u.
    double running = 0;
    int64_t expected = -1;
    for (size_t i = 0; i < p.size() && expected < 0; ++i)
      if ((running += p[i]) > u) expected = int64_t(i);
    ASSERT_EQ(sample_token(logits, params, n), expected) << "draw " << n << ", u " << u;
  }
}

TEST(Sampler, TheSameSeedGivesTheSameTokensAndAnotherSeedOthers) {
  const std::vector<float> logits = logits_of(kProbabilities);
  const SamplingParams a{.temperature = 1.0, .top_k = 6, .seed = 42}, b{.temperature = 1.0, .top_k = 6, .seed = 43};
  std::vector<int64_t> first, again, other;
  for (uint64_t n = 0; n < 64; ++n) {
    first.push_back(sample_token(logits, a, n));
    again.push_back(sample_token(logits, a, n));
    other.push_back(sample_token(logits, b, n));
  }
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
}

TEST(Sampler, TemperatureZeroIsArgmaxWithTheLowestIdOnTies) {
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  for (uint64_t seed : {0ull, 7ull, 123456789ull})
    for (uint64_t n = 0; n < 10; ++n) EXPECT_EQ(sample_token(logits, {.temperature = 0.0, .seed = seed}, n), 1);
  logits[3] = 2.5f;
  EXPECT_EQ(greedy_token(logits), 3);
  logits[0] = NAN;
  EXPECT_EQ(greedy_token(logits), 3) << "a NaN never wins";
  const std::vector<double> p = sampling_distribution(logits, {.temperature = 0.0});
  EXPECT_EQ(p, (std::vector<double>{0, 0, 0, 1, 0}));
  // top-k 1 at any temperature is greedy too.
  for (uint64_t n = 0; n < 10; ++n) EXPECT_EQ(sample_token(logits, {.temperature = 3.0, .top_k = 1}, n), 3);
}

TEST(Sampler, BadParametersAreNamed) {
  EXPECT_NE(sampling_params_problem({.temperature = -1}).find("temperature"), std::string::npos);
  EXPECT_NE(sampling_params_problem({.temperature = NAN}).find("temperature"), std::string::npos);
  EXPECT_NE(sampling_params_problem({.top_k = -2}).find("top-k"), std::string::npos);
  EXPECT_NE(sampling_params_problem({.top_p = 0}).find("top-p"), std::string::npos);
  EXPECT_NE(sampling_params_problem({.top_p = 1.5}).find("top-p"), std::string::npos);
  EXPECT_NE(sampling_params_problem({.min_p = 2}).find("min-p"), std::string::npos);
  EXPECT_EQ(sampling_params_problem({.temperature = 0.7, .top_k = 40, .top_p = 0.9, .min_p = 0.05}), "");
  const std::vector<float> none;
  EXPECT_THROW((void)sample_token(none, {}, 0), std::invalid_argument);
  EXPECT_THROW((void)sample_token(std::vector<float>{1.0f}, {.top_p = 3}, 0), std::invalid_argument);
}

}  // namespace
