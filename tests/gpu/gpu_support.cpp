#include "gpu/gpu_support.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace amk::gpu_testing {

namespace fs = std::filesystem;

const CudaAvailability& availability() {
  static const CudaAvailability a = cuda_availability();
  return a;
}

fs::path testdata_dir() {
  if (const char* src = std::getenv("AMK_SOURCE_DIR"); src != nullptr && *src != '\0')
    return fs::path(src) / "tests" / "data";
  return fs::path(AMK_TESTDATA_DIR);
}

fs::path fixture_dir(std::string_view name) { return testdata_dir() / "fixtures" / std::string(name); }

GpuTarget device_target() {
  const CudaAvailability& a = availability();
  const bool h200 = a.device_name.find("H200") != std::string::npos;
  const GpuTarget* base = find_target(h200 ? "h200" : "h100");
  if (base == nullptr) throw std::logic_error("the built-in targets lost h100/h200");
  GpuTarget t = *base;
  if (a.sm_count > 0) t.num_sms = a.sm_count;
  return t;
}

int64_t argmax(std::span<const float> v) {
  int64_t best = 0;
  for (size_t j = 1; j < v.size(); ++j)
    if (v[j] > v[size_t(best)]) best = int64_t(j);
  return best;
}

namespace {

// The reference's largest and second-largest logits.
std::pair<float, float> top_two(std::span<const float> v) {
  float a = -std::numeric_limits<float>::infinity(), b = a;
  for (float x : v) {
    if (x > a) {
      b = a;
      a = x;
    } else if (x > b) {
      b = x;
    }
  }
  return {a, b};
}

}  // namespace

DecoderComparison compare_teacher_forced(Decoder& reference, Decoder& cuda,
                                         std::span<const int64_t> tokens, double tolerance,
                                         double decisive_gap) {
  DecoderComparison out;
  reference.reset();
  cuda.reset();
  auto fail = [&](int64_t pos, const std::string& what) {
    std::ostringstream os;
    os << "position " << pos << ": " << what;
    out.failures.push_back(os.str());
  };
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto pos = int64_t(i);
    const std::vector<float> ref = reference.step(tokens[i]);
    const std::vector<float> got = cuda.step(tokens[i]);
    if (got.size() != ref.size()) {
      fail(pos, "vocab " + std::to_string(got.size()) + " vs reference " + std::to_string(ref.size()));
      return out;
    }
    double diff = 0.0, scale = 0.0;
    bool finite = true;
    for (size_t j = 0; j < ref.size(); ++j) {
      if (!std::isfinite(got[j])) finite = false;
      diff = std::max(diff, std::fabs(double(got[j]) - double(ref[j])));
      scale = std::max(scale, std::fabs(double(ref[j])));
    }
    const double err = finite ? diff / std::max(scale, 1e-30) : std::numeric_limits<double>::infinity();
    if (out.worst_position < 0 || err > out.worst_error) {
      out.worst_error = err;
      out.worst_position = pos;
    }
    if (!(err <= tolerance)) {
      std::ostringstream os;
      os << "relative logit error " << err << " > " << tolerance
         << (finite ? "" : " (non-finite logits)");
      fail(pos, os.str());
    }
    const auto [first, second] = top_two(ref);
    if ((double(first) - double(second)) / std::max(scale, 1e-30) > decisive_gap) {
      ++out.decisive_positions;
      const int64_t want = argmax(ref), have = argmax(got);
      if (want != have)
        fail(pos, "top-1 " + std::to_string(have) + ", reference " + std::to_string(want));
    }
    if (finite && cuda.last_next_token() != argmax(got))
      fail(pos, "the device argmax is " + std::to_string(cuda.last_next_token()) +
                    " but its logits peak at " + std::to_string(argmax(got)));
  }
  return out;
}

}  // namespace amk::gpu_testing
