// How much op scratch (OpContext::scratch, the head of the CTA's dynamic shared memory) the
// non-GEMV device instructions need, so the host loader can size MegakernelLayout::scratch_bytes.
// Plain C++ (host and device): the loader takes the max of these and the GEMV family's K floats.
//
// Per op (src/vm/cuda/ops/*.cuh):
//   COPY, ADD, SILU_MUL, EMBED, KV_APPEND, ATTENTION_COMBINE   none
//   RMSNORM        32 floats (block_sum) for rows longer than 256; none for shorter rows
//   SAMPLE_ARGMAX  32 floats + 32 int32 (the per-warp bests); sampling (flags bit 1)
//                  kSampleScratchBytes (8 uint64 per warp)
//   ROPE/ROPE_FREQ head_dim doubles (the row's cos/sin table)
//   ATTENTION_TILE none required; with attention_split_scratch_bytes() it runs its chunked
//                  decode fast path (16-byte rows) or, for other rows, splits each head's keys
//                  over idle warps; with less it runs the slower warp-per-head path.
//   ROPE_KV_ATTENTION_TILE  its prologue first (q heads, head_dim doubles of cos/sin, the KV
//                  heads' new row, the head norm's weights, each rounded to 16 bytes), then
//                  ATTENTION_TILE's
// An op given less than it requires fails (op_fail) instead of overrunning shared memory.
#pragma once

#include <cstdint>

namespace amk::cuda {

// Largest head_dim the device ops support (ATTENTION_TILE's register slices).
inline constexpr int kOpMaxHeadDim = 256;

// block_sum's 32 floats; SAMPLE_ARGMAX's 32 floats + 32 int32.
inline constexpr int kReductionScratchBytes = 32 * 4 + 32 * 4;

// A GEMV tile's scratch: these reduction floats, then x (K floats), then its row partials
// (ops/gemv.cuh; the loader checks that they fit, gemv_tile_check.cpp).
inline constexpr int kGemvReduceFloats = 32;

// A GEMV-family tile's op scratch in floats, the one formula the loader sizes the layout by
// (marshal.cpp) and checks each tile against (gemv_tile_check.cpp): block_sum's floats, x (one
// activation row of K, rebuilt for each row), then a dot-product partial per (weight row,
// segment): `weight_rows` is N_tile, twice that for a GLU tile's gate and up rows; `segments` is
// 1 without the ring, its strips per row (gemv_strips_per_row) over it.
constexpr long long gemv_scratch_floats(long long K, long long weight_rows, long long segments) {
  return kGemvReduceFloats + K + weight_rows * segments;
}

// SAMPLE_ARGMAX sampling (flags bit 1, ops/sampling.cuh): 8 uint64 sums per warp.
inline constexpr int kSampleScratchBytes = 32 * 8 * 8;

constexpr int round_up16(int bytes) { return (bytes + 15) / 16 * 16; }

// ROPE / ROPE_FREQ: a cos and a sin (double) per rotated pair.
constexpr int rope_scratch_bytes(int head_dim) { return head_dim * 8; }

// ROPE_KV_ATTENTION_TILE's prologue, in floats, before ATTENTION_TILE's scratch: the task's
// query heads, a cos and a sin (double) per rotated pair, its KV heads' new k row and v row,
// and with the per-head norm (flags bit 3) the q_norm and k_norm weights, loaded before the
// task's gate; each part a multiple of 4 floats so the next stays 16-byte aligned.
constexpr int rope_kv_prologue_floats(int q_heads, int kv_heads, int head_dim, bool head_norm) {
  return (q_heads * head_dim + 3) / 4 * 4 + 2 * head_dim + 2 * ((kv_heads * head_dim + 3) / 4 * 4) +
         (head_norm ? 2 * ((head_dim + 3) / 4 * 4) : 0);
}

// ATTENTION_TILE's optional scratch. For head_dim % 4 == 0 (16-byte rows) the decode fast path
// keeps acc [n_heads][head_dim], m, l and a rescale per head, and the scores of one key chunk
// ([chunk][n_heads rounded up to odd]); it takes chunks of up to 64 keys, fewer when the scratch
// is smaller (at least 8, else it falls back to the warp path). This reserves 64 keys, trimmed
// (not below 16) to stay within kAttnScratchSoftCapBytes so the GEMV weight ring keeps its room.
// Otherwise (or n_heads unknown, 0) the warp path's key split: a warp runs up to 4 heads of a GQA
// group (2 when head_dim > 128), each with one [acc | m | l] slot of head_dim + 2 floats.
inline constexpr int kAttnScratchSoftCapBytes = 24 * 1024;

//
// A task whose KV heads are few (a head range, tiling.attention.kv_heads) also stages each
// 64-key chunk's K and V rows of its KV heads in shared memory (2 x 64 x n_kv_heads x head_dim
// floats) when that fits kAttnStagingCapBytes: one memory latency per chunk instead of several.
inline constexpr int kAttnStagingCapBytes = 64 * 1024;

constexpr int attention_split_scratch_bytes(int head_dim, int n_heads, int n_kv_heads,
                                            int consumer_threads) {
  if (n_heads > 0 && head_dim > 0 && head_dim % 4 == 0) {
    const int fixed = n_heads * head_dim + 3 * n_heads;  // floats
    const int stride = n_heads | 1;
    const int staging = n_kv_heads > 0 ? 2 * 64 * n_kv_heads * head_dim : 0;  // floats
    if (staging > 0 && staging * 4 <= kAttnStagingCapBytes)
      return round_up16((fixed + 4 + 64 * stride + staging) * 4);
    int chunk = (kAttnScratchSoftCapBytes / 4 - fixed) / stride;
    chunk = chunk > 64 ? 64 : (chunk < 16 ? 16 : chunk);
    return round_up16((fixed + chunk * stride) * 4);
  }
  return round_up16((consumer_threads / 32) * (head_dim <= 128 ? 4 : 2) * (head_dim + 2) * 4);
}

// attention_block (ops/attention.cuh), the 64-key block walk: its keys per block, the (head, dim)
// items a thread keeps an acc for (n_heads x head_dim <= this x consumer threads), the floats of
// scratch it needs ([K: 64 x G D][V: 64 x G D] cache elements, half the room for BF16; [q: H x
// D][p: H x 64][m, l, r: H]) and whether a task's shape takes it. One formula for the device,
// the loader (a strided window runs only there) and the derived config.
inline constexpr int kAttnBlockKeys = 64;
inline constexpr int kAttnBlockItems = 2;
constexpr long long attention_block_floats(int head_dim, int n_heads, int n_kv_heads, bool bf16) {
  const long long gd = (long long)n_kv_heads * head_dim;
  return (bf16 ? 1 : 2) * kAttnBlockKeys * gd + (long long)n_heads * (head_dim + kAttnBlockKeys + 3);
}
// The K rows' 16-byte vectors are swizzled by (key & 7), so a key's row must hold a multiple of
// 8 of them: G D % 32 == 0 for F32, % 64 for BF16.
constexpr bool attention_block_fits(int head_dim, int n_heads, int n_kv_heads, bool bf16,
                                    int consumer_threads, long long scratch_bytes) {
  return head_dim > 0 && head_dim % 32 == 0 && (!bf16 || n_kv_heads * head_dim % 64 == 0) &&
         n_heads * head_dim <= kAttnBlockItems * consumer_threads &&
         attention_block_floats(head_dim, n_heads, n_kv_heads, bf16) * 4 <= scratch_bytes;
}

// What every non-GEMV op of a program with heads of at most `max_head_dim` requires.
constexpr int op_scratch_bytes(int max_head_dim) {
  const int rope = rope_scratch_bytes(max_head_dim);
  return round_up16(rope > kReductionScratchBytes ? rope : kReductionScratchBytes);
}

// Enough for every supported head_dim: a loader that does not look at the program can use this.
inline constexpr int kOpScratchMinBytes = op_scratch_bytes(kOpMaxHeadDim);

static_assert(kOpScratchMinBytes == 2048, "head_dim 256 doubles");

}  // namespace amk::cuda
