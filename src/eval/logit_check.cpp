#include "amk/logit_check.h"

#include <algorithm>
#include <cmath>

namespace amk::eval {

namespace {

int64_t argmax_of(const std::vector<float>& v) {
  return std::max_element(v.begin(), v.end()) - v.begin();
}

}  // namespace

StepCheck compare_logits(const std::vector<float>& ref, const std::vector<float>& ours,
                         double tolerance) {
  StepCheck c;
  if (ref.empty() || ref.size() != ours.size()) return c;
  double max_ref = 0, max_err = 0;
  bool finite = true;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, std::abs(double(ref[i])));
    if (!std::isfinite(double(ours[i])) || !std::isfinite(double(ref[i]))) finite = false;
    max_err = std::max(max_err, std::abs(double(ours[i]) - double(ref[i])));
  }
  c.relative_error = !finite ? INFINITY : max_ref > 0 ? max_err / max_ref : max_err;
  c.ref_argmax = argmax_of(ref);
  c.our_argmax = argmax_of(ours);
  double second = -INFINITY;
  for (size_t i = 0; i < ref.size(); ++i)
    if (int64_t(i) != c.ref_argmax) second = std::max(second, double(ref[i]));
  c.argmax_decisive = double(ref[size_t(c.ref_argmax)]) - second > kArgmaxMargin * max_ref;
  c.pass = finite && c.relative_error <= tolerance &&
           (!c.argmax_decisive || c.our_argmax == c.ref_argmax);
  return c;
}

std::vector<int64_t> check_prompt(int n, int64_t vocab) {
  std::vector<int64_t> prompt;
  for (int i = 0; i < n; ++i) prompt.push_back((1 + int64_t{7919} * i) % vocab);
  return prompt;
}

}  // namespace amk::eval
