// Decoding on the CPU, fast: FastCpuDecoder runs a Llama-family model straight from the
// checkpoint and its config, without the IR, on every core. The ReferenceDecoder
// (amk/decoder.h) stays the oracle: it runs the lowered program op by op in double, slowly and
// obviously right; this one is checked against it and against transformers' logits.
//
// What makes it fast (docs/CPU_DECODING.md):
// - weights prepared once at construction into contiguous row-major matrices (q/k/v stacked per
//   layer, gate/up interleaved row by row), so a step streams each weight byte exactly once and
//   converts nothing; bf16 checkpoints stay bf16 (exact, half the bytes), the rest is f32
//   (CpuWeights);
// - GEMVs whose rows are split between threads of a small spin-then-sleep pool (one fork per
//   GEMV, a few microseconds), written as plain lane loops that GCC vectorises for any x86-64
//   and cloned for AVX2 + FMA;
// - a KV cache laid out [layer][kv_head][position][head_dim], so one head's keys are one
//   contiguous run.
// Everything but the GEMVs' and attention's sums is computed as the reference computes it
// (norms and RoPE rotations in double, RoPE angles from the float32 tables of amk/rope.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/decoder.h"

namespace amk {

// AsStored: a bf16 matrix stays bf16 (exact: widened in registers, half the bytes per token),
// f32 and f16 ones become f32 (exact). F32: every matrix f32. BF16: every matrix rounded to bf16
// (what `--weights bf16` asks of an f32 checkpoint; the reference VM rounds the same way).
enum class CpuWeights { AsStored, F32, BF16 };

struct CpuDecoderOptions {
  // Threads that share each step, the caller's included; 0 means one per hardware thread.
  int threads = 0;
  // How the weight matrices are stored (norm weights and biases are always f32).
  CpuWeights weights = CpuWeights::AsStored;
  // Show weight preparation as "amk: preparing weights for the CPU 12/30" on stderr, redrawn in
  // place, when stderr is a terminal (never in a pipe).
  bool show_progress = true;
};

class FastCpuDecoder final : public Decoder {
 public:
  // A context of `max_context` positions (the KV cache is allocated for it; >= 1). Reads every
  // weight the config implies (CheckpointError for a missing or misshapen one) and refuses, with
  // UnsupportedModelError, a context some layer would attend to through a shorter sliding
  // window (check_max_context in amk/model_config.h).
  FastCpuDecoder(const Checkpoint& checkpoint, int64_t max_context,
                 const CpuDecoderOptions& options = {});
  ~FastCpuDecoder() override;

  int64_t position() const override { return position_; }
  int64_t max_context() const override { return max_context_; }
  int64_t vocab_size() const override;
  std::vector<float> step(int64_t token) override;
  int64_t last_next_token() const override;
  void reset() override;
  // The cache holds exactly seeded_kv_state()'s values for the lowered program of this model
  // (SeededKvValues, keyed by kv_cache_name()), so a late position checks against the
  // ReferenceDecoder seeked the same way.
  void seek(int64_t position, uint64_t seed) override;

  int threads() const;
  // The weight bytes one step streams (every matrix once; the embedding row aside).
  int64_t weight_bytes_per_token() const;

 private:
  struct Model;
  std::unique_ptr<Model> model_;
  int64_t position_ = 0, max_context_ = 0;
  int64_t next_token_ = -1;
};

// Which CPU decoder: Fast (FastCpuDecoder, the default of `amk run/oracle --device cpu`) or
// Reference (ReferenceDecoder over the lowered program: `--device cpu-ref`).
enum class CpuDecoderKind { Fast, Reference };

// The CPU decoder of `checkpoint` for a context of `max_context` positions, what every command
// that decodes on the CPU builds. Reference lowers the model with its default schedule for the
// h100 target (the same program `amk run --device cpu-ref` runs), WEIGHT buffers in the
// checkpoint's dtype. Throws what the constructors and lower() throw.
std::unique_ptr<Decoder> make_cpu_decoder(const Checkpoint& checkpoint, int64_t max_context,
                                          CpuDecoderKind kind = CpuDecoderKind::Fast,
                                          const CpuDecoderOptions& options = {});

}  // namespace amk
