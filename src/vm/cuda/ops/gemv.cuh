// The GEMV family: GEMV_TILE (5), RMSNORM_GEMV_TILE (20), SILU_MUL_GEMV_TILE (21),
// GEMV_ADD_TILE (22) and SILU_MUL_GEMV_ADD_TILE (23), as src/vm/reference/ops/matmul.cpp (fp
// weights) and fused_gemv.cpp. Each is one prologue (copy / RMSNORM / SILU_MUL) and one epilogue
// (+ bias, + residual) around the same GEMV body.
//
//   1. x (K floats, fp32) is built in shared scratch: a copy of the activation row, RMSNORM of
//      it (norm weight = input 1), or silu(gate) * up. This is the F32 intermediate the reference
//      materialises, so fused and unfused programs round the same way.
//   2. out[r, n_off + j] = dot(x_r, W[n_off + j]) (+ bias[n_off + j]) (+ residual[r, n_off + j]),
//      one weight row per consumer warp at a time, 16-byte weight reads, fp32 accumulation
//      (order differs from the reference's exact sum: fp32 noise, docs/OPCODES.md).
//
// Weights come through the shared-memory ring when ring_tile() says so (the producer warp has
// streamed them there), else straight from global memory with 16-byte non-coherent loads, or
// scalar loads when rows are not 16-byte multiples.
//
// Scratch: 32 floats of reduction space, x (K floats), then the row partials (N_tile floats, or
// N_tile * segments when long rows are split over warps): (K + 32 + N_tile) * 4 bytes at least.
#pragma once

#include <cstdint>

#include "vm/cuda/primitives.cuh"
#include "vm/cuda/sync.cuh"
#include "vm/cuda/weight_ring.cuh"

namespace amk::cuda {

namespace gemv_detail {

// op_fail codes (the host reports 0x100 + code).
enum GemvError : int {
  kBadParams = 20,       // K, N_tile or n_off out of range, or a quantized qdtype
  kBadX = 21,            // x's last dimension is not K
  kBadWeight = 22,       // W not [N, K] F32/BF16, or the tile leaves it
  kBadBias = 23,         // bias numel != N
  kBadOutput = 24,       // output too narrow, or a different row count than x
  kBadFusedOperand = 25, // norm weight / up / residual of the wrong size, hidden != K
  kScratchTooSmall = 26, // the layout's scratch cannot hold x
};

constexpr int kReduceFloats = 32;  // block_sum's space at the head of scratch

struct Gemv {
  const amk_buffer_t* x;       // input 0 (gate for SILU_MUL_GEMV_TILE)
  const amk_buffer_t* aux;     // norm weight / up; null otherwise
  const amk_buffer_t* W;
  const amk_buffer_t* bias;    // null: none
  const amk_buffer_t* residual;  // GEMV_ADD_TILE only
  const amk_buffer_t* out;
  int K, N_tile, n_off;
  int64_t rows, out_cols;
  bool w_bf16;
};

// How x sits in shared memory. Linear: x[k] at xs[k]. Split (BF16 weights, K % 8 == 0): the
// eight floats a 16-byte weight vector v meets, x[8v .. 8v+7], are float4 v of plane a
// (x[8v .. 8v+3]) and float4 v of plane b (x[8v+4 .. 8v+7], K / 8 float4s later). A warp's lanes
// (consecutive v) then read two contiguous 512-byte runs; the linear layout had them read 1 KiB
// at a 32-byte stride, two shared-memory wavefronts per eight lanes (a 2-way bank conflict on
// every x read of the GEMV's inner loop, which made the consumers, not HBM, the limit: ~25 GB/s
// per SM).
struct XLayout {
  bool split = false;
  int K8 = 0;  // K / 8 when split
  __device__ __forceinline__ int slot4(int v) const {  // float4 index of x[4v .. 4v+3]
    return split ? (v & 1) * K8 + (v >> 1) : v;
  }
  __device__ __forceinline__ int index(int k) const { return 4 * slot4(k >> 2) + (k & 3); }
};
__device__ __forceinline__ XLayout x_layout(const Gemv& g) {
  XLayout l;
  l.split = g.w_bf16 && g.K % 8 == 0;
  l.K8 = g.K / 8;
  return l;
}
// Where a lane's x vectors start: bf16 weight vector v meets a[v] and b[v]; f32 vector v, a[v].
struct XView {
  const float4* a;
  const float4* b;
  __device__ __forceinline__ XView at(int v0) const { return {a + v0, b + v0}; }
};
__device__ __forceinline__ XView x_view(const float* xs, const XLayout& l) {
  const float4* xs4 = reinterpret_cast<const float4*>(xs);
  return {xs4, xs4 + l.K8};
}

__device__ __forceinline__ int64_t last_dim(const amk_buffer_t& b) {
  return b.rank >= 1 ? b.shape[b.rank - 1] : b.numel;
}

// Gathers the operands and checks them as the reference does. 0 or an error code.
__device__ __forceinline__ int resolve(const OpContext& c, Gemv& g) {
  const amk_instruction_t& inst = *c.inst;
  const amk_params_t& p = inst.params;
  const int op = inst.op;
  const int wi = gemv_weight_input(op);
  // The residual follows the weight in the ops that add one; the optional bias comes last.
  const bool adds = op == AMK_OP_GEMV_ADD_TILE || op == AMK_OP_SILU_MUL_GEMV_ADD_TILE;
  const int bias_index = wi + (adds ? 2 : 1);
  if (p.qdtype < 0 || p.qdtype > AMK_DTYPE_F8E5M2) return kBadParams;  // quantized: no device code
  if (p.K < 1 || p.N_tile < 1 || p.n_off < 0) return kBadParams;
  if (inst.n_inputs <= wi || inst.n_outputs < 1) return kBadParams;
  if (adds && inst.n_inputs < wi + 2) return kBadFusedOperand;
  g.K = p.K;
  g.N_tile = p.N_tile;
  g.n_off = p.n_off;
  g.x = &in_buf(c, 0);
  const bool silu = op == AMK_OP_SILU_MUL_GEMV_TILE || op == AMK_OP_SILU_MUL_GEMV_ADD_TILE;
  g.aux = (op == AMK_OP_RMSNORM_GEMV_TILE || silu) ? &in_buf(c, 1) : nullptr;
  g.W = &in_buf(c, wi);
  g.bias = inst.n_inputs > bias_index ? &in_buf(c, bias_index) : nullptr;
  g.residual = adds ? &in_buf(c, wi + 1) : nullptr;
  g.out = &out_buf(c, 0);

  if (last_dim(*g.x) != g.K) return kBadX;
  g.rows = g.x->numel / g.K;
  const amk_buffer_t& W = *g.W;
  if (W.rank != 2 || W.shape[1] != g.K || int64_t(g.n_off) + g.N_tile > W.shape[0])
    return kBadWeight;
  if (W.dtype != AMK_DTYPE_BF16 && W.dtype != AMK_DTYPE_F32) return kBadWeight;
  g.w_bf16 = W.dtype == AMK_DTYPE_BF16;
  if (g.bias && g.bias->numel != W.shape[0]) return kBadBias;
  g.out_cols = last_dim(*g.out);
  if (g.out_cols < int64_t(g.n_off) + g.N_tile || g.out->numel / g.out_cols != g.rows)
    return kBadOutput;
  if (op == AMK_OP_RMSNORM_GEMV_TILE &&
      (p.hidden != g.K || g.aux->numel != g.K || !(p.eps >= 0.0f)))
    return kBadFusedOperand;
  if (silu && g.aux->numel != g.x->numel) return kBadFusedOperand;
  if (g.residual && g.residual->numel != g.out->numel) return kBadFusedOperand;
  // x, the reductions and one partial per output row (gemv_from_ring may use more if present).
  if ((int64_t(g.K) + kReduceFloats + g.N_tile) * 4 > c.scratch_bytes) return kScratchTooSmall;
  return 0;
}

// 4 consecutive elements [4 v, 4 v + 4) of a float buffer (F32: one 16-byte load, BF16: one
// 8-byte load). The caller checked vec4_ok().
__device__ __forceinline__ float4 load_f4(const amk_buffer_t& b, int64_t v) {
  if (b.dtype == AMK_DTYPE_BF16) {
    const uint2 w = static_cast<const uint2*>(b.ptr)[v];
    return make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u),
                       __uint_as_float(w.y << 16), __uint_as_float(w.y & 0xffff0000u));
  }
  return static_cast<const float4*>(b.ptr)[v];
}
// load_f4 may read b from element `base` on: F32/BF16, aligned for the vector width.
__device__ __forceinline__ bool vec4_ok(const amk_buffer_t& b, int64_t base) {
  const int64_t bytes = b.dtype == AMK_DTYPE_BF16 ? 2 : 4;
  return (b.dtype == AMK_DTYPE_F32 || b.dtype == AMK_DTYPE_BF16) && base % 4 == 0 &&
         reinterpret_cast<uintptr_t>(b.ptr) % uintptr_t(4 * bytes) == 0;
}

// xs4[v] = f(a[v], b[v]) for the K / 4 vectors of one row, every load of a batch issued before
// any is used: the activations were just written by other SMs, so each load is an L2 round trip
// and a dependent one per element (what a plain loop compiles to) would cost more than the tile.
template <typename Combine>
__device__ __forceinline__ void build_x_vec4(const OpContext& c, const amk_buffer_t& a, int64_t a0,
                                             const amk_buffer_t& b, int64_t b0, int n4, float4* xs4,
                                             const XLayout& layout, Combine f) {
  constexpr int U = 4;
  for (int v0 = c.tid; v0 < n4; v0 += U * c.n_threads) {
    float4 x[U], y[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int v = v0 + u * c.n_threads;
      if (v < n4) {
        x[u] = load_f4(a, a0 + v);
        y[u] = load_f4(b, b0 + v);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int v = v0 + u * c.n_threads;
      if (v < n4)
        xs4[layout.slot4(v)] = make_float4(f(x[u].x, y[u].x), f(x[u].y, y[u].y),
                                           f(x[u].z, y[u].z), f(x[u].w, y[u].w));
    }
  }
}

// Step 1: activation row r -> xs (K floats in shared memory, in `layout`). Ends with a consumer
// barrier.
__device__ __forceinline__ void build_x(const OpContext& c, const Gemv& g, int64_t r, float* xs,
                                        float* red, const XLayout& layout) {
  const int op = c.inst->op;
  const int K = g.K;
  const int64_t base = r * K;
  float4* xs4 = reinterpret_cast<float4*>(xs);
  const bool vec = K % 4 == 0 && vec4_ok(*g.x, base) &&
                   (g.aux == nullptr || vec4_ok(*g.aux, op == AMK_OP_RMSNORM_GEMV_TILE ? 0 : base));
  if (op == AMK_OP_SILU_MUL_GEMV_TILE || op == AMK_OP_SILU_MUL_GEMV_ADD_TILE) {
    if (vec)
      build_x_vec4(c, *g.x, base / 4, *g.aux, base / 4, K / 4, xs4, layout,
                   [](float gate, float up) { return silu(gate) * up; });
    else
      for (int k = c.tid; k < K; k += c.n_threads)
        xs[layout.index(k)] = silu(load_f(*g.x, base + k)) * load_f(*g.aux, base + k);
  } else {
    if (vec)
      build_x_vec4(c, *g.x, base / 4, *g.x, base / 4, K / 4, xs4, layout,
                   [](float x, float) { return x; });
    else
      for (int k = c.tid; k < K; k += c.n_threads) xs[layout.index(k)] = load_f(*g.x, base + k);
    if (op == AMK_OP_RMSNORM_GEMV_TILE) {
      consumer_sync(c.n_threads);  // the copy above strides differently from the sum below
      // rms_inv()'s sum (thread j adds x[j], x[j + n], ... in that order, then block_sum), read
      // through the layout, so the fused norm rounds exactly as RMSNORM does.
      float s = 0.0f;
      for (int k = c.tid; k < K; k += c.n_threads) {
        const float x = xs[layout.index(k)];
        s += x * x;
      }
      s = block_sum(s, red, c.tid, c.n_threads);
      const float inv = rsqrtf(s / float(K) + c.inst->params.eps);
      if (vec) {
        // In place: each thread rewrites only the vectors it reads.
        for (int v = c.tid; v < K / 4; v += c.n_threads) {
          const float4 w = load_f4(*g.aux, v);
          const float4 x = xs4[layout.slot4(v)];
          xs4[layout.slot4(v)] =
              make_float4(x.x * inv * w.x, x.y * inv * w.y, x.z * inv * w.z, x.w * inv * w.w);
        }
      } else {
        for (int k = c.tid; k < K; k += c.n_threads)
          xs[layout.index(k)] = xs[layout.index(k)] * inv * load_f(*g.aux, k);
      }
    }
  }
  consumer_sync(c.n_threads);
}

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// 16 bytes of weights (8 bf16 or 4 f32) against the matching x elements: a (and b for bf16).
template <bool kBf16>
__device__ __forceinline__ float dot16(uint4 w, float4 a, float4 b, float acc) {
  if constexpr (kBf16) {
    acc = fmaf(bf16_lo(w.x), a.x, acc);
    acc = fmaf(bf16_hi(w.x), a.y, acc);
    acc = fmaf(bf16_lo(w.y), a.z, acc);
    acc = fmaf(bf16_hi(w.y), a.w, acc);
    acc = fmaf(bf16_lo(w.z), b.x, acc);
    acc = fmaf(bf16_hi(w.z), b.y, acc);
    acc = fmaf(bf16_lo(w.w), b.z, acc);
    acc = fmaf(bf16_hi(w.w), b.w, acc);
  } else {
    acc = fmaf(__uint_as_float(w.x), a.x, acc);
    acc = fmaf(__uint_as_float(w.y), a.y, acc);
    acc = fmaf(__uint_as_float(w.z), a.z, acc);
    acc = fmaf(__uint_as_float(w.w), a.w, acc);
  }
  return acc;
}
// Weight vector v against x through the view.
template <bool kBf16>
__device__ __forceinline__ float dot16(uint4 w, const XView& xv, int v, float acc) {
  return dot16<kBf16>(w, xv.a[v], kBf16 ? xv.b[v] : make_float4(0.f, 0.f, 0.f, 0.f), acc);
}

// This lane's part of dot(x, row) for a row of n_vec 16-byte vectors (shared or global). From
// global memory four independent loads are in flight per lane (HBM latency); from the ring two
// (shared memory is close). Not unrolled further: the registers belong to the whole megakernel.
template <bool kBf16, bool kGlobal>
__device__ __forceinline__ float lane_dot(const uint4* row, int n_vec, const XView& xs, int lane) {
  constexpr int kInFlight = kGlobal ? 4 : 2;
  float acc[kInFlight];
#pragma unroll
  for (int u = 0; u < kInFlight; ++u) acc[u] = 0.0f;
  int v = lane;
#pragma unroll 1
  for (; v + 32 * (kInFlight - 1) < n_vec; v += 32 * kInFlight) {
    uint4 w[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) w[u] = kGlobal ? load_stream16(row + v + 32 * u) : row[v + 32 * u];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) acc[u] = dot16<kBf16>(w[u], xs, v + 32 * u, acc[u]);
  }
#pragma unroll 1
  for (; v < n_vec; v += 32)
    acc[0] = dot16<kBf16>(kGlobal ? load_stream16(row + v) : row[v], xs, v, acc[0]);
  float sum = 0.0f;
#pragma unroll
  for (int u = 0; u < kInFlight; ++u) sum += acc[u];
  return sum;
}

// Two rows against the same x vectors: each x load serves both (half the x traffic of two
// lane_dot calls). row_b null: one row (.y stays 0). Shared-memory rows only.
template <bool kBf16>
__device__ __forceinline__ float2 lane_dot2(const uint4* row_a, const uint4* row_b, int n_vec,
                                            const XView& xs, int lane) {
  float2 acc = make_float2(0.0f, 0.0f);
  if (row_b == nullptr) {
    acc.x = lane_dot<kBf16, false>(row_a, n_vec, xs, lane);
    return acc;
  }
  float a1 = 0.0f, b1 = 0.0f;
  int v = lane;
#pragma unroll 1
  for (; v + 32 < n_vec; v += 64) {
    const uint4 wa0 = row_a[v], wb0 = row_b[v], wa1 = row_a[v + 32], wb1 = row_b[v + 32];
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    const float4 xa0 = xs.a[v], xa1 = xs.a[v + 32];
    const float4 xb0 = kBf16 ? xs.b[v] : zero, xb1 = kBf16 ? xs.b[v + 32] : zero;
    acc.x = dot16<kBf16>(wa0, xa0, xb0, acc.x);
    acc.y = dot16<kBf16>(wb0, xa0, xb0, acc.y);
    a1 = dot16<kBf16>(wa1, xa1, xb1, a1);
    b1 = dot16<kBf16>(wb1, xa1, xb1, b1);
  }
#pragma unroll 1
  for (; v < n_vec; v += 32) {
    acc.x = dot16<kBf16>(row_a[v], xs, v, acc.x);
    acc.y = dot16<kBf16>(row_b[v], xs, v, acc.y);
  }
  acc.x += a1;
  acc.y += b1;
  return acc;
}

// Scalar fallback for rows that are not 16-byte multiples (or a misaligned weight).
__device__ __forceinline__ float lane_dot_scalar(const Gemv& g, int64_t n, const float* xs,
                                                 const XLayout& layout, int lane) {
  float acc = 0.0f;
  const int64_t base = n * g.K;
  if (g.w_bf16) {
    const uint16_t* w = static_cast<const uint16_t*>(g.W->ptr) + base;
    for (int k = lane; k < g.K; k += 32)
      acc = fmaf(bf16_bits_to_float(__ldg(w + k)), xs[layout.index(k)], acc);
  } else {
    const float* w = static_cast<const float*>(g.W->ptr) + base;
    for (int k = lane; k < g.K; k += 32) acc = fmaf(__ldg(w + k), xs[layout.index(k)], acc);
  }
  return acc;
}

// The epilogue of output column n_off + j of row r.
__device__ __forceinline__ void write_output(const Gemv& g, int64_t r, int j, float dot) {
  const int64_t n = int64_t(g.n_off) + j;
  float y = dot;
  if (g.bias) y += load_f(*g.bias, n);
  const int64_t idx = r * g.out_cols + n;
  // GEMV_ADD_TILE / SILU_MUL_GEMV_ADD_TILE: the F32 GEMV result, then ADD with the residual (read before the write, so
  // the residual may alias the output).
  if (g.residual) y += load_f(*g.residual, idx);
  store_f(*g.out, idx, y);
}

// The deferred epilogue: row j's dot is the sum of its `segs` partials part[j * segs + s] (in
// segment order, so the result does not depend on warp timing). One thread per row, all in
// parallel, so the bias / residual loads (L2 round trips) overlap instead of queueing behind
// each row's dot product on one lane. Starts with the barrier that publishes the partials, which
// doubles as the abort vote; false (on every thread) when the launch is aborting.
__device__ __forceinline__ bool finish_rows(const OpContext& c, const Gemv& g, int64_t r,
                                            const float* part, int segs, bool aborted) {
  if (consumer_any(aborted, c.n_threads)) return false;
  for (int j = c.tid; j < g.N_tile; j += c.n_threads) {
    float dot = 0.0f;
    for (int k = 0; k < segs; ++k) dot += part[j * segs + k];
    write_output(g, r, j, dot);
  }
  return true;
}

// Segments per row when a chunk of n_rows rows has fewer rows than the CTA has warps (long
// rows: a 16 KiB down_proj row leaves two rows per 32 KiB stage): each row is cut into segs
// pieces, one warp each, so every warp streams. Capped by the partials' room (part_floats).
__device__ __forceinline__ int row_segments(int n_rows, int n_warps, int n_tile, int part_floats) {
  if (n_rows >= n_warps) return 1;
  int segs = min(n_warps / n_rows, 32 / n_rows);
  segs = min(segs, part_floats / n_tile);
  return segs > 1 ? segs : 1;
}

// Step 2 over the ring: the tile's rows arrive chunk by chunk; warp w takes the (row pair,
// segment) items w, w + n_warps, ... of each chunk (rows 2p and 2p + 1 share their x loads,
// lane_dot2) and leaves its dot-product partials in `part`. No
// consumer barrier per chunk: the stage's empty mbarrier counts one arrival per warp, and every
// warp waits on every chunk (even one with no work for it) before releasing it, so a stage can
// never be refilled under a warp still reading it. False when the launch aborted mid-tile.
template <bool kBf16>
__device__ __forceinline__ bool gemv_from_ring(const OpContext& c, const Gemv& g,
                                               const RingTile& t, const XView& xs, float* part,
                                               int part_floats, RingCursor cur) {
  const WeightRing& ring = *c.ring;
  const int warp = c.tid >> 5, lane = c.tid & 31, n_warps = c.n_threads >> 5;
  const int n_vec = int(t.row_bytes / 16);
  // One segment count for the whole tile (from the full chunks), so part's layout is fixed.
  const int segs =
      row_segments((min(t.rows_per_chunk, t.rows) + 1) / 2, n_warps, t.rows, part_floats);
  bool aborted = false;
  for (int row0 = 0; row0 < t.rows && !aborted; row0 += t.rows_per_chunk) {
    const int n_rows = min(t.rows_per_chunk, t.rows - row0);
    if (!ring_wait_full(*c.prog, ring, cur)) {  // warp-uniform
      aborted = true;
      break;
    }
    const uint8_t* stage = ring.stage_base + int64_t(cur.stage) * ring.chunk_bytes;
    const int n_pairs = (n_rows + 1) / 2;
    for (int item = warp; item < n_pairs * segs; item += n_warps) {
      const int pair = item / segs, seg = item - pair * segs;
      const int i = 2 * pair;
      const bool two = i + 1 < n_rows;
      const int v0 = int(int64_t(n_vec) * seg / segs), v1 = int(int64_t(n_vec) * (seg + 1) / segs);
      const uint4* row = reinterpret_cast<const uint4*>(stage + int64_t(i) * t.row_bytes);
      const uint4* next = two ? row + t.row_bytes / 16 : nullptr;
      const float2 dot = lane_dot2<kBf16>(row + v0, two ? next + v0 : nullptr, v1 - v0,
                                          xs.at(v0), lane);
      const float d0 = warp_sum(dot.x);
      const float d1 = two ? warp_sum(dot.y) : 0.0f;
      if (lane == 0) {
        part[(row0 + i) * segs + seg] = d0;
        if (two) part[(row0 + i + 1) * segs + seg] = d1;
      }
    }
    ring_release(ring, cur);
    cur.advance(ring.n_stages);
  }
  mark_body_end(c);
  return finish_rows(c, g, 0, part, segs, aborted);
}

// Step 2 from global memory for activation row r: warps take whole rows.
__device__ __forceinline__ void gemv_from_global(const OpContext& c, const Gemv& g, int64_t r,
                                                 const float* xs, const XLayout& layout,
                                                 float* part) {
  const int warp = c.tid >> 5, lane = c.tid & 31, n_warps = c.n_threads >> 5;
  const int64_t row_bytes = int64_t(g.K) * (g.w_bf16 ? 2 : 4);
  const bool vec = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(g.W->ptr) % 16 == 0;
  const int n_vec = int(row_bytes / 16);
  for (int j = warp; j < g.N_tile; j += n_warps) {
    const int64_t n = int64_t(g.n_off) + j;
    float p;
    if (vec) {
      const uint4* row =
          reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(g.W->ptr) + n * row_bytes);
      const XView xv = x_view(xs, layout);
      p = g.w_bf16 ? lane_dot<true, true>(row, n_vec, xv, lane)
                   : lane_dot<false, true>(row, n_vec, xv, lane);
    } else {
      p = lane_dot_scalar(g, n, xs, layout, lane);
    }
    const float dot = warp_sum(p);
    if (lane == 0) part[j] = dot;
  }
  finish_rows(c, g, r, part, 1, false);
}

}  // namespace gemv_detail

__device__ inline void op_gemv(const OpContext& c) {
  using namespace gemv_detail;
  Gemv g;
  if (const int err = resolve(c, g)) {
    op_fail(c, err);
    return;
  }
  // Scratch: [red: 32 floats][x: K floats][row partials: the rest, >= N_tile floats]
  float* red = c.scratch;
  float* xs = c.scratch + kReduceFloats;
  float* part = xs + g.K;
  const int part_floats = c.scratch_bytes / 4 - kReduceFloats - g.K;
  const RingTile t =
      ring_tile(*c.inst, *c.ring, [&](int i) -> const amk_buffer_t& { return in_buf(c, i); });
  const XLayout layout = x_layout(g);
  if (t.eligible) {  // one activation row; the producer is streaming this tile's rows
    WeightRing& ring = *c.ring;
    // Every thread reads the cursor BEFORE build_x's barrier; thread 0 stores the advanced one
    // after it, so no thread can read a cursor already moved past this tile.
    const RingCursor start{ring.consumer_stage, ring.consumer_phase};
    // x is a pure function of (op, x, fused operand) within a step: buffers have one writer
    // per step and a page is reused only after all its readers (this CTA's tasks included) are
    // done. So a CTA's consecutive tiles of one projection build x once. Every thread reads the
    // key before build_x's barrier; thread 0 rewrites it only after that barrier.
    const int in1 = gemv_weight_input(c.inst->op) == 2 ? c.inst->inputs[1] : -1;
    // The key holds the layout too (bit 8): a tile of another weight dtype lays x out anew.
    const int x_key = c.inst->op | (layout.split ? 0x100 : 0);
    const bool x_ready = ring.x_op == x_key && ring.x_in0 == c.inst->inputs[0] &&
                         ring.x_in1 == in1 && ring.x_epoch == c.epoch;
    if (!x_ready)
      build_x(c, g, 0, xs, red, layout);
    else
      consumer_sync(c.n_threads);  // the cursor reads above precede thread 0's update below
    mark_body_begin(c);
    const XView xv = x_view(xs, layout);
    const bool ok = g.w_bf16 ? gemv_from_ring<true>(c, g, t, xv, part, part_floats, start)
                             : gemv_from_ring<false>(c, g, t, xv, part, part_floats, start);
    if (ok && c.tid == 0) {
      ring.x_op = x_key;
      ring.x_in0 = c.inst->inputs[0];
      ring.x_in1 = in1;
      ring.x_epoch = c.epoch;
      const int n_chunks = (t.rows + t.rows_per_chunk - 1) / t.rows_per_chunk;
      RingCursor cur = start;
      for (int i = 0; i < n_chunks; ++i) cur.advance(ring.n_stages);
      ring.consumer_stage = cur.stage;
      ring.consumer_phase = cur.phase;
    }
    return;
  }
  if (c.tid == 0) c.ring->x_op = -1;  // read by no thread before the op's end barrier
  for (int64_t r = 0; r < g.rows; ++r) {
    build_x(c, g, r, xs, red, layout);
    gemv_from_global(c, g, r, xs, layout, part);
    if (r + 1 < g.rows) consumer_sync(c.n_threads);  // xs and part are rebuilt for the next row
  }
}

}  // namespace amk::cuda
