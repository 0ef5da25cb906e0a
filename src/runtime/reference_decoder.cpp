#include <fmt/format.h>

#include <cmath>

#include "amk/decoder.h"
#include "amk/hash.h"
#include "amk/lowering.h"
#include "amk/rope.h"
#include "amk/tensor.h"

namespace amk {

namespace {

int64_t require_buffer(const ReferenceVM& vm, std::string_view name) {
  const Buffer* b = vm.find_buffer(name);
  if (b == nullptr) throw DecodeError(fmt::format("the program has no '{}' buffer", name));
  return b->id;
}

}  // namespace

Tensor computed_const_value(const Buffer& b, const ModelConfig& config) {
  if (b.source == kZerosSource) return Tensor::zeros(b.dtype, b.shape);
  if (b.source != kRopeInvFreqSource)
    throw DecodeError(fmt::format("CONST buffer '{}' has source '{}', which the decoder cannot "
                                  "compute (known: '{}', '{}')",
                                  b.name, b.source.value_or(""), kRopeInvFreqSource,
                                  kZerosSource));
  const std::vector<float> table = rope_inv_freq_f32(config);
  if (b.numel() != static_cast<int64_t>(table.size()))
    throw DecodeError(fmt::format("CONST buffer '{}' holds {} elements; the config's RoPE table "
                                  "has head_dim / 2 = {}",
                                  b.name, b.numel(), table.size()));
  return Tensor::from_floats(b.dtype, b.shape, table);
}

void ReferenceDecoder::bind_computed_const(const Buffer& b, const ModelConfig& config) {
  vm_.set_buffer(b.id, computed_const_value(b, config));
}

ReferenceDecoder::ReferenceDecoder(const Checkpoint& checkpoint, Program program)
    : vm_(std::move(program)) {
  if (!vm_.accepted())
    throw DecodeError("the program was rejected by validate()\n" + vm_.validation().report());
  token_id_ = require_buffer(vm_, lowered_names::kToken);
  pos_id_ = require_buffer(vm_, lowered_names::kPos);
  logits_id_ = require_buffer(vm_, lowered_names::kLogits);
  next_id_ = require_buffer(vm_, lowered_names::kNextToken);
  sampling_buffers_ = SamplingBuffers::find(vm_.program());
  vocab_ = vm_.program().buffers[size_t(logits_id_)].shape.back();
  const Buffer* k0 = vm_.find_buffer(kv_cache_name(0, 'k'));
  if (k0 == nullptr) throw DecodeError("the program has no KV cache");
  max_context_ = kv_cache_positions(*k0);

  for (const Buffer& b : vm_.program().buffers) {
    if (b.kind == BufferKind::CONST) {
      bind_computed_const(b, checkpoint.config());
      continue;
    }
    if (b.kind == BufferKind::WEIGHT) vm_.set_buffer(b.id, weight_value(b, checkpoint));
  }
  reset();
  set_sampling(SamplingParams{}, 0);
}

// Keyed by the cache's name, not its id: programs of one model lowered differently (fused,
// split) name their caches alike, so one seed gives them the same state.
SeededKvValues::SeededKvValues(std::string_view cache_name, uint64_t seed)
    : base_(splitmix64(seed ^ splitmix64(fnv1a64(cache_name)))) {}

// splitmix64 of (seed, cache, element): no generator state, so no order dependence.
float SeededKvValues::operator()(int64_t element) const {
  return float(double(splitmix64(base_ + uint64_t(element)) >> 11) * 0x1.0p-52 - 1.0);
}

std::vector<std::pair<int64_t, Tensor>> seeded_kv_state(const Program& program, int64_t position,
                                                        uint64_t seed) {
  std::vector<std::pair<int64_t, Tensor>> state;
  for (const Buffer& b : program.buffers) {
    const int64_t max_seq = kv_cache_positions(b);
    if (b.kind != BufferKind::KV_CACHE || max_seq < 1) continue;
    if (position < 0 || position > max_seq)
      throw DecodeError(fmt::format("seek to position {}: KV cache '{}' has {} rows", position,
                                    b.name, max_seq));
    // Keyed by the logical element (t, g, d) of the [position][KV head][dim] view, so the state
    // does not depend on the storage order (the fast CPU decoder seeds the same values).
    const int64_t n_kv = b.shape[0], head_dim = b.shape[2];
    std::vector<float> values(size_t(b.numel()), 0.0f);
    const SeededKvValues seeded(b.name, seed);
    for (int64_t t = 0; t < position; ++t)
      for (int64_t g = 0; g < n_kv; ++g)
        for (int64_t d = 0; d < head_dim; ++d)
          values[size_t(kv_cache_offset(max_seq, head_dim, g, t, d))] =
              seeded.at(t, g, d, n_kv, head_dim);
    state.emplace_back(b.id, Tensor::from_floats(b.dtype, b.shape, values));
  }
  return state;
}

void ReferenceDecoder::seek(int64_t position, uint64_t seed) {
  if (position < 0 || position >= max_context_)
    throw DecodeError(fmt::format("seek to position {}: outside [0, {})", position, max_context_));
  for (auto& [id, t] : seeded_kv_state(vm_.program(), position, seed))
    vm_.set_buffer(id, std::move(t));
  position_ = position;
  stepped_ = false;
}

void ReferenceDecoder::reset() {
  for (const Buffer& b : vm_.program().buffers)
    if (b.kind == BufferKind::KV_CACHE) vm_.set_buffer(b.id, Tensor::zeros(b.dtype, b.shape));
  position_ = 0;
  stepped_ = false;
}

SamplingBuffers SamplingBuffers::find(const Program& program) {
  SamplingBuffers found;
  for (const Buffer& b : program.buffers) {
    if (b.name == lowered_names::kSamplingFloats) found.floats = b.id;
    if (b.name == lowered_names::kSamplingInts) found.ints = b.id;
  }
  if ((found.floats < 0) != (found.ints < 0))
    throw DecodeError("the program has one of the two sampling settings buffers, not both");
  return found;
}

Tensor SamplingBuffers::floats_tensor(const PackedSampling& packed) {
  return Tensor::from_floats(DType::F32, {PackedSampling::kFloats}, packed.floats);
}

Tensor SamplingBuffers::ints_tensor(const PackedSampling& packed) {
  const std::vector<int64_t> ints(packed.ints.begin(), packed.ints.end());
  return Tensor::from_ints(DType::I32, {PackedSampling::kInts}, ints);
}

void ReferenceDecoder::set_sampling(const SamplingParams& params, uint64_t draw_offset) {
  Decoder::set_sampling(params, draw_offset);
  if (!sampling_buffers_.present()) return;
  const PackedSampling packed = pack_sampling(params, draw_offset);
  vm_.set_buffer(sampling_buffers_.floats, SamplingBuffers::floats_tensor(packed));
  vm_.set_buffer(sampling_buffers_.ints, SamplingBuffers::ints_tensor(packed));
}

int64_t ReferenceDecoder::step_sample(int64_t token) {
  if (!sampling_buffers_.present()) return Decoder::step_sample(token);
  run_step(token);
  return last_next_token();
}

std::vector<float> ReferenceDecoder::step(int64_t token) {
  run_step(token);
  return vm_.buffer(logits_id_).to_floats();
}

void ReferenceDecoder::run_step(int64_t token) {
  if (token < 0 || token >= vocab_)
    throw DecodeError(fmt::format("token {} is outside the vocabulary [0, {})", token, vocab_));
  if (position_ >= max_context_)
    throw DecodeError(
        fmt::format("position {} is past the program's max_context {}", position_, max_context_));
  const int64_t tok[] = {token}, pos[] = {position_};
  vm_.set_buffer(token_id_, Tensor::from_ints(DType::I32, {1}, tok));
  vm_.set_buffer(pos_id_, Tensor::from_ints(DType::I32, {1}, pos));
  VmOptions options;
  options.step_position = position_;  // the same position the "pos" buffer holds
  options.timeout_s = step_timeout_s;
  const VmRunResult r = vm_.run(options);
  if (!r.ok())
    throw DecodeError(
        fmt::format("step at position {} failed: {}: {}", position_, name_of(r.status), r.message));
  ++position_;
  stepped_ = true;
}

int64_t ReferenceDecoder::last_next_token() const {
  if (!stepped_) throw DecodeError("no step has run yet");
  return vm_.buffer(next_id_).get_int(0);
}

void check_finite_logits(std::span<const float> logits, int64_t position) {
  int64_t bad = 0, first = -1;
  for (size_t j = 0; j < logits.size(); ++j)
    if (!std::isfinite(logits[j])) {
      if (bad++ == 0) first = int64_t(j);
    }
  if (bad > 0)
    throw DecodeError(fmt::format(
        "the logits at position {} are not finite ({} of {} are NaN or infinite, the first at "
        "token {}, value {}): no token can be chosen from them; the checkpoint's weights or "
        "the computation produced non-finite values",
        position, bad, logits.size(), first, logits[size_t(first)]));
}

void Decoder::set_sampling(const SamplingParams& params, uint64_t draw_offset) {
  if (const std::string problem = sampling_params_problem(params); !problem.empty())
    throw std::invalid_argument(problem);
  sampling_ = params;
  draw_offset_ = draw_offset;
}

int64_t Decoder::step_sample(int64_t token) {
  const int64_t at = position();
  const std::vector<float> logits = step(token);
  check_finite_logits(logits, at);
  return sample_token(logits, sampling_, draw_offset_ + uint64_t(at));
}

std::vector<int64_t> Decoder::generate(std::span<const int64_t> prompt, int64_t n) {
  if (prompt.empty()) throw DecodeError("generate needs at least one prompt token");
  set_sampling(SamplingParams{}, 0);  // greedy
  std::vector<float> logits;
  for (int64_t t : prompt) logits = step(t);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    check_finite_logits(logits, position() - 1);
    out.push_back(last_next_token());
    if (i + 1 < n) logits = step(out.back());
  }
  return out;
}

}  // namespace amk
