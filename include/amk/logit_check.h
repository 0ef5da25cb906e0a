// The logit comparison every correctness check uses: one step's logits of a schedule under test
// against the reference's, a relative tolerance and the argmax where it is decisive.
#pragma once

#include <cstdint>
#include <vector>

namespace amk::eval {

// GPU (BF16 weights, F32 accumulation in another order than the reference's double sums):
// max|ours - ref| / max|ref| must stay within this ...
inline constexpr double kGpuLogitTolerance = 1e-2;
// ... and the argmax must match wherever the reference's top-1 leads its top-2 by more than
// this (relative to max|ref|): a near-tie may legitimately flip under reordered sums.
inline constexpr double kArgmaxMargin = 2e-2;
// The data mode (a schedule's lowering on the reference VM against the plain lowering on the
// same VM, both in double): only the F32 rounding of different intermediate buffers differs.
inline constexpr double kDataModeLogitTolerance = 1e-4;

struct StepCheck {
  int64_t position = 0, token = 0;
  double relative_error = 0;  // max|ours - ref| / max|ref|; infinity when either is not finite
  int64_t ref_argmax = -1, our_argmax = -1;
  bool argmax_decisive = false;  // the reference's top-1 / top-2 gap exceeds the margin
  bool pass = false;
};

// Empty or differently sized vectors never pass.
StepCheck compare_logits(const std::vector<float>& reference, const std::vector<float>& ours,
                         double tolerance);

// A fixed prompt of `n` tokens, spread over the vocabulary so different embedding rows are read.
std::vector<int64_t> check_prompt(int n, int64_t vocab);

}  // namespace amk::eval
