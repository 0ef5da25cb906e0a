// A Llama-family decode loop on the ReferenceVM: one lowered Program serves every step, the
// checkpoint's weights are bound to its WEIGHT buffers by `source`, and the KV cache persists in
// the VM between steps. Prefill is one decode step per prompt token.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/ir.h"
#include "amk/reference_vm.h"
#include "amk/sampler.h"

namespace amk {

// A step that cannot run: the program does not fit the checkpoint, a token or position is out of
// range, or the VM reported a failure (its status and message are in the text).
class DecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The value of a CONST buffer no checkpoint holds, computed from the model's config: the RoPE
// table named by kRopeInvFreqSource, or zeros (kZerosSource; amk/lowering.h). Throws DecodeError for a source it
// cannot compute or a size that does not match. Every decoder binds CONST buffers with it.
Tensor computed_const_value(const Buffer& buffer, const ModelConfig& config);

// The checkpoint tensor a WEIGHT buffer binds to: `source` with the buffer's shape, or, for a
// buffer that holds a box of it (`source_box`), a rank-2 tensor the box lies inside. Throws
// CheckpointError for a missing or misshapen tensor, DecodeError for a box outside the tensor
// or a buffer without a source. `amk compile` checks a program's weights with it.
const TensorView& weight_tensor(const Buffer& buffer, const Checkpoint& checkpoint);
// The buffer's value in its own dtype and shape: the tensor, or its box. Every decoder binds
// WEIGHT buffers with it.
Tensor weight_value(const Buffer& buffer, const Checkpoint& checkpoint);

// A decode state at `position` without decoding to it: every KV_CACHE buffer of `program` with
// rows [0, position) set to values in [-1, 1) drawn from `seed` (a pure function of the seed,
// the cache's name and the element, so every backend and every lowering of one model gets the
// same values) and the rest zero.
// How a correctness check reaches late positions, and several split-KV blocks, on a big model.
std::vector<std::pair<int64_t, Tensor>> seeded_kv_state(const Program& program, int64_t position,
                                                        uint64_t seed);

// The values seeded_kv_state gives one KV cache: logical element i = (t * n_kv_heads + g) *
// head_dim + d (position t, KV head g, dim d; row-major over [max_context, n_kv_heads,
// head_dim], whatever the storage order: the lowered cache is [n_kv_heads, max_context,
// head_dim]) of the cache named `cache_name` (kv_cache_name() in amk/lowering.h). Every decoder
// reads its seeded state from here, so every backend seeks to the same values.
class SeededKvValues {
 public:
  SeededKvValues(std::string_view cache_name, uint64_t seed);
  float operator()(int64_t element) const;
  // Position t, KV head g, dim d of a cache of n_kv_heads x head_dim rows: the logical element.
  float at(int64_t t, int64_t g, int64_t d, int64_t n_kv_heads, int64_t head_dim) const {
    return (*this)((t * n_kv_heads + g) * head_dim + d);
  }

 private:
  uint64_t base_;
};

// Throws DecodeError when `logits` (the step at `position`) hold a NaN or an infinity: a token
// argmax'd from them would be garbage (NaN weights, or an overflow), so no decoder returns one.
void check_finite_logits(std::span<const float> logits, int64_t position);

// Where a lowered program keeps its sampling settings (lowered_names::kSamplingFloats /
// kSamplingInts, the SAMPLE_ARGMAX sampling form) and what a decoder writes there
// (amk/sampler.h PackedSampling). Every decoder over a lowered program uses this one lookup.
struct SamplingBuffers {
  int64_t floats = -1, ints = -1;  // buffer ids; -1: the program does not sample (the host does)
  bool present() const { return floats >= 0; }
  // Both buffers of `program`, or neither; DecodeError when it has only one.
  static SamplingBuffers find(const Program& program);
  static Tensor floats_tensor(const PackedSampling& packed);  // F32 [kFloats]
  static Tensor ints_tensor(const PackedSampling& packed);    // I32 [kInts]
};

// One decode loop over a lowered program, whatever runs it (ReferenceVM, CUDA VM). The oracle
// and the benchmark talk to this interface only.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual int64_t position() const = 0;
  virtual int64_t max_context() const = 0;
  virtual int64_t vocab_size() const = 0;
  // Runs the step at position() on `token`, then advances. Returns the logits [vocab].
  virtual std::vector<float> step(int64_t token) = 0;
  // The token the last step's program chose (its SAMPLE_ARGMAX): the argmax of its logits, or
  // the draw set_sampling() asked for.
  virtual int64_t last_next_token() const = 0;
  // The settings the next steps sample with; the step at position P draws with index
  // draw_offset + P (amk/sampler.h, PackedSampling). Until called: greedy. Throws
  // std::invalid_argument for unusable settings.
  virtual void set_sampling(const SamplingParams& params, uint64_t draw_offset);
  // Runs the step at position() on `token`, advances, and returns the token drawn from its
  // logits with those settings. A decoder whose program samples (the reference and CUDA VMs'
  // lowered programs) returns the program's token, so on a GPU no logits leave the device; the
  // default runs step() and samples on the host. Throws DecodeError for non-finite logits.
  virtual int64_t step_sample(int64_t token);
  // Runs the step at position() on `token` and advances; its result is not wanted (a prompt
  // token before the last).
  virtual void feed(int64_t token) { step(token); }
  // Back to position 0 with an empty (zero) KV cache.
  virtual void reset() = 0;
  // To `position` (< max_context) with seeded_kv_state(program, position, seed) as the cache.
  virtual void seek(int64_t position, uint64_t seed) = 0;
  // Greedy: feeds `prompt` (one step per token), then generates `n` tokens, each fed back.
  // Throws DecodeError when a step's logits are not finite (check_finite_logits).
  virtual std::vector<int64_t> generate(std::span<const int64_t> prompt, int64_t n);

 protected:
  SamplingParams sampling_;
  uint64_t draw_offset_ = 0;
};

class ReferenceDecoder final : public Decoder {
 public:
  // `program` must be a lower() output for this checkpoint's config. Binds every WEIGHT buffer to
  // the tensor named by its source (shape checked, converted to the buffer's dtype), and every
  // CONST buffer to the table its source names, computed from the config (kRopeInvFreqSource in
  // amk/lowering.h). Throws DecodeError, or CheckpointError for a missing or misshapen tensor.
  ReferenceDecoder(const Checkpoint& checkpoint, Program program);

  int64_t position() const override { return position_; }
  int64_t max_context() const override { return max_context_; }
  int64_t vocab_size() const override { return vocab_; }
  std::vector<float> step(int64_t token) override;
  int64_t last_next_token() const override;
  void reset() override;
  void seek(int64_t position, uint64_t seed) override;
  void set_sampling(const SamplingParams& params, uint64_t draw_offset) override;
  int64_t step_sample(int64_t token) override;

  const ReferenceVM& vm() const { return vm_; }

  // The ReferenceVM's watchdog per step. An 8B model's step takes minutes on the CPU, so a
  // caller that runs big models (amk bench) raises it.
  double step_timeout_s = VmOptions{}.timeout_s;

 private:
  void bind_computed_const(const Buffer& b, const ModelConfig& config);

  ReferenceVM vm_;
  void run_step(int64_t token);

  int64_t token_id_ = -1, pos_id_ = -1, logits_id_ = -1, next_id_ = -1;
  SamplingBuffers sampling_buffers_;
  int64_t position_ = 0, max_context_ = 0, vocab_ = 0;
  bool stepped_ = false;
};

}  // namespace amk
