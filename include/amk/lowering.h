// Lowering: a Llama-family model + a ScheduleConfig + a GpuTarget -> the validated decode-step
// Program (IR_SPEC §5). One Program serves every token up to max_context: the position is
// runtime state (docs/RUNTIME_POSITION.md), never a param baked per token. docs/LOWERING.md
// describes the task graph and what every knob does to it.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "amk/ir.h"
#include "amk/model_config.h"

namespace amk {

// A ScheduleConfig or max_context the lowering cannot realise (unknown tiling key, smem over the
// target's opt-in, ...), or a model feature it does not lower yet. The message names the knob.
class LoweringError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The program's interface: the buffers the host binds and reads every step.
namespace lowered_names {
inline constexpr std::string_view kToken = "token";    // IO_INPUT I32 [1]: this step's token
inline constexpr std::string_view kPos = "pos";        // IO_INPUT I32 [1]: this step's position
inline constexpr std::string_view kLogits = "logits";  // IO_OUTPUT F32 [1, vocab]
inline constexpr std::string_view kNextToken = "next_token";  // IO_OUTPUT I32 [1]: the sampled token
// IO_INPUT F32 [4] / I32 [8]: the sampling settings (amk/sampler.h PackedSampling); all zero is
// greedy, so a host that never writes them gets the argmax.
inline constexpr std::string_view kSamplingFloats = "sampling_floats";
inline constexpr std::string_view kSamplingInts = "sampling_ints";
}  // namespace lowered_names
// The `source` of a CONST buffer that no checkpoint holds: the loader computes it from the
// model's config. "amk.rope.inv_freq": F32 [head_dim / 2], rope_inv_freq_f32(config) (amk/rope.h),
// ROPE_FREQ's table for scaled rope types. The "amk." prefix cannot collide with a state-dict key.
inline constexpr std::string_view kRopeInvFreqSource = "amk.rope.inv_freq";
// The source of a CONST buffer of zeros (any shape): the residual of a tensor-parallel step's
// partial sums that must not add one (docs/CLUSTER_TP.md), so they stay GEMV_ADD tiles.
inline constexpr std::string_view kZerosSource = "amk.zeros";
// "layers.{i}.k_cache" / "layers.{i}.v_cache": KV_CACHE [n_kv_heads, max_context, head_dim]
// (amk/ir.h kv_cache_offset).
std::string kv_cache_name(int64_t layer, char k_or_v);

// The KV caches' dtype for WEIGHT buffers of `weight_dtype`: BF16 for BF16 weights (each step
// reads every cached key, so the cache's bytes grow with the context), F32 otherwise (the fp32
// oracle keeps F32 end to end). Every CPU decoder that must agree with a lowered program
// rounds its K/V the same way.
DType kv_cache_dtype(DType weight_dtype);

// Defaults when the config leaves them out.
inline constexpr int64_t kDefaultGemvNTile = 256;

// Split-KV blocks one head group may have (tiling.attention.kv_block): ATTENTION_COMBINE merges
// at most kMaxInputs partials, so more blocks take a two-level tree of combines (the first level
// with flags bit 1, partial output), which bounds them at kMaxInputs^2.
inline constexpr int64_t kMaxKvBlocks = int64_t(kMaxInputs) * kMaxInputs;

// Throws LoweringError (bad knob, unsupported feature, max_context out of range) or
// UnsupportedModelError (a sliding window shorter than max_context). Every returned program has
// passed validate(); a rejection would be a lowering bug and throws LoweringError with the report.
// `weight_dtype` is the dtype of the WEIGHT buffers (the checkpoint's); when absent it comes from
// the config's torch_dtype (BF16 when that is absent too). Activations, KV cache and logits are
// F32 in this slice.
Program lower(const ModelConfig& model, const ScheduleConfig& config, const GpuTarget& target,
              int64_t max_context, std::optional<DType> weight_dtype = std::nullopt);

// The ScheduleConfig derived from the model and the target (src/schedule/default_config.cpp):
// what `amk compile` / `run` / `oracle` / `bench` lower with when no --config is given. Every
// streaming level's rows are split evenly over the target's SMs; the fusions and weight-stream
// bound that measured best are on.
ScheduleConfig default_schedule_config(const ModelConfig& model, const GpuTarget& target,
                                       int64_t max_context);

// The derived default (above) for a tensor-parallel step (tiling.tp, docs/CLUSTER_TP.md) of
// `clusters` clusters of `size` SMs with the attention on the first `attention`: every tiled
// level sized for its cluster instead of the whole GPU. q/k/v tiles one per SM of a cluster where
// they fit (a width dividing a KV head's rows), gate/up a cluster's features over its SMs,
// o_proj and down_proj one slice of the sums wide (a counter a tile), the lm_head and argmax
// over the clusters' SMs. Throws LoweringError for a shape the lowering refuses (e.g. the
// attention not dividing the KV heads).
ScheduleConfig tensor_parallel_schedule_config(const ModelConfig& model, const GpuTarget& target,
                                               int64_t max_context, int64_t clusters,
                                               int64_t size, int64_t attention);

// The shared memory the derived default leaves unused under the target's opt-in cap (its
// smem_bytes_per_block is the cap minus this, where the cap exceeds twice this): the weight ring
// one 32 KiB stage short of what fits (bench/RESULTS.md, 2026-11-24).
inline constexpr int64_t kRingHeadroomBytes = 35840;

}  // namespace amk
