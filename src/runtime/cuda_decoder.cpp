// CudaDecoder: the ReferenceDecoder's twin on the CUDA VM (amk/cuda_vm.h). Same bindings (weights
// by source, the computed RoPE table, zeroed KV caches), same step contract; generation can also
// run many greedy steps inside one launch, the token fed back on the device.
//
// Compiled in both builds (with and without nvcc), so it also holds name_of(CudaStatus).
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "amk/cuda_vm.h"
#include "amk/lowering.h"
#include "amk/rope.h"
#include "amk/tensor.h"

namespace amk {

std::string_view name_of(CudaStatus status) {
  switch (status) {
    case CudaStatus::Ok:
      return "OK";
    case CudaStatus::Rejected:
      return "REJECTED";
    case CudaStatus::Timeout:
      return "TIMEOUT";
    case CudaStatus::OpError:
      return "OP_ERROR";
    case CudaStatus::LaunchError:
      return "LAUNCH_ERROR";
  }
  return "UNKNOWN";
}

namespace {

int64_t require_buffer(const CudaVM& vm, std::string_view name) {
  const Buffer* b = vm.find_buffer(name);
  if (b == nullptr) throw DecodeError(fmt::format("the program has no '{}' buffer", name));
  return b->id;
}

Tensor scalar_i32(int64_t v) {
  const int64_t values[] = {v};
  return Tensor::from_ints(DType::I32, {1}, values);
}

}  // namespace

CudaDecoder::CudaDecoder(const Checkpoint& checkpoint, Program program,
                         const CudaVmOptions& options)
    : vm_(std::make_unique<CudaVM>(std::move(program), options)) {
  token_id_ = require_buffer(*vm_, lowered_names::kToken);
  pos_id_ = require_buffer(*vm_, lowered_names::kPos);
  logits_id_ = require_buffer(*vm_, lowered_names::kLogits);
  next_id_ = require_buffer(*vm_, lowered_names::kNextToken);
  sampling_buffers_ = SamplingBuffers::find(vm_->program());
  const Program& p = vm_->program();
  vocab_ = p.buffers[size_t(logits_id_)].shape.back();
  const Buffer* k0 = vm_->find_buffer(kv_cache_name(0, 'k'));
  if (k0 == nullptr) throw DecodeError("the program has no KV cache");
  max_context_ = kv_cache_positions(*k0);

  for (const Buffer& b : p.buffers) {
    if (b.kind == BufferKind::CONST) {
      vm_->set_buffer(b.id, computed_const_value(b, checkpoint.config()));
      continue;
    }
    if (b.kind == BufferKind::WEIGHT) vm_->set_buffer(b.id, weight_value(b, checkpoint));
  }
  reset();
  // Greedy until set_sampling(): written once here, so the device never holds unset settings.
  if (sampling_buffers_.present()) upload_sampling(pack_sampling(SamplingParams{}, 0), /*all=*/true);
}

void CudaDecoder::upload_sampling(const PackedSampling& packed, bool all) {
  if (all || packed.floats != uploaded_.floats)
    vm_->set_buffer(sampling_buffers_.floats, SamplingBuffers::floats_tensor(packed));
  if (all || packed.ints != uploaded_.ints)
    vm_->set_buffer(sampling_buffers_.ints, SamplingBuffers::ints_tensor(packed));
  uploaded_ = packed;
}

void CudaDecoder::set_sampling(const SamplingParams& params, uint64_t draw_offset) {
  Decoder::set_sampling(params, draw_offset);
  if (sampling_buffers_.present()) upload_sampling(pack_sampling(params, draw_offset), /*all=*/false);
}

int64_t CudaDecoder::step_sample(int64_t token) {
  if (!sampling_buffers_.present()) return Decoder::step_sample(token);
  launch_step(token);
  return last_token_;
}

void CudaDecoder::seek(int64_t position, uint64_t seed) {
  if (position < 0 || position >= max_context_)
    throw DecodeError(fmt::format("seek to position {}: outside [0, {})", position, max_context_));
  for (const auto& [id, t] : seeded_kv_state(vm_->program(), position, seed))
    vm_->set_buffer(id, t);
  position_ = position;
  last_token_ = -1;
}

void CudaDecoder::reset() {
  vm_->zero_kv_cache();
  position_ = 0;
  last_token_ = -1;
}

int64_t CudaDecoder::last_next_token() const {
  if (last_token_ < 0) throw DecodeError("no step has run yet");
  return last_token_;
}

namespace {

void check_token(int64_t token, int64_t vocab) {
  if (token < 0 || token >= vocab)
    throw DecodeError(fmt::format("token {} is outside the vocabulary [0, {})", token, vocab));
}

}  // namespace

std::vector<float> CudaDecoder::step(int64_t token) {
  launch_step(token);
  return vm_->read_buffer(logits_id_).to_floats();
}

void CudaDecoder::launch_step(int64_t token) {
  check_token(token, vocab_);
  if (position_ >= max_context_)
    throw DecodeError(
        fmt::format("position {} is past the program's max_context {}", position_, max_context_));
  vm_->set_buffer(token_id_, scalar_i32(token));
  vm_->set_buffer(pos_id_, scalar_i32(position_));
  // One step needs no sink: next_token is read back like the logits, not from token_history.
  const CudaRunResult r = vm_->run(position_, 1);
  if (!r.ok())
    throw DecodeError(
        fmt::format("step at position {} failed: {}: {}", position_, name_of(r.status), r.message));
  ++position_;
  last_token_ = vm_->read_buffer(next_id_).get_int(0);
}

std::vector<int32_t> CudaDecoder::generate_on_device(int64_t first_token, int n) {
  check_token(first_token, vocab_);
  if (n < 1) throw DecodeError(fmt::format("a launch runs at least one step, not {}", n));
  if (position_ + n > max_context_)
    throw DecodeError(fmt::format("steps {}..{} pass the program's max_context {}", position_,
                                  position_ + n - 1, max_context_));
  // The token buffer shares its memory with next_token on the device, so after this launch's
  // first step the argmax of each step is the next step's token without a host round trip.
  vm_->set_buffer(token_id_, scalar_i32(first_token));
  vm_->set_buffer(pos_id_, scalar_i32(position_));
  std::vector<int32_t> tokens;
  const CudaRunResult r = vm_->run(position_, n, &tokens);
  if (!r.ok())
    throw DecodeError(fmt::format("{} at position {} failed: {}: {}",
                                  n == 1 ? std::string("step") : fmt::format("{} steps", n),
                                  position_, name_of(r.status), r.message));
  if (tokens.size() != size_t(n))
    throw DecodeError(fmt::format("the CUDA VM returned {} tokens for {} steps", tokens.size(), n));
  position_ += n;
  last_token_ = tokens.back();
  return tokens;
}

std::vector<int64_t> CudaDecoder::generate(std::span<const int64_t> prompt, int64_t n) {
  if (prompt.empty()) throw DecodeError("generate needs at least one prompt token");
  set_sampling(SamplingParams{}, 0);  // greedy
  // The prompt one launch per token (its tokens are given, not generated), then the greedy
  // continuation in launches of up to tokens_per_launch steps: the same steps, in the same order,
  // as Decoder::generate.
  // The logits of each launch's last step are checked (check_finite_logits): a NaN in the
  // weights or the KV cache reaches every later step's logits.
  const auto check_last_logits = [&] {
    check_finite_logits(vm_->read_buffer(logits_id_).to_floats(), position_ - 1);
  };
  for (int64_t t : prompt) generate_on_device(t, 1);
  std::vector<int64_t> out;
  if (n <= 0) return out;
  check_last_logits();
  out.push_back(last_next_token());
  const int per_launch = std::max(tokens_per_launch, 1);
  while (int64_t(out.size()) < n) {
    const int k = int(std::min<int64_t>(per_launch, n - int64_t(out.size())));
    for (int32_t t : generate_on_device(out.back(), k)) out.push_back(t);
    check_last_logits();
  }
  return out;
}

}  // namespace amk
