// SAMPLE_ARGMAX: the index of the largest logit of each row of the last dimension.
//
// Ties go to the first index and NaN counts as larger than every number (so the first NaN wins),
// exactly as torch.argmax, which reference.py calls: a NaN in the logits then shows in the token
// instead of being silently skipped.
//
// Split over SMs (docs/OPCODES.md): a PARTIAL task (params n_off, N_tile, m_off) takes logits
// [n_off, n_off + N_tile) of a single row and writes its best (value, index) as row m_off of an
// F32 [P, 2] buffer; a REDUCE task (flags bit 0) reads such a buffer and writes the best pair's
// index. Best is a total order (NaN above every number, then the larger value, then the smaller
// index), so partials + reduce give exactly the whole-row argmax.
//
// Sampling (flags bit 1, op_flags.h sample_flags::kSample): the task's inputs end with the logits
// row and the sampling settings (amk/sampler.h PackedSampling); the token is sample_token() of
// the logits with those settings at draw index draw_offset + the step's position, so a lowered
// program samples on the device with the host's settings and no logits leave it. Temperature 0
// is the greedy token. Logits holding a NaN or +inf, or only -inf, fail the step (no token is
// drawn from garbage). With bit 0 too, input 0 is still the pairs buffer (read, unused here:
// the reference scans the row itself).
#include <cmath>
#include <string>
#include <vector>

#include "amk/op_flags.h"
#include "amk/sampler.h"
#include "vm/reference/ops/numeric.h"
#include "vm/reference/ops/ops.h"

namespace amk::ref {

namespace {

std::string num(int64_t v) { return std::to_string(v); }

// (v, i) beats (best_v, best_i): NaN first, then larger, then the smaller index.
bool beats(double v, int64_t i, double best_v, int64_t best_i) {
  const bool v_nan = std::isnan(v), best_nan = std::isnan(best_v);
  if (v_nan || best_nan) return v_nan && (!best_nan || i < best_i);
  return v > best_v || (v == best_v && i < best_i);
}

constexpr int64_t kExactIndexLimit = int64_t{1} << 24;  // indices travel as F32 in the pairs

void argmax_partial(const OpContext& c) {
  const Tensor& logits = c.input(0);
  require_float(c, logits, "input 0 (logits)");
  const int64_t V = logits.numel();
  if (V < 1 || V > kExactIndexLimit || last_dim(c, logits, "input 0 (logits)") != V)
    c.fail("a partial argmax reads one row of at most 2^24 logits; input 0 has shape " +
           shape_str(logits.shape));
  const int64_t off = c.int_param("n_off"), len = c.int_param("N_tile"), slot = c.int_param("m_off");
  if (off < 0 || len < 1 || off + len > V)
    c.fail("range n_off " + num(off) + ", N_tile " + num(len) + " must lie in the " + num(V) +
           " logits");
  Tensor& out = c.output(0);
  require_float(c, out, "output 0");
  if (last_dim(c, out, "output 0") != 2 || slot < 0 || 2 * (slot + 1) > out.numel())
    c.fail("output 0 must be [P, 2] (value, index) pairs with row m_off " + num(slot) +
           "; it has shape " + shape_str(out.shape));
  int64_t arg = off;
  double max = load(logits, off);
  for (int64_t j = off + 1; j < off + len; ++j) {
    const double v = load(logits, j);
    if (beats(v, j, max, arg)) {
      max = v;
      arg = j;
    }
  }
  store(out, 2 * slot, max);
  store(out, 2 * slot + 1, double(arg));
}

void argmax_reduce(const OpContext& c) {
  const Tensor& pairs = c.input(0);
  require_float(c, pairs, "input 0 (pairs)");
  if (last_dim(c, pairs, "input 0 (pairs)") != 2 || pairs.numel() < 2)
    c.fail("input 0 (pairs) must be [P, 2] (value, index) pairs, got shape " +
           shape_str(pairs.shape));
  Tensor& out = c.output(0);
  if (!is_integer_dtype(out.dtype))
    c.fail("output 0 must have an integer dtype, got " + std::string(name_of(out.dtype)));
  require_numel(c, out, "output 0", 1, "one token");
  double best_v = 0;
  int64_t best_i = -1;
  for (int64_t p = 0; p < pairs.numel() / 2; ++p) {
    const double v = load(pairs, 2 * p), x = load(pairs, 2 * p + 1);
    if (!(x >= 0 && x < double(kExactIndexLimit) && x == std::floor(x)))
      c.fail("pair " + num(p) + " has index " + std::to_string(x) + ", not a logit index");
    const auto i = int64_t(x);
    if (best_i < 0 || beats(v, i, best_v, best_i)) {
      best_v = v;
      best_i = i;
    }
  }
  store(out, 0, double(best_i));
}

void sample(const OpContext& c, bool reduce) {
  const size_t first = reduce ? 1 : 0;
  if (c.num_inputs() != first + 3)
    c.fail("sampling (flags bit 1) takes " + std::string(reduce ? "the pairs, " : "") +
           "the logits row, the sampling floats and ints: " + num(int64_t(first + 3)) +
           " inputs, got " + num(int64_t(c.num_inputs())));
  const Tensor& logits = c.input(first);
  require_float(c, logits, "the logits");
  const int64_t V = logits.numel();
  if (V < 1 || last_dim(c, logits, "the logits") != V)
    c.fail("sampling reads one row of logits; the logits have shape " + shape_str(logits.shape));
  const Tensor& f = c.input(first + 1);
  const Tensor& i = c.input(first + 2);
  if (f.dtype != DType::F32 || f.numel() < PackedSampling::kFloats)
    c.fail("the sampling floats must be F32 with " + num(PackedSampling::kFloats) + " elements");
  if (i.dtype != DType::I32 || i.numel() < PackedSampling::kInts)
    c.fail("the sampling ints must be I32 with " + num(PackedSampling::kInts) + " elements");
  if (reduce) {
    const Tensor& pairs = c.input(0);
    require_float(c, pairs, "input 0 (pairs)");
    if (last_dim(c, pairs, "input 0 (pairs)") != 2)
      c.fail("input 0 (pairs) must be [P, 2] (value, index) pairs, got shape " + shape_str(pairs.shape));
  }
  Tensor& out = c.output(0);
  if (!is_integer_dtype(out.dtype))
    c.fail("output 0 must have an integer dtype, got " + std::string(name_of(out.dtype)));
  require_numel(c, out, "output 0", 1, "one token");

  const std::vector<double> wide = load_all(logits);
  std::vector<float> row(wide.begin(), wide.end());
  bool any_finite = false;
  for (size_t j = 0; j < row.size(); ++j) {
    if (std::isnan(row[j]) || row[j] == INFINITY)
      c.fail("logit " + num(int64_t(j)) + " is " + std::to_string(row[j]) + ": no token is drawn from non-finite logits");
    any_finite = any_finite || std::isfinite(row[j]);
  }
  if (!any_finite) c.fail("every logit is -inf: no token can be drawn");
  // static_cast: clang reads `fv(size_t(X))` as a function declaration (the fuzz build, clang 14).
  std::vector<float> fv(static_cast<size_t>(PackedSampling::kFloats));
  std::vector<int32_t> iv(static_cast<size_t>(PackedSampling::kInts));
  for (size_t j = 0; j < fv.size(); ++j) fv[j] = float(load(f, int64_t(j)));
  for (size_t j = 0; j < iv.size(); ++j) iv[j] = int32_t(load(i, int64_t(j)));
  uint64_t draw_offset = 0;
  SamplingParams params = unpack_sampling(fv, iv, &draw_offset);
  if (params.temperature == 0.0) params = SamplingParams{};  // greedy: the rest is not read
  if (const std::string problem = sampling_params_problem(params); !problem.empty())
    c.fail("sampling settings: " + problem);
  const uint64_t draw =
      params.temperature == 0.0
          ? 0
          : draw_offset + uint64_t(c.step_position("sampling at a temperature above 0 (the draw index)"));
  store(out, 0, double(sample_token(row, params, draw)));
}

}  // namespace

void op_sample_argmax(const OpContext& c) {
  c.check_registry();
  const int64_t flags = c.int_param_or("flags", 0);
  if ((flags & ~(sample_flags::kReduce | sample_flags::kSample)) != 0)
    c.fail("param flags " + num(flags) +
           " has unknown bits (bit 0: reduce (value, index) pairs, bit 1: sample)");
  const bool ranged = c.has_param("n_off") || c.has_param("N_tile") || c.has_param("m_off");
  if ((flags & sample_flags::kSample) != 0) {
    if (ranged) c.fail("sampling (flags bit 1) takes no range (n_off, N_tile, m_off)");
    return sample(c, (flags & sample_flags::kReduce) != 0);
  }
  if (c.num_inputs() != 1) c.fail("without flags bit 1 SAMPLE_ARGMAX takes one input, got " + num(int64_t(c.num_inputs())));
  if ((flags & 1) != 0) {
    if (ranged) c.fail("a reduce (flags bit 0) takes no range (n_off, N_tile, m_off)");
    return argmax_reduce(c);
  }
  if (ranged) {
    if (!c.has_param("n_off") || !c.has_param("N_tile") || !c.has_param("m_off"))
      c.fail("a partial argmax needs all of n_off, N_tile and m_off");
    return argmax_partial(c);
  }
  const Tensor& logits = c.input(0);
  require_float(c, logits, "input 0 (logits)");
  const int64_t V = last_dim(c, logits, "input 0 (logits)");
  if (V < 1) c.fail("input 0 (logits) has an empty last dimension, shape " + shape_str(logits.shape));
  const int64_t rows = logits.numel() / V;
  Tensor& out = c.output(0);
  if (!is_integer_dtype(out.dtype))
    c.fail("output 0 must have an integer dtype, got " + std::string(name_of(out.dtype)));
  require_numel(c, out, "output 0", rows, "one token per row of logits");

  std::vector<double> best(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t arg = 0;
    double max = load(logits, r * V);
    for (int64_t j = 1; j < V && !std::isnan(max); ++j) {
      const double v = load(logits, r * V + j);
      if (std::isnan(v) || v > max) {
        max = v;
        arg = j;
      }
    }
    best[size_t(r)] = double(arg);
  }
  store_all(out, best);
}

}  // namespace amk::ref
