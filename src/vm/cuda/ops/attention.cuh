// ATTENTION_TILE (one decode query against a KV window, GQA) and ATTENTION_COMBINE (the
// flash-decoding merge of split-KV partials); mirrors src/vm/reference/ops/attention.cpp.
//
// ATTENTION_TILE. Head h reads KV head h / (n_heads / n_kv_heads). Over the window
// [kv_start, kv_start + kv_len) (param kv_stride > 0: that run every kv_stride positions,
// amk/kv_window.h, walked by attention_block only; flags bit 2: clipped to the keys written so
// far, KvWindow::seen), with s_j = scale * q_h . k_j:
//   m = max s_j,  l = sum exp(s_j - m),  acc = sum exp(s_j - m) v_j
// full: out_h = acc / l (0 for an empty window); PARTIAL (flags bit 1): [acc | m | l] per head
// (empty window: acc = 0, m = -inf, l = 0).
//
// How: online softmax, so no per-key storage. A work item is (C heads of one GQA group, key
// range), C = 4, 2 or 1 (the largest that divides n_heads / n_kv_heads; at most 2 when head_dim
// > 128). One warp runs an item with its lanes across head_dim (a lane holds 4 consecutive dims
// per 128: float4 loads of q, k and v) and walks the keys four at a time (two when head_dim >
// 128): every k and v row is loaded once for the C heads, several rows are in flight, and the
// C x 4 dot-product shuffle reductions interleave. Items are spread over the warps; when the CTA
// has at least twice as many warps as items (and op scratch for it), each item's keys are split
// over n_splits warps whose [acc | m | l] partials go to op scratch and are merged exactly as
// ATTENTION_COMBINE merges shards. q and the output are F32 (the lowering's activations); the
// caches F32 or BF16 (the lowering's for BF16 weights: half the bytes each step reads), which
// the 64-key blocks and this warp path read (the chunked path F32 only).
//
// Cost (H100, one CTA of 256 consumer threads, measured in isolation): 32 heads / 8 KV heads /
// head_dim 128 over 512 keys ~210 us, over 4096 keys ~1.8 ms. Plain loads of 16 bytes: the
// warps are latency-bound (~8 warps x a few KiB in flight); a TMA-fed K/V stage in shared memory
// would be the next step, and the lowering's kv_block split spreads long windows over SMs.
//
// Head ranges (params n_off, N_tile; docs/OPCODES.md): a tile runs only query heads [n_off,
// n_off + N_tile) (whole GQA groups) and their KV heads' histories (caches [n_kv_heads,
// max_seq, head_dim]: a head's keys are contiguous),
// and its output holds just those heads (or, a full result, an output of every head of which
// it writes those: one task a head group over the whole window, no combine); a combine merges
// N_tile-head partials into heads [n_off, n_off + N_tile) of its one-row output. Absent
// (N_tile 0): every head.
//
// ATTENTION_COMBINE. Per output element, over the partials with l > 0 (an empty shard never
// yields exp(-inf + inf)): M = max m_p, out = sum exp(m_p - M) acc_p / sum exp(m_p - M) l_p;
// 0 when every shard is empty. flags bit 1 (partial): the merge stays [acc | m | l] per head
// (acc = sum exp(m_p - M) acc_p, m = M, l = sum exp(m_p - M) l_p), for a second combine. No
// barrier, no scratch.
//
// Op scratch (ATTENTION_TILE only, optional): n_heads * n_splits * (head_dim + 2) floats when
// splitting keys; scratch.h attention_split_scratch_bytes() is enough for every split.
//
// op_fail codes (code >> 4 = the opcode). ATTENTION_TILE: 2 a strided window on a path that
// cannot walk it, 3 runtime window without a step position (the loader checks the operands:
// attention_tile_check.cpp). ATTENTION_COMBINE: 1 partial or
// output sizes that are not [n_heads, head_dim + 2] / [n_heads, head_dim], 2 a non-F32 operand.
#pragma once

#include <type_traits>

#include "amk/kv_window.h"
#include "vm/cuda/ops/elementwise.cuh"
#include "vm/cuda/ops/rope.cuh"
#include "vm/cuda/ops/scratch.h"
#include "vm/cuda/primitives.cuh"
#include "vm/cuda/sync.cuh"
#include "vm/cuda/weight_ring.cuh"

namespace amk::cuda {

inline constexpr int32_t kAttnPartial = 2;        // amk/op_flags.h attention_flags::kPartial
inline constexpr int32_t kAttnRuntimeWindow = 4;  // ... kRuntimeWindow
inline constexpr int kAttnKeysPerStep = 4;  // keys a warp has in flight (head_dim <= 128)

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

// A warp-distributed head_dim vector: lane `lane` owns the VEC consecutive floats starting at
// d = VEC * (lane + 32 * t) for t < NV (VEC = 4 needs head_dim % 4 == 0 and 16-byte rows).
template <int VEC, int NV>
struct LaneSlice {
  float v[NV][VEC];

  // T: float, or uint16_t for BF16 bits (a BF16 cache; scalar loads only).
  template <typename T>
  __device__ __forceinline__ void load(const T* row, int lane, int head_dim) {
#pragma unroll
    for (int t = 0; t < NV; ++t) {
      const int d = VEC * (lane + 32 * t);
      if (d < head_dim) {
        if constexpr (std::is_same_v<T, uint16_t>) {
          static_assert(VEC == 1, "BF16 rows are read one element a lane");
          v[t][0] = bf16_bits_to_float(row[d]);
        } else if constexpr (VEC == 4) {
          const float4 x = *reinterpret_cast<const float4*>(row + d);
          v[t][0] = x.x, v[t][1] = x.y, v[t][2] = x.z, v[t][3] = x.w;
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e) v[t][e] = row[d + e];
        }
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[t][e] = 0.0f;
      }
    }
  }
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int t = 0; t < NV; ++t)
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[t][e] = 0.0f;
  }
  __device__ __forceinline__ float dot(const LaneSlice& o) const {  // this lane's share
    float s = 0.0f;
#pragma unroll
    for (int t = 0; t < NV; ++t)
#pragma unroll
      for (int e = 0; e < VEC; ++e) s = fmaf(v[t][e], o.v[t][e], s);
    return s;
  }
  // Writes v[...] * mul to `out` (scalar stores: a partial's rows are not 16-byte aligned).
  __device__ __forceinline__ void store_scaled(float* out, int lane, int head_dim, float mul) const {
#pragma unroll
    for (int t = 0; t < NV; ++t) {
      const int d = VEC * (lane + 32 * t);
      if (d < head_dim)
#pragma unroll
        for (int e = 0; e < VEC; ++e) out[d + e] = v[t][e] * mul;
    }
  }
};

// The flash state of one (head, key range) item.
template <int VEC, int NV>
struct FlashState {
  LaneSlice<VEC, NV> acc;
  float m = neg_inf();
  float l = 0.0f;
};

// Runs keys [j0, j1) for C heads of one GQA group on one warp: every k/v row is loaded once and
// used by all C heads. k_head/v_head point at (row 0, this KV head); row j is `row_stride`
// floats further.
template <int VEC, int NV, int C, typename T>
__device__ __forceinline__ void attend_keys(FlashState<VEC, NV> (&st)[C],
                                            const LaneSlice<VEC, NV> (&q)[C], const T* k_head,
                                            const T* v_head, int64_t row_stride, int64_t j0,
                                            int64_t j1, float scale, int lane, int head_dim) {
  // Keys in flight: half as many for head_dim > 128, so k and v rows stay in registers
  // (<= 32 floats) at 256 consumer threads.
  constexpr int U = VEC * NV <= 4 ? kAttnKeysPerStep : kAttnKeysPerStep / 2;
  for (int64_t j = j0; j < j1; j += U) {
    LaneSlice<VEC, NV> k[U], v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (j + u < j1) {
        k[u].load(k_head + (j + u) * row_stride, lane, head_dim);
        v[u].load(v_head + (j + u) * row_stride, lane, head_dim);
      } else {
        k[u].zero();
        v[u].zero();
      }
    }
    float s[C][U];
#pragma unroll
    for (int r = 0; r < C; ++r)
#pragma unroll
      for (int u = 0; u < U; ++u) s[r][u] = q[r].dot(k[u]);
    // The C * U reductions interleave, so their shuffle latencies overlap.
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int r = 0; r < C; ++r)
#pragma unroll
        for (int u = 0; u < U; ++u) s[r][u] += __shfl_xor_sync(0xffffffffu, s[r][u], o);
#pragma unroll
    for (int r = 0; r < C; ++r) {
      float m_new = st[r].m;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        s[r][u] = j + u < j1 ? s[r][u] * scale : neg_inf();
        m_new = fmaxf(m_new, s[r][u]);
      }
      // m_new is finite once a real key was seen; the guards keep exp(-inf - -inf) out.
      const float correction = st[r].m == m_new ? 1.0f : expf(st[r].m - m_new);
      float p_sum = 0.0f;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        s[r][u] = s[r][u] == neg_inf() ? 0.0f : expf(s[r][u] - m_new);  // now the weight
        p_sum += s[r][u];
      }
      st[r].l = fmaf(st[r].l, correction, p_sum);
      st[r].m = m_new;
#pragma unroll
      for (int t = 0; t < NV; ++t)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          float acc = st[r].acc.v[t][e] * correction;
#pragma unroll
          for (int u = 0; u < U; ++u) acc = fmaf(s[r][u], v[u].v[t][e], acc);
          st[r].acc.v[t][e] = acc;
        }
    }
  }
}

// Merges `n` flash partials [acc | m | l] (`at(p, i)`: element i of partial p's head, i <
// head_dim + 2) into element d of that head's result: acc / M / L in the partial layout, or the
// normalised acc / L. Shards with l <= 0 are skipped, exactly as the reference combine. MAX_N > 0
// unrolls the loops over at most MAX_N partials, so a caller's array of partial pointers stays in
// registers; MAX_N = 0 loops over n at run time.
template <int MAX_N, typename PartialAt>
__device__ __forceinline__ float merge_partials(int n, int head_dim, int d, bool keep_partial,
                                                PartialAt at) {
  const int bound = MAX_N > 0 ? MAX_N : n;
  float M = neg_inf();
#pragma unroll
  for (int p = 0; p < bound; ++p) {
    if (p >= n) break;
    if (at(p, head_dim + 1) > 0.0f) M = fmaxf(M, at(p, head_dim));
  }
  float L = 0.0f, acc = 0.0f;
#pragma unroll
  for (int p = 0; p < bound; ++p) {
    if (p >= n) break;
    const float l = at(p, head_dim + 1);
    if (!(l > 0.0f)) continue;
    const float w = expf(at(p, head_dim) - M);
    L = fmaf(w, l, L);
    if (d < head_dim) acc = fmaf(w, at(p, d), acc);
  }
  if (keep_partial) return d < head_dim ? acc : (d == head_dim ? M : L);
  return L > 0.0f ? acc / L : 0.0f;
}

struct AttentionShape {
  int head_dim, n_heads, n_kv_heads;  // the task's heads (a head range's, when it has one)
  int64_t kv_stride;       // floats from one key of a KV head's history to the next (head_dim)
  int64_t kv_head_stride;  // floats from one KV head's history to the next (max_seq * head_dim)
  int64_t kv_start, kv_len;  // kv_len: the window's keys (after the runtime clip)
  float scale;
  bool partial;
  bool bf16;       // BF16 caches (k, v then point at BF16 bits: index them as uint16_t)
  const float* q;  // the task's first query head
  const float* k;  // the task's first KV head at position 0 (K and V caches)
  const float* v;
  float* out;      // the task's first head of the output (a slice of a row of every head, or all)
  bool prestaged = false;  // attention_block's first block is staged already (before the gate)
  // A strided window (param kv_stride, amk/kv_window.h): runs of kv_run keys every kv_period
  // positions (0: one run); kv_run is a multiple of the 64-key block, so no block straddles two.
  int32_t kv_run = 0, kv_period = 0, max_seq = 0;
};

// The task's whole window (attention_setup's static bounds; a.kv_len may be clipped since).
__device__ __forceinline__ BasicKvWindow<int32_t> attention_window_of(const AttentionShape& a) {
  return {int32_t(a.kv_start), a.kv_period > 0 ? a.kv_run : int32_t(a.kv_len), a.kv_period,
          a.max_seq};
}

// C = the heads of one GQA group a warp runs together (a divisor of n_heads / n_kv_heads); T the
// caches' element (float, or uint16_t for BF16 bits).
template <int VEC, int NV, int C, typename T = float>
__device__ void attention_tile_impl(const OpContext& c, const AttentionShape& a) {
  const float* q = a.q;
  const T* kc = reinterpret_cast<const T*>(a.k);
  const T* vc = reinterpret_cast<const T*>(a.v);
  float* out = a.out;
  const int warp = c.tid >> 5, lane = c.tid & 31, n_warps = c.n_threads >> 5;
  const int hd = a.head_dim;
  const int width = a.partial ? hd + 2 : hd;
  const int rep = a.n_heads / a.n_kv_heads;
  const int n_chunks = a.n_heads / C;  // items per key range; chunk i = heads [i*C, i*C + C)
  const int64_t row_stride = a.kv_stride;

  // Split each chunk's keys over several warps only when chunks alone leave warps idle, every
  // split gets a few keys, and scratch holds the partials (one [acc | m | l] slot per head and
  // split, head-major).
  int n_splits = 1;
  if (n_warps >= 2 * n_chunks && a.kv_len >= 2 * kAttnKeysPerStep) {
    const int slot_floats = hd + 2;
    const int64_t by_scratch = c.scratch_bytes / (int64_t(sizeof(float)) * slot_floats * a.n_heads);
    const int64_t by_keys = a.kv_len / kAttnKeysPerStep;
    int64_t splits = n_warps / n_chunks;
    splits = splits < by_scratch ? splits : by_scratch;
    splits = splits < by_keys ? splits : by_keys;
    n_splits = splits >= 2 ? int(splits) : 1;
  }
  const int64_t chunk_keys = (a.kv_len + n_splits - 1) / n_splits;
  const int items = n_chunks * n_splits;

  for (int item = warp; item < items; item += n_warps) {
    const int chunk = item / n_splits, split = item - chunk * n_splits;
    const int h0 = chunk * C;  // a chunk never straddles groups: C divides rep
    const int g = h0 / rep;
    const int64_t end = a.kv_start + a.kv_len;
    const int64_t j0 = a.kv_start + split * chunk_keys;
    const int64_t j1 = j0 + chunk_keys < end ? j0 + chunk_keys : end;
    LaneSlice<VEC, NV> qh[C];
    FlashState<VEC, NV> st[C];
#pragma unroll
    for (int r = 0; r < C; ++r) {
      qh[r].load(q + int64_t(h0 + r) * hd, lane, hd);
      st[r].acc.zero();
    }
    attend_keys<VEC, NV, C, T>(st, qh, kc + int64_t(g) * a.kv_head_stride,
                            vc + int64_t(g) * a.kv_head_stride, row_stride, j0, j1, a.scale, lane,
                            hd);
#pragma unroll
    for (int r = 0; r < C; ++r) {
      const int h = h0 + r;
      if (n_splits > 1) {
        float* slot = c.scratch + (int64_t(h) * n_splits + split) * (hd + 2);
        st[r].acc.store_scaled(slot, lane, hd, 1.0f);
        if (lane == 0) slot[hd] = st[r].m, slot[hd + 1] = st[r].l;
      } else if (a.partial) {
        float* o = out + int64_t(h) * width;
        st[r].acc.store_scaled(o, lane, hd, 1.0f);
        if (lane == 0) o[hd] = st[r].m, o[hd + 1] = st[r].l;
      } else {
        // An empty window leaves acc = 0, l = 0: attention over nothing is 0.
        st[r].acc.store_scaled(out + int64_t(h) * width, lane, hd,
                               st[r].l > 0.0f ? 1.0f / st[r].l : 0.0f);
      }
    }
  }
  if (n_splits == 1) return;

  consumer_sync(c.n_threads);
  const float* slots = c.scratch;
  for (int64_t e = c.tid; e < int64_t(a.n_heads) * width; e += c.n_threads) {
    const int h = int(e / width), d = int(e - int64_t(h) * width);
    const float* head_slots = slots + int64_t(h) * n_splits * (hd + 2);
    out[e] = merge_partials<0>(n_splits, hd, d, a.partial,
                               [&](int p, int i) { return head_slots[p * (hd + 2) + i]; });
  }
  consumer_sync(c.n_threads);  // the scratch is free for the next task
}

// ---- The decode fast path (16-byte rows, op scratch for one key chunk) ----
//
// The warp-per-item path above keeps ~8 warps x a few KiB of loads in flight and so runs at
// latency, not bandwidth (64 keys x 8 KV heads x head_dim 64: ~49 us). This path instead walks
// the window in chunks of up to kAttnChunkKeys keys, and in each chunk
//   1. scores: every (key, KV head) row of K is handled by a segment of L lanes (a lane owns 2
//      float4 of the row), a thread loads U rows before using any, and the rows' dot products
//      with the group's q heads (q held in registers) are written to scratch [key][head];
//   2. softmax: one warp per head updates its running (m, l) and turns the chunk's scores into
//      weights p = exp(s - m) (and the factor that rescales the head's older acc);
//   3. values: a thread owns one dim of one KV head (consecutive threads read consecutive
//      memory: V rows of all KV heads are contiguous) and accumulates
//      sum_j p[h][j] v_j for the group's heads with U3 keys in flight, then folds that into the
//      head's acc in scratch.
// The same online softmax as the warp path, so the results agree with the reference to
// rounding; only the summation order differs.
inline constexpr int kAttnChunkKeys = 64;
inline constexpr int kAttnMinChunkKeys = 8;  // less scratch than this: the warp path

struct FastAttnScratch {
  float* acc;   // [n_heads][head_dim] running sum of p * v
  float* m;     // [n_heads] running max
  float* l;     // [n_heads] running sum of p
  float* corr;  // [n_heads] this chunk's rescale of the older acc / l
  float* sc;    // [chunk][sc_stride] scores, then weights, of the chunk's keys
  int sc_stride;  // n_heads rounded up to odd: phase 2's column reads hit distinct banks
  int chunk;
};

// Floats of scratch besides the chunk's scores (must match scratch.h).
__device__ __forceinline__ int64_t fast_attn_fixed_floats(int n_heads, int head_dim) {
  return int64_t(n_heads) * head_dim + 3 * int64_t(n_heads);
}

__device__ __forceinline__ float4 load_f4_or_zero(const float* p, bool ok) {
  return ok ? *reinterpret_cast<const float4*>(p) : make_float4(0.f, 0.f, 0.f, 0.f);
}

// Phase 1: scores of keys [j0, j0 + n) for every head into s.sc[j][h] (scaled).
__device__ __forceinline__ void fast_attn_scores(const OpContext& c, const AttentionShape& a,
                                                 const float* q, const float* k0,
                                                 int64_t row_stride, int64_t head_stride, int n,
                                                 const FastAttnScratch& s) {
  constexpr int F = 2;   // float4 per lane of a key row: head_dim <= 256 with <= 32 lanes a row
  constexpr int RB = 2;  // q heads in registers at once (RB * F float4)
  constexpr int U = 2;   // K rows a thread has in flight (U * F float4)
  const int D = a.head_dim, G = a.n_kv_heads, R = a.n_heads / a.n_kv_heads, n4 = D / 4;
  int L = 1;
  while (L * F < n4) L <<= 1;  // lanes per row: <= 16 for head_dim <= 256
  const int lane = c.tid & 31, li = lane & (L - 1);
  // Shuffles stay inside the row's segment, whose lanes always run the same loop trip.
  const unsigned seg_mask = L == 32 ? 0xffffffffu : ((1u << L) - 1u) << (lane & ~(L - 1));
  const int slot = c.tid / L, n_slots = c.n_threads / L;
  // A slot keeps one KV head (so its q slices stay in registers) and strides over the keys;
  // with fewer slots than KV heads, each slot walks whole KV heads instead.
  int g0, g_step, kphase, kstride;
  if (n_slots >= G) {
    const int per_g = n_slots / G;
    g0 = slot / per_g;  // >= G for the few slots left over: idle
    g_step = G;
    kphase = slot - (slot / per_g) * per_g;
    kstride = per_g;
  } else {
    g0 = slot, g_step = n_slots, kphase = 0, kstride = 1;
  }
  for (int g = g0; g < G; g += g_step) {
    const float* k_rows = k0 + int64_t(g) * head_stride;
    for (int hb = 0; hb < R; hb += RB) {
      float4 qv[RB][F];
#pragma unroll
      for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int f = 0; f < F; ++f) {
          const int d4 = li + L * f;
          qv[r][f] = load_f4_or_zero(q + int64_t(g * R + hb + r) * D + 4 * d4,
                                     hb + r < R && d4 < n4);
        }
      for (int j = kphase; j < n; j += U * kstride) {
        float4 kv[U][F];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int f = 0; f < F; ++f) {
            const int d4 = li + L * f;
            const int jj = j + u * kstride;
            kv[u][f] = load_f4_or_zero(k_rows + int64_t(jj) * row_stride + 4 * d4,
                                       jj < n && d4 < n4);
          }
        float dot[RB][U];
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
          for (int u = 0; u < U; ++u) {
            float t = 0.0f;
#pragma unroll
            for (int f = 0; f < F; ++f) {
              t = fmaf(qv[r][f].x, kv[u][f].x, t);
              t = fmaf(qv[r][f].y, kv[u][f].y, t);
              t = fmaf(qv[r][f].z, kv[u][f].z, t);
              t = fmaf(qv[r][f].w, kv[u][f].w, t);
            }
            dot[r][u] = t;
          }
        for (int o = L >> 1; o > 0; o >>= 1)
#pragma unroll
          for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int u = 0; u < U; ++u) dot[r][u] += __shfl_xor_sync(seg_mask, dot[r][u], o);
        if (li == 0) {
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int jj = j + u * kstride;
            if (jj >= n) continue;
#pragma unroll
            for (int r = 0; r < RB; ++r)
              if (hb + r < R) s.sc[jj * s.sc_stride + g * R + hb + r] = dot[r][u] * a.scale;
          }
        }
      }
    }
  }
}

// Phase 2: per head, the chunk's max and weights, and the running (m, l).
__device__ __forceinline__ void fast_attn_softmax(const OpContext& c, int n_heads, int n,
                                                  const FastAttnScratch& s) {
  const int warp = c.tid >> 5, lane = c.tid & 31, n_warps = c.n_threads >> 5;
  for (int h = warp; h < n_heads; h += n_warps) {
    float mx = neg_inf();
    for (int j = lane; j < n; j += 32) mx = fmaxf(mx, s.sc[j * s.sc_stride + h]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const float m_old = s.m[h];
    const float m_new = fmaxf(m_old, mx);
    // The guards keep exp(-inf - -inf) out, as in the warp path.
    const float corr = m_old == m_new ? 1.0f : expf(m_old - m_new);
    float sum = 0.0f;
    for (int j = lane; j < n; j += 32) {
      float& x = s.sc[j * s.sc_stride + h];
      const float p = x == neg_inf() ? 0.0f : expf(x - m_new);
      x = p;
      sum += p;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    // Every lane read m[h] above; lane 0 rewrites it. The shuffles already converge the warp,
    // but only __syncwarp orders shared-memory accesses (and racecheck knows it).
    __syncwarp();
    if (lane == 0) {
      s.l[h] = fmaf(s.l[h], corr, sum);
      s.m[h] = m_new;
      s.corr[h] = corr;
    }
  }
}

// Phase 3: acc[h] = acc[h] * corr[h] + sum_j p[h][j] v_j over keys [j0, j0 + n). A work item
// is one dim of one KV head for the group's heads (consecutive threads take consecutive dims of
// a key's row). With `red` (room for splits x n_heads x head_dim floats), the chunk's keys are
// also split over `splits` items per column so that every thread works (a task of one KV head
// has only head_dim columns): each leaves its partial sum in red, and one pass folds them in
// split order (deterministic).
__device__ __forceinline__ void fast_attn_values(const OpContext& c, const AttentionShape& a,
                                                 const float* v0, int64_t row_stride,
                                                 int64_t head_stride, int n,
                                                 const FastAttnScratch& s, float* red,
                                                 int64_t red_floats) {
  // Small unrolls on purpose: this loop's code is fetched again on every task (the weight stream
  // keeps the L2 busy), and 16 x 16 unrolled bodies cost more in instruction fetch than they
  // save in issue slots.
  constexpr int U3 = 8;                    // V loads a thread has in flight
  constexpr int AB = 4;                    // heads accumulated in registers at once
  const int D = a.head_dim, G = a.n_kv_heads, R = a.n_heads / a.n_kv_heads, H = a.n_heads;
  const int units = G * D;  // the task's KV heads' columns of a V row
  int splits = 1;
  if (red != nullptr) {
    splits = c.n_threads / units;
    splits = splits < 8 ? splits : 8;
    splits = splits < n ? splits : n;
    while (splits > 1 && int64_t(splits) * H * D > red_floats) --splits;
    if (splits < 1) splits = 1;
  }
  const int per = (n + splits - 1) / splits;
  for (int item = c.tid; item < units * splits; item += c.n_threads) {
    const int unit = item % units, split = item / units;
    const int e = unit, g = e / D, d = e - g * D;
    const int j_begin = split * per, j_end = j_begin + per < n ? j_begin + per : n;
    const float* v_col = v0 + int64_t(g) * head_stride + d;
    for (int hb = 0; hb < R; hb += AB) {
      const int h0 = g * R + hb;
      float acc[AB];
#pragma unroll
      for (int r = 0; r < AB; ++r) acc[r] = 0.0f;
      for (int j = j_begin; j < j_end; j += U3) {
        float v[U3];
#pragma unroll
        for (int u = 0; u < U3; ++u)
          v[u] = j + u < j_end ? v_col[int64_t(j + u) * row_stride] : 0.0f;
#pragma unroll
        for (int u = 0; u < U3; ++u) {
          if (j + u >= j_end) break;
          const float* p_row = s.sc + (j + u) * s.sc_stride + h0;
#pragma unroll
          for (int r = 0; r < AB; ++r) {
            if (hb + r >= R) break;
            acc[r] = fmaf(p_row[r], v[u], acc[r]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < AB; ++r) {
        if (hb + r >= R) break;
        const int h = h0 + r;
        if (splits == 1) {
          float& dst = s.acc[int64_t(h) * D + d];
          dst = fmaf(dst, s.corr[h], acc[r]);
        } else {
          red[(int64_t(split) * H + h) * D + d] = acc[r];
        }
      }
    }
  }
  if (splits == 1) return;
  consumer_sync(c.n_threads);
  for (int64_t e = c.tid; e < int64_t(H) * D; e += c.n_threads) {
    float sum = 0.0f;
    for (int k = 0; k < splits; ++k) sum += red[int64_t(k) * H * D + e];
    s.acc[e] = fmaf(s.acc[e], s.corr[e / D], sum);
  }
}

// Starts copying keys [0, n) of the task's KV heads' histories at `src` (key stride `stride`,
// head stride `head_stride` floats, head_dim D) into dst [n][G * D] with cp.async, every
// thread's copies in flight at once (16 bytes each, L2 only: another SM appended this step's
// row).
__device__ __forceinline__ void stage_kv_rows(const OpContext& c, const float* src, int64_t stride,
                                              int64_t head_stride, int n, int G, int D,
                                              float* dst) {
  const int D4 = D / 4, vec_per_row = G * D4;
  const uint32_t to = smem_address(dst);
  for (int k = c.tid; k < n * vec_per_row; k += c.n_threads) {
    const int j = k / vec_per_row, v = k - j * vec_per_row, g = v / D4;
    cp_async16(to + 16u * uint32_t(j * vec_per_row + v),
               src + int64_t(g) * head_stride + int64_t(j) * stride + 4 * (v - g * D4));
  }
  cp_async_commit();
}

// staged: each chunk's K and V rows of the task's KV heads are first copied to shared memory
// with every load in flight at once (one memory latency per chunk), and the three phases read
// them there; otherwise the phases read the cache directly (several dependent latencies).
//
// One shape only, not one per head_dim or row width: the megakernel is one kernel of every op,
// and every op it runs must come back into the instruction cache through an L2 that the weight
// stream keeps flushing, so each extra instantiation costs real time (a 780 KB kernel with 12
// fast-path shapes spent 20 us per 64-key block). The warp path serves head_dim % 4 != 0.
__device__ void attention_tile_fast(const OpContext& c, const AttentionShape& a, int chunk,
                                    bool staged) {
  const float* q = a.q;
  float* out = a.out;
  const int H = a.n_heads, D = a.head_dim, row_floats = a.n_kv_heads * D;
  FastAttnScratch s;
  s.acc = c.scratch;
  s.m = s.acc + int64_t(H) * D;
  s.l = s.m + H;
  s.corr = s.l + H;
  s.sc = s.corr + H;
  s.sc_stride = H | 1;
  s.chunk = chunk;
  // Staged rows after the scores, 16-byte aligned (the scratch base is; sc need not be).
  float* k_stage =
      c.scratch + (((s.sc - c.scratch) + int64_t(chunk) * s.sc_stride + 3) & ~int64_t(3));
  float* v_stage = k_stage + int64_t(chunk) * row_floats;
  for (int64_t e = c.tid; e < int64_t(H) * D; e += c.n_threads) s.acc[e] = 0.0f;
  for (int h = c.tid; h < H; h += c.n_threads) s.m[h] = neg_inf(), s.l[h] = 0.0f;
  // No barrier before the first scores: acc, m and l are first read after the next one.
  for (int64_t j0 = a.kv_start; j0 < a.kv_start + a.kv_len; j0 += chunk) {
    const int64_t left = a.kv_start + a.kv_len - j0;
    const int n = left < chunk ? int(left) : chunk;
    const float* k0 = a.k + j0 * a.kv_stride;
    const float* v0 = a.v + j0 * a.kv_stride;
    int64_t stride = a.kv_stride, head_stride = a.kv_head_stride;
    if (staged) {
      stage_kv_rows(c, k0, stride, head_stride, n, a.n_kv_heads, D, k_stage);
      stage_kv_rows(c, v0, stride, head_stride, n, a.n_kv_heads, D, v_stage);
      cp_async_wait_all();
      consumer_sync(c.n_threads);
      k0 = k_stage;
      v0 = v_stage;
      stride = row_floats;  // staged: [n][G D], so a KV head is D floats on
      head_stride = D;
    }
    fast_attn_scores(c, a, q, k0, stride, head_stride, n, s);
    consumer_sync(c.n_threads);
    fast_attn_softmax(c, H, n, s);
    consumer_sync(c.n_threads);
    // Staged: the K rows are dead once the scores exist, so their room holds the values'
    // per-split partial sums.
    fast_attn_values(c, a, v0, stride, head_stride, n, s, staged ? k_stage : nullptr,
                        int64_t(chunk) * row_floats);
    consumer_sync(c.n_threads);  // the next chunk's scores (and rows) overwrite these
  }
  if (a.kv_len == 0) consumer_sync(c.n_threads);  // the init above before the reads below
  mark_body_end(c);
  const int width = a.partial ? D + 2 : D;
  for (int64_t e = c.tid; e < int64_t(H) * width; e += c.n_threads) {
    const int h = int(e / width), d = int(e - int64_t(h) * width);
    if (a.partial) {
      out[e] = d < D ? s.acc[int64_t(h) * D + d] : (d == D ? s.m[h] : s.l[h]);
    } else {
      // An empty window leaves acc = 0, l = 0: attention over nothing is 0.
      const float l = s.l[h];
      out[e] = s.acc[int64_t(h) * D + d] * (l > 0.0f ? 1.0f / l : 0.0f);
    }
  }
  consumer_sync(c.n_threads);  // the scratch is free for the next task
}

// ---- Blocks of 64 keys (the decode tiling's common case) ----
//
// A task whose window fits the op scratch's staging of 64 keys walks it one 64-key block at a
// time (a window of at most 64 keys, the lowering's kv_block, is one block). Per block it stages
// the block's K and V rows (and, once, q when it is in global memory) in shared memory with one
// round of cp.async, then
//   1. scores: one thread per (head, key): s = scale * q_h . k_j over float4s of shared memory;
//      K rows are stored with their 16-byte vectors XOR-swizzled by (key & 7), so the 8 lanes of
//      a quarter-warp (consecutive keys, one vector index) hit 8 different bank groups;
//   2. softmax: one warp per head: m' = max(m, max s), p = exp(s - m') in place, the older
//      acc's rescale r = exp(m - m') (0 while m = -inf), l = r l + sum p;
//   3. values: one thread per (head, dim) (consecutive dims: conflict-free V reads, p broadcast)
//      keeps acc in registers across the blocks: acc = r acc + sum_j p_j v_j, four partial sums
//      over the block's keys.
// The output (acc / l, or [acc | m | l]) is written after the last block. One block is exactly
// the single-chunk arithmetic (r = 0, 0 + x = x); longer windows are the chunked path's online
// softmax, so the results agree with the reference up to summation order. ~10x fewer
// instructions than the chunked path per block, whose key splits and 64-bit index math made a
// 64-key block cost ~7 us (ncu: ~2,800 instructions per warp per task, latency-bound).
// Where a full block's ~3.4 us goes now (H100, llama-3.2-1b, bench/RESULTS.md twenty-fifth
// session): staging 1.2, scores 0.9, softmax 0.35, values 1.0 us; run again warm, 3.1. Its
// dependent chains bound it, not bytes or instruction fetch: a faster block needs shorter
// chains on more warps (tensor cores alone, one chain a warp, measured slower).
// kAttnBlockKeys, kAttnBlockItems and the block's scratch: scratch.h (the loader reads them too;
// attention_split_scratch_bytes() reserves at least the block's scratch).
__device__ __forceinline__ int64_t attention_block_floats(const AttentionShape& a) {
  return attention_block_floats(a.head_dim, a.n_heads, a.n_kv_heads, a.bf16);
}
__device__ __forceinline__ bool attention_block_fits(const OpContext& c, const AttentionShape& a) {
  return attention_block_fits(a.head_dim, a.n_heads, a.n_kv_heads, a.bf16, c.n_threads,
                              c.scratch_bytes);
}

// q_h . k_j over D dims from a K row of shared memory (16-byte vectors swizzled by sw; `first`
// the row's first vector of this KV head): 4 floats a vector (F32) or 8 (BF16 bits).
template <bool BF16>
__device__ __forceinline__ float block_score(const float* qh_f, const uint4* kj, int first, int sw,
                                             int D) {
  const float4* qh = reinterpret_cast<const float4*>(qh_f);
  float s0 = 0.0f, s1 = 0.0f;
  if constexpr (BF16) {
#pragma unroll 4
    for (int v = 0; v < D / 8; ++v) {
      const uint4 k = kj[(first + v) ^ sw];
      const float4 qa = qh[2 * v], qb = qh[2 * v + 1];
      // A bf16 pair's low half is the even element; each is the top half of an f32.
      s0 = fmaf(qa.x, __uint_as_float(k.x << 16), s0);
      s0 = fmaf(qa.y, __uint_as_float(k.x & 0xffff0000u), s0);
      s0 = fmaf(qa.z, __uint_as_float(k.y << 16), s0);
      s0 = fmaf(qa.w, __uint_as_float(k.y & 0xffff0000u), s0);
      s1 = fmaf(qb.x, __uint_as_float(k.z << 16), s1);
      s1 = fmaf(qb.y, __uint_as_float(k.z & 0xffff0000u), s1);
      s1 = fmaf(qb.z, __uint_as_float(k.w << 16), s1);
      s1 = fmaf(qb.w, __uint_as_float(k.w & 0xffff0000u), s1);
    }
  } else {
    const float4* kf = reinterpret_cast<const float4*>(kj);
#pragma unroll 4
    for (int v = 0; v < D / 4; v += 2) {
      const float4 qa = qh[v], qb = qh[v + 1];
      const float4 ka = kf[(first + v) ^ sw], kb = kf[(first + v + 1) ^ sw];
      s0 = fmaf(qa.x, ka.x, s0);
      s0 = fmaf(qa.y, ka.y, s0);
      s0 = fmaf(qa.z, ka.z, s0);
      s0 = fmaf(qa.w, ka.w, s0);
      s1 = fmaf(qb.x, kb.x, s1);
      s1 = fmaf(qb.y, kb.y, s1);
      s1 = fmaf(qb.z, kb.z, s1);
      s1 = fmaf(qb.w, kb.w, s1);
    }
  }
  return s0 + s1;
}

// sum_j p_j v_j[d] over n keys of a V column in shared memory (`stride` elements from key to
// key), four partial sums.
template <typename T>
__device__ __forceinline__ float block_values(const float* ph, const T* vd, int stride, int n) {
  const auto at = [&](int j) {
    if constexpr (std::is_same_v<T, uint16_t>) return bf16_bits_to_float(vd[j * stride]);
    else return vd[j * stride];
  };
  float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (n == kAttnBlockKeys) {  // a full block: a fixed trip count, so the loads issue ahead
#pragma unroll 16
    for (int j = 0; j < kAttnBlockKeys; ++j) part[j & 3] = fmaf(ph[j], at(j), part[j & 3]);
    return (part[0] + part[1]) + (part[2] + part[3]);
  }
  int j = 0;
  for (; j + 4 <= n; j += 4) {
#pragma unroll
    for (int u = 0; u < 4; ++u) part[u] = fmaf(ph[j + u], at(j + u), part[u]);
  }
  for (; j < n; ++j) part[0] = fmaf(ph[j], at(j), part[0]);
  return (part[0] + part[1]) + (part[2] + part[3]);
}

// Block b's rows of the window into a stage at kd ([key][G D] cache elements, V's after K's;
// each KV head's keys are one contiguous run of the cache), K's 16-byte vectors swizzled by
// (key & 7); one cp.async group. Key `skip` (a block-relative index; -1: none) is left out.
template <typename T>
__device__ __forceinline__ void attention_stage_block(int tid, int n_threads,
                                                      const AttentionShape& a, int64_t b,
                                                      uint4* kd, int skip) {
  constexpr int VE = 16 / int(sizeof(T));
  const int D = a.head_dim, DV = D / VE, GDV = a.n_kv_heads * DV;
  const int64_t j0 = b * kAttnBlockKeys;
  const int n = int(a.kv_len - j0 < kAttnBlockKeys ? a.kv_len - j0 : kAttnBlockKeys);
  const int64_t first = attention_window_of(a).position(int32_t(j0));  // the block's first key
  const T* k0 = reinterpret_cast<const T*>(a.k) + first * a.kv_stride;
  const T* v0 = reinterpret_cast<const T*>(a.v) + first * a.kv_stride;
  uint4* vd = kd + kAttnBlockKeys * GDV;
  for (int i = tid; i < n * GDV; i += n_threads) {
    // i < 64 GDV <= 2^14 (attention_block_fits bounds H D by the threads): small_divmod's range.
    const SmallDiv jv = small_divmod(i, GDV);
    const int j = jv.q, v = jv.r, g = small_divmod(v, DV).q;
    if (j == skip) continue;
    const int64_t from = g * a.kv_head_stride + j * D + VE * (v - g * DV);
    cp_async16(smem_address(kd + j * GDV + (v ^ (j & 7))), k0 + from);
    cp_async16(smem_address(vd + i), v0 + from);
  }
  cp_async_commit();
}

// Key j of the first block's stage at kd from F32 rows of the task's KV heads (k_row, v_row:
// G x D each), converted as the cache stores them: the step position's own row, which the
// appending task writes into the stage as it writes the cache.
template <typename T>
__device__ __forceinline__ void attention_stage_row(const OpContext& c, const AttentionShape& a,
                                                    uint4* kd, int j, const float* k_row,
                                                    const float* v_row) {
  constexpr int VE = 16 / int(sizeof(T));
  const int D = a.head_dim, DV = D / VE, GDV = a.n_kv_heads * DV;
  uint4* vd = kd + kAttnBlockKeys * GDV;
  for (int e = c.tid; e < a.n_kv_heads * D; e += c.n_threads) {
    const int v = e / VE, u = e - v * VE;  // a head's D elements are DV whole vectors
    T* kt = reinterpret_cast<T*>(kd + j * GDV + (v ^ (j & 7))) + u;
    T* vt = reinterpret_cast<T*>(vd + j * GDV + v) + u;
    if constexpr (sizeof(T) == 2) {
      *kt = float_to_bf16_bits(k_row[e]);
      *vt = float_to_bf16_bits(v_row[e]);
    } else {
      *kt = k_row[e];
      *vt = v_row[e];
    }
  }
}

// One copy per cache dtype (a.bf16), so neither carries the other's registers.
template <bool BF16>
__device__ void attention_block(const OpContext& c, const AttentionShape& a) {
  using T = std::conditional_t<BF16, uint16_t, float>;  // a cache element (BF16 as its bits)
  const int D = a.head_dim, G = a.n_kv_heads, H = a.n_heads, R = H / G;
  // 16-byte vectors: VE cache elements each (4 F32, 8 BF16); a key's row of the task's KV heads
  // is GDV of them, a head's DV.
  constexpr int VE = 16 / int(sizeof(T));
  const int DV = D / VE, GDV = G * DV;
  uint4* ks = reinterpret_cast<uint4*>(c.scratch);   // [64][GDV], vectors swizzled
  uint4* vs = ks + kAttnBlockKeys * GDV;              // [64][GDV]
  float* qs = reinterpret_cast<float*>(vs + kAttnBlockKeys * GDV);  // [H][D]
  // (ks, vs then point at the block's pair of stages: the first, or the second after rs.)
  float* ps = qs + H * D;                            // [H][kAttnBlockKeys]
  float* ms = ps + H * kAttnBlockKeys;               // [H] running max
  float* ls = ms + H;                                // [H] running sum of p
  float* rs = ls + H;                                // [H] this block's rescale of acc and l
  const bool q_shared = __isShared(a.q);
  const float* q = q_shared ? a.q : qs;
  if (!q_shared)
    for (int i = c.tid; i < H * D / 4; i += c.n_threads)
      cp_async16(smem_address(qs + 4 * i), a.q + 4 * i);
  __builtin_assume(__isShared(q));  // either way: shared-memory loads, not generic ones
  for (int h = c.tid; h < H; h += c.n_threads) {
    ms[h] = neg_inf();
    ls[h] = 0.0f;
  }
  const int warp = c.tid >> 5, lane = c.tid & 31, n_warps = c.n_threads >> 5;
  float acc[kAttnBlockItems];
  // This thread's (head, dim) items: the head (-1: none) and the item's column of a V row
  // (g D + d), worked out once for every block.
  int item_h[kAttnBlockItems], item_v[kAttnBlockItems];
#pragma unroll
  for (int t = 0; t < kAttnBlockItems; ++t) {
    acc[t] = 0.0f;
    const int i = c.tid + t * c.n_threads;
    const SmallDiv hd = small_divmod(i, D);  // i < H D <= kAttnBlockItems * threads <= 2^12
    item_h[t] = i < H * D ? hd.q : -1;
    item_v[t] = small_divmod(hd.q, R).q * D + hd.r;
  }
  const int64_t kv_len = a.kv_len;
  // A window of several blocks stages block b + 1 while block b computes when the scratch holds a
  // second pair of stages (after rs, 16-byte aligned): one staging round trip per window
  // instead of one per block.
  const int64_t n_blocks = kv_len > 0 ? (kv_len + kAttnBlockKeys - 1) / kAttnBlockKeys : 1;
  const int64_t second = (attention_block_floats(a) + 3) / 4 * 4;  // floats: the second pair
  const bool two = n_blocks > 1 &&
                   (second + 2 * kAttnBlockKeys * int64_t(GDV) * 4) * 4 <= c.scratch_bytes;
  uint4* const ks0 = ks;
  uint4* const ks1 = reinterpret_cast<uint4*>(c.scratch + second);
  // (A pair's V follows its K.)
  const auto stage_block = [&](int64_t b, uint4* kd) {
    attention_stage_block<T>(c.tid, c.n_threads, a, b, kd, -1);
  };
  // One pass for an empty window too: it writes the empty result (acc 0, m -inf, l 0).
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int64_t j0 = b * kAttnBlockKeys;
    const int n = int(kv_len - j0 < kAttnBlockKeys ? kv_len - j0 : kAttnBlockKeys);
    ks = two && (b & 1) ? ks1 : ks0;
    vs = ks + kAttnBlockKeys * GDV;
    // 0. This block's rows (one pair: staged here; two: block 0 here, each next block one
    // iteration ahead into the other pair), then the wait for them. The previous readers of the
    // pair restaged here are past the barrier that ended their block. A prestaged block 0 was
    // issued before the task's gate (op_attention_tiles).
    if ((b == 0 && !a.prestaged) || (b > 0 && !two)) stage_block(b, ks);
    if (two && b + 1 < n_blocks) {
      stage_block(b + 1, ks == ks0 ? ks1 : ks0);
      cp_async_wait_group<1>();
    } else {
      cp_async_wait_all();
    }
    consumer_sync(c.n_threads);
    // 1. Scores, head-major: a warp's lanes share a head (q broadcast) and take consecutive keys;
    // item i is (head i / 64, key i % 64) whatever n, so no division sits on the chain.
    static_assert(kAttnBlockKeys == 64, "the items below index keys by shifts");
    for (int i = c.tid; i < H * kAttnBlockKeys; i += c.n_threads) {
      const int h = i >> 6, j = i & 63, g = small_divmod(h, R).q;
      if (j >= n) continue;
      const uint4* kj = ks + j * GDV;
      ps[h * kAttnBlockKeys + j] = block_score<BF16>(q + h * D, kj, g * DV, j & 7, D) * a.scale;
    }
    consumer_sync(c.n_threads);
    // 2. Softmax, a warp a head (n <= 64: two keys a lane).
    for (int h = warp; h < H; h += n_warps) {
      float* ph = ps + h * kAttnBlockKeys;
      const float x0 = lane < n ? ph[lane] : neg_inf();
      const float x1 = lane + 32 < n ? ph[lane + 32] : neg_inf();
      float m = fmaxf(x0, x1);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      const float m_old = ms[h];
      m = fmaxf(m, m_old);
      // exp(-inf - -inf) stays out (an empty window: m = -inf, every p = 0).
      const float p0 = x0 == neg_inf() ? 0.0f : expf(x0 - m);
      const float p1 = x1 == neg_inf() ? 0.0f : expf(x1 - m);
      float l = p0 + p1;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
      if (lane < n) ph[lane] = p0;
      if (lane + 32 < n) ph[lane + 32] = p1;
      // Every lane read ms[h] above; the shuffles' data dependence already orders those reads
      // before lane 0's write, but only a warp barrier says so to racecheck.
      __syncwarp();
      if (lane == 0) {
        const float r = m_old == neg_inf() ? 0.0f : expf(m_old - m);
        ms[h] = m;
        ls[h] = r * ls[h] + l;
        rs[h] = r;
      }
    }
    consumer_sync(c.n_threads);
    // 3. Values: thread (h, d) folds sum_j p[h][j] v[j][g D + d] into its acc.
#pragma unroll
    for (int t = 0; t < kAttnBlockItems; ++t) {
      if (item_h[t] < 0) break;
      const float* ph = ps + item_h[t] * kAttnBlockKeys;
      acc[t] = rs[item_h[t]] * acc[t] + block_values(ph, reinterpret_cast<const T*>(vs) + item_v[t], G * D, n);
    }
    // The next block restages ks, vs and rewrites ps, rs. After the last one nothing is
    // rewritten (the output reads only ms and ls, final since the softmax barrier), so a
    // one-block window keeps the single-block path's three barriers.
    if (b + 1 < n_blocks) consumer_sync(c.n_threads);
  }
  mark_body_end(c);
  // The output, from each thread's acc and the final m, l.
  float* dst = a.out;
  const int width = a.partial ? D + 2 : D;
#pragma unroll
  for (int t = 0; t < kAttnBlockItems; ++t) {
    if (item_h[t] < 0) break;
    const int h = item_h[t], d = c.tid + t * c.n_threads - h * D;
    const float l = ls[h];
    if (a.partial) {
      dst[h * width + d] = acc[t];
      if (d == 0) {
        dst[h * width + D] = ms[h];
        dst[h * width + D + 1] = l;
      }
    } else {
      // An empty window leaves acc = 0, l = 0: attention over nothing is 0.
      dst[h * width + d] = acc[t] * (l > 0.0f ? 1.0f / l : 0.0f);
    }
  }
}

// The fast path's key chunk for this scratch, or 0 when it does not fit (the warp path runs).
// *staged: the chunk also leaves room for its K and V rows (at least kAttnMinStagedKeys keys).
inline constexpr int kAttnMinStagedKeys = 16;
__device__ __forceinline__ int fast_attn_chunk(const OpContext& c, const AttentionShape& a,
                                               bool* staged) {
  const int64_t floats = c.scratch_bytes / int64_t(sizeof(float));
  const int64_t room = floats - fast_attn_fixed_floats(a.n_heads, a.head_dim) - 4;  // 4: alignment
  const int64_t stride = a.n_heads | 1;
  const int64_t staged_chunk = room > 0 ? room / (stride + 2 * int64_t(a.n_kv_heads) * a.head_dim) : 0;
  *staged = staged_chunk >= kAttnMinStagedKeys;
  const int64_t chunk = *staged ? staged_chunk : (room > 0 ? room / stride : 0);
  if (chunk < kAttnMinChunkKeys) return 0;
  return chunk < kAttnChunkKeys ? int(chunk) : kAttnChunkKeys;
}

// The window and head range both attention ops share; fills `a` (pointers to the task's first
// query head and first KV head in cache row 0; the whole kv_len window, which attention_window
// clips once the position is known). Reads only the task record: it runs before the task's
// gate. q: the query rows as given; k / v: the caches. The loader checked every operand
// (attention_tile_check.cpp: the shapes, dtypes, head range, window and output below fit).
__device__ inline void attention_setup(const OpContext& c, AttentionShape& a, int* first_head,
                                       const amk_buffer_t& q, const amk_buffer_t& k,
                                       const amk_buffer_t& v) {
  const amk_params_t& p = c.inst->params;
  // A head range (n_off, N_tile; N_tile 0 = every head) of whole GQA groups: the task reads
  // query heads [n_off, n_off + N_tile) and their KV heads, and its output holds just those.
  const int rep = p.n_heads / p.n_kv_heads;
  const bool ranged = p.N_tile != 0;
  const int first = ranged ? p.n_off : 0, count = ranged ? p.N_tile : p.n_heads;
  // Caches [n_kv_heads, max_seq, head_dim]: each KV head's history is contiguous.
  const int64_t max_seq = k.rank == 3 ? k.shape[1] : 0;
  a = AttentionShape{p.head_dim, count, count / rep, p.head_dim, max_seq * p.head_dim,
                     p.kv_start, p.kv_len, p.scale, (p.flags & kAttnPartial) != 0,
                     k.dtype == AMK_DTYPE_BF16, nullptr, nullptr, nullptr, nullptr};
  a.kv_run = p.kv_stride > 0 ? p.kv_len : 0;
  a.kv_period = p.kv_stride > 0 ? p.kv_stride : 0;
  a.max_seq = int32_t(max_seq);
  // A strided window's keys are all its runs' (without the runtime clip, which recounts them).
  if (a.kv_period > 0 && int64_t(p.kv_start) + p.kv_len <= max_seq)
    a.kv_len = attention_window_of(a).keys();
  const amk_buffer_t& out = out_buf(c, 0);
  const int width = a.partial ? a.head_dim + 2 : a.head_dim;
  // Not partial, a head range may write its slice of a row of every head (the device's copy of
  // amk/op_flags.h attention_flags::writes_head_slice).
  const bool slice = !a.partial && count != p.n_heads &&
                     out.numel == int64_t(p.n_heads) * a.head_dim;
  // A partial may go to its rows of a stack of partials of every head, [S * n_heads, head_dim
  // + 2], slab m_off (attention_flags::writes_partial_stack): COMBINE_GEMV_ADD_TILE reads the
  // stack whole.
  const int64_t stack_slab = int64_t(p.n_heads) * width;
  const bool stack = a.partial && out.numel != int64_t(count) * width && out.numel > 0 &&
                     out.numel % stack_slab == 0;
  // The range's first query head and its first KV head's history (BF16: a.k, a.v hold BF16
  // bits; the offset is in bytes).
  const int64_t head0 = int64_t(first / rep) * a.kv_head_stride * (a.bf16 ? 2 : 4);
  a.q = static_cast<const float*>(q.ptr) + int64_t(first) * a.head_dim;
  a.k = reinterpret_cast<const float*>(static_cast<const char*>(k.ptr) + head0);
  a.v = reinterpret_cast<const float*>(static_cast<const char*>(v.ptr) + head0);
  a.out = static_cast<float*>(out.ptr) +
          (slice ? int64_t(first) * a.head_dim
                 : stack ? int64_t(p.m_off) * stack_slab + int64_t(first) * width : 0);
  *first_head = first;
}

// The runtime window (flags bit 2): the keys written so far, from the step position the task
// read after its gate. 0 or op_fail code 3 (no position).
__device__ __forceinline__ int attention_window(const amk_params_t& p, AttentionShape& a,
                                                int32_t pos) {
  if ((p.flags & kAttnRuntimeWindow) == 0) return 0;
  if (pos < 0) return 3;
  a.kv_len = BasicKvWindow<int32_t>{p.kv_start, p.kv_len, p.kv_stride > 0 ? p.kv_stride : 0,
                                    a.max_seq}
                  .seen(pos);
  return 0;
}

// The attention proper, from a filled shape (q anywhere: global or op scratch). False (nothing
// run) for a strided window that attention_block cannot take: the other paths walk one run.
__device__ inline bool attention_run(const OpContext& c, const AttentionShape& a) {
  const bool vec4 = a.head_dim % 4 == 0 && is_aligned16(a.q) && is_aligned16(a.k) &&
                    is_aligned16(a.v);
  if (vec4 && attention_block_fits(c, a)) {
    a.bf16 ? attention_block<true>(c, a) : attention_block<false>(c, a);
    return true;
  }
  if (a.kv_period > 0) return false;
  // BF16 caches: the 64-key blocks or the warp path (the chunked path reads F32 rows only).
  if (a.bf16) {
    attention_tile_impl<1, 8, 1, uint16_t>(c, a);
    return true;
  }
  bool staged = false;
  const int chunk = vec4 ? fast_attn_chunk(c, a, &staged) : 0;
  if (chunk > 0)
    attention_tile_fast(c, a, chunk, staged);
  else
    attention_tile_impl<1, 8, 1>(c, a);  // one float per lane per 32 dims: any head_dim <= 256
  return true;
}

// ATTENTION_TILE's operands into `a`.
__device__ inline void attention_tile_operands(const OpContext& c, AttentionShape& a) {
  int first = 0;
  attention_setup(c, a, &first, in_buf(c, 0), in_buf(c, 1), in_buf(c, 2));
}

// ROPE_KV_ATTENTION_TILE (24): the prologue of src/vm/reference/ops/attention.cpp's
// op_rope_kv_attention_tile, then the attention above with q read from op scratch.
//   [q_s: the task's query heads, count * head_dim floats][cos | sin: head_dim doubles]
//   [k_s: its KV heads' new row, kvc * head_dim floats][the attention's own scratch]
// Each row (head) is normed by one warp (flags bit 3, warp_rms_inv: RMSNORM's formula), each
// rotate-half pair by one thread (rope_inv_freqs before the gate, rope_angles_at and
// rope_rotate after it: op_rope's arithmetic); the task whose window holds the step's position
// writes its KV heads' row of both caches, which its own attention then reads back (ordered by
// the barrier).
// Extra op_fail codes: 4 the step's position past the cache's rows, 6 a non-finite inv_freq
// entry (as ROPE_FREQ refuses it); the rest the loader checks (attention_tile_check.cpp).
inline constexpr int32_t kAttnHeadNorm = AMK_ATTN_FLAG_HEAD_NORM;
inline constexpr int32_t kAttnRopeTable = AMK_ATTN_FLAG_ROPE_TABLE;

// ROPE_KV_ATTENTION_TILE's operands, worked out before the task's gate (they read only the task
// record and constant operands).
struct RopeKvOperands {
  int first = 0;
  int kv0 = 0;              // the first KV head: first / (n_heads / n_kv_heads)
  bool async_rows = false;  // q, k, v rows F32 and 16-byte aligned: staged by cp.async
  const amk_buffer_t* q_norm = nullptr;
  const amk_buffer_t* k_norm = nullptr;
  const amk_buffer_t* inv_freq = nullptr;
  int64_t pro = 0;  // floats of op scratch the prologue takes
};
// Its rows (inputs q, k, v) and the caches it appends to (outputs 1, 2), from the staged record.
struct RopeKvBuffers {
  const amk_buffer_t &q, &k, &v, &kc, &vc;
};
__device__ __forceinline__ RopeKvBuffers rope_kv_buffers(const OpContext& c) {
  return {in_buf(c, 0), in_buf(c, 1), in_buf(c, 2), out_buf(c, 1), out_buf(c, 2)};
}
inline constexpr int kRopeKvFail = AMK_OP_ROPE_KV_ATTENTION_TILE * 16;  // op_fail code base
// The scratch of the prologue: [q_s][cos | sin: head_dim doubles][k_s][v_s], and with the
// head norm [q_norm weight][k_norm weight] (rope_kv_prologue_floats).
struct RopeKvScratch {
  float* q_s;
  double* cos_t;
  double* sin_t;
  float* k_s;
  float* v_s;
  float* qn_w;  // the head norm's weights as F32 (flags bit 3 only)
  float* kn_w;
};
__device__ __forceinline__ RopeKvScratch rope_kv_scratch(const OpContext& c, int count, int kvc,
                                                         int D) {
  RopeKvScratch r;
  r.q_s = c.scratch;
  r.cos_t = reinterpret_cast<double*>(c.scratch + (int64_t(count) * D + 3) / 4 * 4);
  r.sin_t = r.cos_t + D / 2;
  r.k_s = reinterpret_cast<float*>(r.sin_t + D / 2);
  r.v_s = r.k_s + (int64_t(kvc) * D + 3) / 4 * 4;
  r.qn_w = r.v_s + (int64_t(kvc) * D + 3) / 4 * 4;
  r.kn_w = r.qn_w + (D + 3) / 4 * 4;
  return r;
}

// Before the gate: the operands (the loader checked them: attention_tile_check.cpp), and the
// RoPE frequencies (ROPE's default costs a double pow per pair) into the cosine slots of the
// table, which rope_angles_at turns into cos / sin once the position is known; thread t owns
// pairs t, t + n_threads, ... in both.
__device__ inline void rope_kv_operands(const OpContext& c, AttentionShape& a, RopeKvOperands& o) {
  const amk_params_t& p = c.inst->params;
  const auto [q, k, v, kc, vc] = rope_kv_buffers(c);
  const bool norm = (p.flags & kAttnHeadNorm) != 0, table = (p.flags & kAttnRopeTable) != 0;
  attention_setup(c, a, &o.first, q, kc, vc);
  const int D = a.head_dim, half = D / 2;
  o.q_norm = norm ? &in_buf(c, 5) : nullptr;
  o.k_norm = norm ? &in_buf(c, 6) : nullptr;
  o.inv_freq = table ? &in_buf(c, c.inst->n_inputs - 1) : nullptr;
  o.pro = rope_kv_prologue_floats(a.n_heads, a.n_kv_heads, D, norm);
  // The rows by cp.async (every copy in flight at once, beside the step position's read) where
  // they are F32 and 16-byte aligned at the task's first head; otherwise by loads.
  const int kv0 = o.kv0 = o.first / (p.n_heads / p.n_kv_heads);
  o.async_rows = q.dtype == AMK_DTYPE_F32 && k.dtype == AMK_DTYPE_F32 &&
                 v.dtype == AMK_DTYPE_F32 && D % 4 == 0 &&
                 is_aligned16(static_cast<const float*>(q.ptr) + int64_t(o.first) * D) &&
                 is_aligned16(static_cast<const float*>(k.ptr) + int64_t(kv0) * D) &&
                 is_aligned16(static_cast<const float*>(v.ptr) + int64_t(kv0) * D);
  // The previous task of this CTA is past its end barrier, so the scratch is free already.
  const RopeKvScratch sc = rope_kv_scratch(c, a.n_heads, a.n_kv_heads, D);
  // The reads below are the helpers' (warps 1..): warp 0 goes straight to the gate, whose
  // poll a load of thread 0's would hold back by its round trip. A non-finite table entry is
  // seen by the threads that read it only: they flag the error and the task still passes its
  // gate on every thread (the end-of-task vote leaves).
  if (c.tid < 32) return;
  const int ht = c.tid - 32, hn = c.n_threads - 32;  // a helper's index among the helpers
  if (!rope_inv_freqs(ht, hn, o.inv_freq, p.theta, half, sc.cos_t)) op_fail(c, kRopeKvFail + 6);
  // The head norm's weights (constants) into op scratch now, so that the norm after the gate
  // reads shared memory: read where they are used, they were a dependent L2 round trip on the
  // layer's chain. The gate's consumer barrier orders these writes before every reader.
  if (norm) {
    for (int d = ht; d < D; d += hn) {
      sc.qn_w[d] = load_f(*o.q_norm, d);
      sc.kn_w[d] = load_f(*o.k_norm, d);
    }
  }
}

// Right after the gate, before the step position is read: the rows' copies (async_rows), so
// that the position's round trip and theirs overlap.
__device__ __forceinline__ void rope_kv_issue_rows(const OpContext& c, const AttentionShape& a,
                                                   const RopeKvOperands& o) {
  if (!o.async_rows) return;
  const auto [q, k, v, kc, vc] = rope_kv_buffers(c);
  const int D = a.head_dim, count = a.n_heads, kvc = a.n_kv_heads;
  const int kv0 = o.kv0;
  const RopeKvScratch sc = rope_kv_scratch(c, count, kvc, D);
  const float* q_src = static_cast<const float*>(q.ptr) + int64_t(o.first) * D;
  const float* k_src = static_cast<const float*>(k.ptr) + int64_t(kv0) * D;
  const float* v_src = static_cast<const float*>(v.ptr) + int64_t(kv0) * D;
  for (int i = c.tid; i < count * D / 4; i += c.n_threads)
    cp_async16(smem_address(sc.q_s + 4 * i), q_src + 4 * i);
  for (int i = c.tid; i < kvc * D / 4; i += c.n_threads) {
    cp_async16(smem_address(sc.k_s + 4 * i), k_src + 4 * i);
    cp_async16(smem_address(sc.v_s + 4 * i), v_src + 4 * i);
  }
  cp_async_commit();
}

// After the gate (steps 1-4): q (and, for the task whose window holds the step's position, the
// new K/V row) normed, rotated and appended; fills `a` with q in op scratch and `ac` with the
// scratch after the prologue's. `angles_ready`: rope_angles_at already ran (before the gate).
// False after op_fail.
__device__ inline bool rope_kv_prologue(const OpContext& c, AttentionShape& a, OpContext& ac,
                                        const RopeKvOperands& o, bool angles_ready) {
  const amk_params_t& p = c.inst->params;
  const auto [q, k, v, kc, vc] = rope_kv_buffers(c);
  const bool norm = o.q_norm != nullptr;
  const int D = a.head_dim, half = D / 2, count = a.n_heads, kvc = a.n_kv_heads;
  const int kv0 = o.kv0;
  const RopeKvScratch sc = rope_kv_scratch(c, count, kvc, D);
  float* q_s = sc.q_s;
  float* k_s = sc.k_s;
  const int64_t pos = c.pos;
  // The window's index of the step's position (-1: another task's row).
  const int64_t j = attention_window_of(a).index_of(int32_t(pos));
  const bool append = j >= 0;
  if (append && pos >= kc.shape[1]) {
    op_fail(c, kRopeKvFail + 4);
    return false;
  }
  const int rows = count + (append ? kvc : 0);  // q heads, then (appending) the KV heads

  // 1. The rows (already in flight with async_rows) and the angles.
  if (!o.async_rows) {
    for (int e = c.tid; e < count * D; e += c.n_threads) q_s[e] = load_f(q, int64_t(o.first) * D + e);
    if (append)
      for (int e = c.tid; e < kvc * D; e += c.n_threads) k_s[e] = load_f(k, int64_t(kv0) * D + e);
  }
  if (!angles_ready) rope_angles_at(c.tid, c.n_threads, float(pos), half, sc.cos_t, sc.sin_t);
  if (o.async_rows) cp_async_wait_all();
  consumer_sync(c.n_threads);
  // 2. Per-head RMSNORM (Qwen3's q_norm / k_norm): one warp a row.
  if (norm) {
    const int warp = c.tid >> 5, lane = c.tid & 31, n_warps = c.n_threads >> 5;
    for (int r = warp; r < rows; r += n_warps) {
      float* x = r < count ? q_s + int64_t(r) * D : k_s + int64_t(r - count) * D;
      const float* w = r < count ? sc.qn_w : sc.kn_w;
      const float inv = warp_rms_inv(x, D, p.eps, lane);
      for (int d = lane; d < D; d += 32) x[d] = x[d] * inv * w[d];
    }
    consumer_sync(c.n_threads);
  }
  // 3. RoPE in place, one thread a pair; 4. the new row into both caches.
  for (int e = c.tid; e < rows * half; e += c.n_threads) {
    const int r = e / half, i = e - r * half;
    float* x = r < count ? q_s + int64_t(r) * D : k_s + int64_t(r - count) * D;
    const float2 rot = rope_rotate(x[i], x[i + half], sc.cos_t[i], sc.sin_t[i]);
    x[i] = rot.x;
    x[i + half] = rot.y;
  }
  if (append) {
    consumer_sync(c.n_threads);  // k_s rotated
    // Position pos of each of the task's KV heads' histories.
    const int64_t row = (int64_t(kv0) * kc.shape[1] + pos) * D;
    for (int e = c.tid; e < kvc * D; e += c.n_threads) {
      const int g = e / D;
      const int64_t at = row + g * a.kv_head_stride + (e - g * D);
      store_f(kc, at, k_s[e]);
      store_f(vc, at, o.async_rows ? sc.v_s[e] : load_f(v, int64_t(kv0) * D + e));
    }
    if (a.prestaged && j < kAttnBlockKeys) {
      // The prestaged first block holds every other key already; this one goes in from here
      // (async_rows: a prestaged task's rows are F32 and in scratch). A row of a later block is
      // staged from the cache written above, as without a prestage.
      uint4* stage = reinterpret_cast<uint4*>(c.scratch + o.pro);
      if (a.bf16)
        attention_stage_row<uint16_t>(c, a, stage, int(j), k_s, sc.v_s);
      else
        attention_stage_row<float>(c, a, stage, int(j), k_s, sc.v_s);
    }
    __threadfence_block();  // the attention below reads these rows back
  }
  consumer_sync(c.n_threads);
  // The attention reads q from op scratch and gets the scratch after the prologue's.
  ac.scratch = c.scratch + o.pro;
  ac.scratch_bytes = c.scratch_bytes - int(4 * o.pro);
  a.q = q_s;
  return true;
}

// ATTENTION_TILE and ROPE_KV_ATTENTION_TILE around the task's gate (`pass_gate()`, as op_gemv):
// the checks (and RoPE's frequencies) before it, then the step position, ROPE_KV's prologue and
// ONE inlined attention_run for both. The megakernel's code comes back through an L2 that the
// weight stream keeps busy on every task switch, so a second inlined copy of the attention
// (~60 KB of SASS) costs instruction fetches, not just binary size.
template <typename Gate>
__device__ inline void op_attention_tiles(const OpContext& c0, Gate&& pass_gate) {
  AttentionShape a;
  RopeKvOperands o;
  const bool rope = c0.inst->op == AMK_OP_ROPE_KV_ATTENTION_TILE;
  if (rope)
    rope_kv_operands(c0, a, o);
  else
    attention_tile_operands(c0, a);
  OpContext c = c0;
  // The scratch after the prologue's, where attention_run's block stages go.
  OpContext ac = c;
  ac.scratch = c.scratch + o.pro;
  ac.scratch_bytes = c.scratch_bytes - int(4 * o.pro);
  // The window's first 64-key block can be staged before the gate, but for the step position's
  // own row, which this task writes into the stage after its gate: every other row was written
  // in an earlier step, visible for the reason the position is. Only where attention_run takes
  // attention_block with this scratch (q will be q_s, 16-byte aligned) and the rows are F32 in
  // scratch (async_rows: the stage row is built from them). A function of the position alone,
  // so every thread decides it alike.
  const auto prestages = [&](const AttentionShape& w) {
    return rope && o.async_rows && w.kv_len > 0 && w.head_dim % 4 == 0 && is_aligned16(w.k) &&
           is_aligned16(w.v) && attention_block_fits(ac, w);
  };
  // Before the gate, where the position may be read (OpContext::pos_visible): the helpers
  // (warps 1..) read it, work out RoPE's angles (the double sincos was on the layer's chain)
  // and issue the prestage, so its round trip overlaps the wait instead of following the
  // rows' after it. Warp 0 only polls.
  const bool early = rope && c0.pos_visible;
  bool helped = false;  // this thread read the position and the window before the gate
  if (early && c.tid >= 32) {
    c.pos = step_position(*c.prog);
    // A bad position: the helper reads it again after the gate, where everyone fails alike.
    helped = attention_window(c.inst->params, a, c.pos) == 0;
    if (helped) {
      const int ht = c.tid - 32, hn = c.n_threads - 32;  // as in rope_kv_operands
      const RopeKvScratch sc = rope_kv_scratch(c, a.n_heads, a.n_kv_heads, a.head_dim);
      rope_angles_at(ht, hn, float(c.pos), a.head_dim / 2, sc.cos_t, sc.sin_t);
      a.prestaged = prestages(a);
      if (a.prestaged) {
        const int64_t j = attention_window_of(a).index_of(c.pos);  // c.pos: int32
        const int skip = j >= 0 && j < kAttnBlockKeys ? int(j) : -1;
        uint4* stage = reinterpret_cast<uint4*>(ac.scratch);
        if (a.bf16)
          attention_stage_block<uint16_t>(ht, hn, a, 0, stage, skip);
        else
          attention_stage_block<float>(ht, hn, a, 0, stage, skip);
      }
    }
  }
  if (!pass_gate()) return;
  if (rope) rope_kv_issue_rows(c, a, o);
  if (!helped) {
    // The previous step's sink wrote the position: after the gate.
    c.pos = step_position(*c.prog);
    if (const int err = attention_window(c.inst->params, a, c.pos)) {
      op_fail(c, c.inst->op * 16 + err);
      return;
    }
    a.prestaged = early && prestages(a);
  }
  if (rope && !rope_kv_prologue(c, a, ac, o, early)) return;
  mark_body_begin(c);
  if (!attention_run(ac, a)) op_fail(c, c.inst->op * 16 + 2);
}

// ATTENTION_COMBINE around the task's gate (`pass_gate()`, as op_gemv): the checks before it;
// then the helpers (warps 1..) run the merge below once on nothing (no load, no
// store) before the gate, so that its instructions are in the SM's cache when the partials
// arrive. The combine runs on an SM once a layer, after GEMV and attention code: its first
// pass after the gate took 2.2 µs for one round trip of loads that a GEMV tile's x row takes
// in 0.86 (bench/RESULTS.md, thirtieth session). One copy of the merge's code serves both
// passes (a loop of two, never unrolled), so the warm pass fetches what the real one runs.
template <typename Gate>
__device__ inline void op_attention_combine(const OpContext& c, Gate&& pass_gate) {
  const amk_params_t& p = c.inst->params;
  constexpr int code = AMK_OP_ATTENTION_COMBINE * 16;
  const amk_buffer_t& out = out_buf(c, 0);
  const int n_parts = c.inst->n_inputs;
  const int64_t pn = in_buf(c, 0).numel;
  // A head range (n_off, N_tile; N_tile 0 = none): the partials hold N_tile heads, merged into
  // heads [n_off, n_off + N_tile) of the one-row output.
  const bool ranged = p.N_tile != 0;
  // flags bit 1: the merge stays a partial [acc | m | l] (needs head_dim, no head range).
  if ((p.flags & ~kAttnPartial) != 0) return op_fail(c, code + 1);
  const bool partial = (p.flags & kAttnPartial) != 0;
  if (partial && (ranged || p.head_dim < 1 || out.numel != pn)) return op_fail(c, code + 1);
  const int64_t on = ranged    ? int64_t(p.N_tile) * p.head_dim
                     : partial ? pn / (p.head_dim + 2) * p.head_dim
                               : out.numel;
  // head_dim / n_heads are optional (0 when absent): the sizes determine them.
  int64_t n_heads = p.n_heads > 0 ? p.n_heads : (pn - on) / 2;
  int64_t head_dim = p.head_dim > 0 ? p.head_dim : (n_heads > 0 ? on / n_heads : 0);
  if (p.n_heads <= 0 && p.head_dim > 0) n_heads = on / head_dim;
  if (ranged) n_heads = p.N_tile;
  if (n_parts < 1 || n_parts > AMK_MAX_INPUTS || n_heads < 1 || head_dim < 1 ||
      n_heads * head_dim != on || n_heads * (head_dim + 2) != pn)
    return op_fail(c, code + 1);
  if (ranged ? (p.head_dim < 1 || p.n_off < 0 || (int64_t(p.n_off) + p.N_tile) * head_dim > out.numel)
             : p.n_off != 0)
    return op_fail(c, code + 1);
  if (out.dtype != AMK_DTYPE_F32) return op_fail(c, code + 2);
  const float* parts[AMK_MAX_INPUTS];
  // Unrolled over the input cap with constant indices, so `parts` lives in registers.
#pragma unroll
  for (int i = 0; i < AMK_MAX_INPUTS; ++i) {
    if (i >= n_parts) break;
    const amk_buffer_t& b = in_buf(c, i);
    if (b.numel != pn) return op_fail(c, code + 1);
    if (b.dtype != AMK_DTYPE_F32) return op_fail(c, code + 2);
    parts[i] = static_cast<const float*>(b.ptr);
  }
  const int hd = int(head_dim);
  float* o = static_cast<float*>(out.ptr) + (ranged ? int64_t(p.n_off) * hd : 0);
  // Output element e of head h = e / width, d = e % width: an acc (d < head_dim), or with a
  // partial output the head's merged m (d = head_dim) and l (d = head_dim + 1).
  const int width = partial ? hd + 2 : hd;
  const int64_t n_out = n_heads * width;
  // A thread merges kCombineElems output elements per pass and issues all their partials'
  // loads (acc, m, l of every shard) before using any: the shards were just written by other
  // SMs, so each load is an L2 round trip and only many in flight hide it.
  constexpr int kCombineElems = 1;
  const int64_t step = int64_t(c.n_threads) * kCombineElems;
  // Pass 0 (the helpers, before the gate): nothing loaded, nothing stored. Pass 1:
  // after the gate, every thread.
#pragma unroll 1
  for (int pass = c.tid >= 32 ? 0 : 1; pass < 2; ++pass) {
    const bool live = pass == 1;
    if (live && !pass_gate()) return;
    for (int64_t e0 = c.tid; e0 < n_out; e0 += step) {
      float acc_p[kCombineElems][AMK_MAX_INPUTS], m_p[kCombineElems][AMK_MAX_INPUTS],
          l_p[kCombineElems][AMK_MAX_INPUTS];
#pragma unroll
      for (int k = 0; k < kCombineElems; ++k) {
        const int64_t e = e0 + int64_t(k) * c.n_threads;
        const int64_t h = e / width;
        const int64_t base = h * (hd + 2);
        const int64_t d = e - h * width;
#pragma unroll
        for (int i = 0; i < AMK_MAX_INPUTS; ++i) {
          const bool ok = live && i < n_parts && e < n_out;
          acc_p[k][i] = ok && d < hd ? parts[i][base + d] : 0.0f;
          m_p[k][i] = ok ? parts[i][base + hd] : 0.0f;
          // The warm pass's shards all count (l = 1), so it runs the merge's whole arithmetic.
          l_p[k][i] = ok ? parts[i][base + hd + 1] : (live ? 0.0f : 1.0f);
        }
      }
#pragma unroll
      for (int k = 0; k < kCombineElems; ++k) {
        const int64_t e = e0 + int64_t(k) * c.n_threads;
        if (e >= n_out) break;
        const int d = int(e - (e / width) * width);
        // merge_partials' arithmetic, over the registers: shards with l <= 0 are skipped.
        const float merged =
            merge_partials<AMK_MAX_INPUTS>(n_parts, hd, d, partial, [&](int part, int i) {
              return i == hd ? m_p[k][part] : (i == hd + 1 ? l_p[k][part] : acc_p[k][part]);
            });
        if (!live) {
          opaque_use(merged);  // the warm pass: computed, never stored
          continue;
        }
        // Profiling: thread 0's first merged element marks its partials' arrival (body begin).
        if (e0 == c.tid) mark_body_begin(c);
        o[e] = merged;
      }
    }
  }
  mark_body_end(c);  // thread 0's stores issued; the end barrier and the signal follow
}

}  // namespace amk::cuda
