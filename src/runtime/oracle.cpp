#include "amk/oracle.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "amk/decoder.h"
#include "amk/safetensors.h"

namespace amk {

namespace {

const TensorView& need(const SafetensorsFile& f, std::string_view name, size_t rank) {
  const TensorView* t = f.find(name);
  if (t == nullptr)
    throw OracleInputError(fmt::format("{}: missing tensor '{}'", f.path().string(), name));
  if (t->shape.size() != rank)
    throw OracleInputError(
        fmt::format("{}: tensor '{}' must have rank {}", f.path().string(), name, rank));
  return *t;
}

}  // namespace

ExpectedOutputs load_expected(const std::filesystem::path& path) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  ExpectedOutputs e;
  e.prompt_ids = need(f, "prompt_ids", 1).to_ints();
  e.sequence_ids = need(f, "sequence_ids", 1).to_ints();
  const TensorView& logits = need(f, "logits", 2);
  const auto S = int64_t(e.sequence_ids.size());
  if (e.prompt_ids.empty() || e.prompt_ids.size() > e.sequence_ids.size() ||
      !std::equal(e.prompt_ids.begin(), e.prompt_ids.end(), e.sequence_ids.begin()))
    throw OracleInputError(
        fmt::format("{}: sequence_ids must start with the (non-empty) prompt_ids", path.string()));
  if (logits.shape[0] != S || logits.shape[1] < 1)
    throw OracleInputError(fmt::format("{}: logits has shape [{}, {}], expected [{}, vocab]",
                                       path.string(), logits.shape[0], logits.shape[1], S));
  e.vocab = logits.shape[1];
  e.logits = logits.to_floats();
  return e;
}

OracleReport run_oracle(const Checkpoint& checkpoint, const Program& program,
                        const ExpectedOutputs& e, double tolerance) {
  ReferenceDecoder dec(checkpoint, program);
  return run_oracle(dec, e, tolerance);
}

OracleReport run_oracle(Decoder& dec, const ExpectedOutputs& e, double tolerance) {
  dec.reset();
  if (dec.vocab_size() != e.vocab)
    throw OracleInputError(
        fmt::format("expected logits have vocab {}, the model {}", e.vocab, dec.vocab_size()));
  const auto S = int64_t(e.sequence_ids.size());
  if (S > dec.max_context())
    throw OracleInputError(fmt::format(
        "the sequence has {} tokens, the program's max_context is {}", S, dec.max_context()));
  OracleReport r;
  for (int64_t i = 0; i < S; ++i) {
    const std::vector<float> ours = dec.step(e.sequence_ids[size_t(i)]);
    const float* theirs = &e.logits[size_t(i * e.vocab)];
    double diff = 0, scale = 0;
    bool finite = true;
    for (int64_t j = 0; j < e.vocab; ++j) {
      // std::max drops a NaN operand, so non-finite values are counted, not folded in.
      if (!std::isfinite(ours[size_t(j)])) {
        ++r.nonfinite_ours;
        finite = false;
      }
      if (!std::isfinite(theirs[j])) {
        ++r.nonfinite_expected;
        finite = false;
      }
      if (!finite) continue;
      diff = std::max(diff, std::fabs(double(ours[size_t(j)]) - double(theirs[j])));
      scale = std::max(scale, std::fabs(double(theirs[j])));
    }
    // NaN must fail, so compare with !(<=) rather than >.
    const double err = !finite ? INFINITY : scale > 0 ? diff / scale : diff;
    r.errors.push_back(std::isnan(err) ? INFINITY : err);
    if (r.worst_position < 0 || !(r.errors.back() <= r.worst_error)) {
      r.worst_position = i;
      r.worst_error = r.errors.back();
    }
  }
  r.logits_ok = r.worst_error <= tolerance && r.nonfinite_expected == 0 && r.nonfinite_ours == 0;

  const auto P = int64_t(e.prompt_ids.size());
  r.expected_continuation.assign(e.sequence_ids.begin() + P, e.sequence_ids.end());
  if (r.nonfinite_ours > 0) {  // generate() would refuse them; the report says why instead
    r.continuation_ok = false;
    return r;
  }
  dec.reset();
  r.continuation = dec.generate(e.prompt_ids, S - P);
  for (size_t i = 0; i < r.continuation.size(); ++i)
    if (r.continuation[i] != r.expected_continuation[i]) {
      r.first_divergence = int64_t(i);
      break;
    }
  r.continuation_ok = r.first_divergence < 0;
  return r;
}

}  // namespace amk
