// The bits of the `flags` param that the reference ops understand, per opcode. A bit an op does
// not know is an error there, so a program never silently means something else.
#pragma once

#include <cstdint>

namespace amk {

namespace attention_flags {
inline constexpr int64_t kCausal = 1;   // a single decode query: every cached key precedes it
inline constexpr int64_t kPartial = 2;  // write the flash partial [acc | m | l] per head
// The window is clipped to the step's position (docs/RUNTIME_POSITION.md): keys
// [kv_start, min(kv_start + kv_len, pos + 1)). kv_start/kv_len are the block's static bounds.
inline constexpr int64_t kRuntimeWindow = 4;
// ROPE_KV_ATTENTION_TILE only (docs/OPCODES.md): inputs 5, 6 are the per-head q / k RMSNORM
// weights (Qwen3's q_norm / k_norm, eps param) ...
inline constexpr int64_t kHeadNorm = 8;
// ... and the last input is an inv_freq table (ROPE_FREQ's); without it, ROPE's theta param.
inline constexpr int64_t kRopeTable = 16;

// Whether an attention task with a head range of `range_heads` of `n_heads` writes its result
// to its heads' slice of a one-row output of every head (docs/OPCODES.md, ATTENTION_TILE): a
// full (not partial) result whose output holds n_heads x head_dim elements. False on overflow.
inline bool writes_head_slice(bool partial, int64_t range_heads, int64_t n_heads,
                              int64_t head_dim, int64_t out_numel) {
  int64_t row = 0;
  return !partial && range_heads != n_heads && !__builtin_mul_overflow(n_heads, head_dim, &row) &&
         out_numel == row;
}

// Whether a partial attention task with a head range of `range_heads` of `n_heads` writes its
// partials into a stack of partials of every head, [S * n_heads, head_dim + 2] (docs/OPCODES.md,
// ATTENTION_TILE): rows [m_off * n_heads + n_off, ... + range_heads) of an output that is a whole
// number S >= 1 of such slabs and not just the task's own partials. False on overflow.
inline bool writes_partial_stack(bool partial, int64_t range_heads, int64_t n_heads,
                                 int64_t head_dim, int64_t out_numel) {
  int64_t width = 0, slab = 0, own = 0;
  return partial && head_dim >= 1 && n_heads >= 1 && out_numel > 0 &&
         !__builtin_add_overflow(head_dim, 2, &width) &&
         !__builtin_mul_overflow(n_heads, width, &slab) &&
         !__builtin_mul_overflow(range_heads, width, &own) && out_numel != own &&
         out_numel % slab == 0;
}
}  // namespace attention_flags

namespace kv_append_flags {
// The rows written start at param pos + the step's position (docs/RUNTIME_POSITION.md).
inline constexpr int64_t kRuntimePos = 1;
}  // namespace kv_append_flags

namespace sample_flags {
// Reduce the partial argmaxes' (value, index) pairs instead of scanning logits.
inline constexpr int64_t kReduce = 1;
// Draw the token (docs/OPCODES.md, SAMPLE_ARGMAX): the inputs end with the logits row, the
// sampling floats and ints (amk/sampler.h, PackedSampling); temperature 0 is the argmax.
inline constexpr int64_t kSample = 2;
}  // namespace sample_flags

}  // namespace amk
