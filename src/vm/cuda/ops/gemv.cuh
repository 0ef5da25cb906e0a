// The GEMV family: GEMV_TILE (5), RMSNORM_GEMV_TILE (20), SILU_MUL_GEMV_TILE (21),
// GEMV_ADD_TILE (22), SILU_MUL_GEMV_ADD_TILE (23), GEMV_GLU_TILE (25) and RMSNORM_GEMV_GLU_TILE
// (26) and COMBINE_GEMV_ADD_TILE (27), as src/vm/reference/ops/matmul.cpp (fp weights) and
// fused_gemv.cpp. Each is one prologue (copy / RMSNORM / SILU_MUL / the split-KV attention's
// combine) and one epilogue (+ bias, + residual, or the GLU's
// silu(gate) * up) around the same GEMV body. A GLU tile's body runs over 2 N_tile rows: its
// gate rows, then its up rows (the weight ring streams them as one tile, weight_ring.cuh).
//
//   1. x (K floats, fp32) is built in shared scratch: a copy of the activation row, RMSNORM of
//      it (norm weight = input 1), silu(gate) * up, or the merge of a stack of flash partials. This is the F32 intermediate the reference
//      materialises (the fused norm's sum of squares runs in another order than RMSNORM's: fp32
//      noise).
//   2. out[r, n_off + j] = dot(x_r, W[n_off + j]) (+ bias[n_off + j]) (+ residual[r, n_off + j]),
//      16-byte weight reads, fp32 accumulation (order differs from the reference's exact sum:
//      fp32 noise, docs/OPCODES.md). Over the ring, every warp takes 32-vector strips of each
//      chunk ("Step 2 over the ring: strips" below); from global memory, a warp a row.
//
// Weights come through the shared-memory ring when ring_tile() says so (the producer warp has
// streamed them there), else straight from global memory with 16-byte non-coherent loads, or
// scalar loads when rows are not 16-byte multiples.
//
// Scratch: 32 floats of reduction space, x (K floats), then the row partials: one float per body
// row (N_tile, a GLU tile 2 N_tile) from global memory, body rows x S over the ring (S = 32-vector
// strips per row; the loader reserves it).
#pragma once

#include <cstdint>

#include "vm/cuda/ops/attention.cuh"
#include "vm/cuda/ops/buffer_dims.h"
#include "vm/cuda/primitives.cuh"
#include "vm/cuda/sync.cuh"
#include "vm/cuda/ops/gemv_strips.h"
#include "vm/cuda/weight_ring.cuh"

namespace amk::cuda {

namespace gemv_detail {

constexpr int kReduceFloats = kGemvReduceFloats;  // block_sum's space at the head of scratch

struct Gemv {
  const amk_buffer_t* x;       // input 0 (gate for SILU_MUL_GEMV_TILE)
  const amk_buffer_t* aux;     // norm weight / up; null otherwise
  const amk_buffer_t* W;       // a GLU tile's gate weight (up_weight() finds its up weight)
  const amk_buffer_t* bias;    // null: none (a GLU tile's gate bias; up_bias())
  const amk_buffer_t* residual;  // GEMV_ADD_TILE only
  const amk_buffer_t* out;
  int K, N_tile, n_off;
  int64_t rows, out_cols;
  bool w_bf16;
  bool glu;
  // Rows of the body: N_tile, or a GLU tile's gate rows then its up rows.
  __device__ __forceinline__ int body_rows() const { return glu ? 2 * N_tile : N_tile; }
};

__device__ __forceinline__ bool has_combine_prologue(int op) {
  return op == AMK_OP_COMBINE_GEMV_ADD_TILE;
}
__device__ __forceinline__ bool has_norm_prologue(int op) {
  return op == AMK_OP_RMSNORM_GEMV_TILE || op == AMK_OP_RMSNORM_GEMV_GLU_TILE;
}

// A GLU tile's up weight and up bias, after its gate weight and gate bias. Looked up where used
// rather than held in Gemv: Gemv lives across the task's gate, and two more pointers there spill
// the 256-thread build.
__device__ __forceinline__ const amk_buffer_t& up_weight(const OpContext& c) {
  return in_buf(c, gemv_weight_input(c.inst->op) + 1);
}
__device__ __forceinline__ const amk_buffer_t* up_bias(const OpContext& c, const Gemv& g) {
  return g.glu && g.bias ? &in_buf(c, gemv_weight_input(c.inst->op) + 3) : nullptr;
}

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

// Gathers the operands. The loader checked them when it built the task record
// (gemv_tile_check.cpp, the reference's conditions): none of it is checked again here, where it
// would be a chain of dependent shared-memory loads and branches in front of every task's gate.
__device__ __forceinline__ void resolve(const OpContext& c, Gemv& g) {
  const amk_instruction_t& inst = *c.inst;
  const amk_params_t& p = inst.params;
  const int op = inst.op;
  const int wi = gemv_weight_input(op);
  // The residual follows the weight in the ops that add one; the optional bias comes last.
  const bool combine = has_combine_prologue(op);
  const bool adds =
      op == AMK_OP_GEMV_ADD_TILE || op == AMK_OP_SILU_MUL_GEMV_ADD_TILE || combine;
  // A GLU tile's biases come in pairs after its two weights.
  g.glu = is_glu_gemv(op);
  const int bias_index = wi + (adds || g.glu ? 2 : 1);
  g.K = p.K;
  g.N_tile = p.N_tile;
  g.n_off = p.n_off;
  g.x = &in_buf(c, 0);
  const bool silu = op == AMK_OP_SILU_MUL_GEMV_TILE || op == AMK_OP_SILU_MUL_GEMV_ADD_TILE;
  g.aux = (has_norm_prologue(op) || silu) ? &in_buf(c, 1) : nullptr;
  g.W = &in_buf(c, wi);
  g.bias = inst.n_inputs > bias_index ? &in_buf(c, bias_index) : nullptr;
  g.residual = adds ? &in_buf(c, wi + 1) : nullptr;
  g.out = &out_buf(c, 0);
  // One activation row (decode) without a 64-bit division; COMBINE_GEMV_ADD_TILE merges its
  // stack of partials into one.
  g.rows = combine || g.x->numel == g.K ? 1 : g.x->numel / g.K;
  g.w_bf16 = g.W->dtype == AMK_DTYPE_BF16;
  g.out_cols = last_dim(*g.out);
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

// RMSNORM_GEMV_TILE keeps a thread's share of the row in registers up to this many float4s a
// thread (K <= 2048 at 256 threads; more spills the 256-thread build); longer rows take the
// two-pass path through shared memory.
constexpr int kNormVecs = 2;

// COMBINE_GEMV_ADD_TILE's x: ATTENTION_COMBINE's merge (merge_partials' arithmetic, online over
// batches of kStackBatch partials) of a stack of S flash partials [S * n_heads, head_dim + 2],
// of the K / head_dim heads from `parts` (x's first head's row of slab 0; slabs nh rows apart).
// With flags bit 2 and kv_len B, partial s holds keys [s B, s B + B): those past the step's
// position are empty and not read. A thread owns float4s v of x (head 4 v / head_dim) and loads,
// per partial, the head's (m, l) and the four acc values as 8-byte pairs (a row of head_dim + 2
// floats is 8-byte aligned, not 16), kStackVecs float4s' worth of a batch before using any: the
// partials were just written by other SMs, so each batch is one L2 round trip. (Two float4s a
// thread in flight spilled the 256-thread build, stack 96 -> 192 bytes; as a call, worse.)
// 6 a batch against 4, measured on the H200 (bench/RESULTS.md, fortieth session): llama-3.2-1b
// at ~3,928 of a 4,096 context (16 live partials: 3 round trips a float4 instead of 4) -0.9 %
// over 2 rounds; at 512 (positions 64..320) 1B / qwen3 / smollm2 -0.1 / +0.6 / +0.3 %, noise.
// 8 spilled the 256-thread build (18 instructions).
constexpr int kStackBatch = 6;
constexpr int kStackVecs = 1;
__device__ __forceinline__ void build_x_combine(const float* parts, int64_t parts_numel, int hd,
                                             int nh, int K, int window, const amk_program_t* prog,
                                             int tid, int n_threads, float* xs, bool split,
                                             int32_t pos) {
  const int w = hd + 2;
  int S = int(parts_numel / (int64_t(nh) * w));
  // `pos` < 0: not read before the gate (OpContext::pos_visible), so read now, a round trip on
  // the chain before the partials' loads.
  if (window > 0) S = min(S, max(pos >= 0 ? pos : step_position(*prog), 0) / window + 1);
  XLayout layout;
  layout.split = split;
  layout.K8 = K / 8;
  float4* xs4 = reinterpret_cast<float4*>(xs);
  const int n4 = K / 4;
  for (int v0 = tid; v0 < n4; v0 += kStackVecs * n_threads) {
    float M[kStackVecs], L[kStackVecs];
    float4 acc[kStackVecs];
#pragma unroll
    for (int u = 0; u < kStackVecs; ++u) {
      M[u] = neg_inf();
      L[u] = 0.0f;
      acc[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll 1
    for (int s0 = 0; s0 < S; s0 += kStackBatch) {
      float2 ml[kStackVecs][kStackBatch], lo[kStackVecs][kStackBatch], hi[kStackVecs][kStackBatch];
#pragma unroll
      for (int u = 0; u < kStackVecs; ++u) {
        const int v = v0 + u * n_threads;
        const int h = (4 * v) / hd, d = 4 * v - h * hd;
#pragma unroll
        for (int b = 0; b < kStackBatch; ++b) {
          if (v < n4 && s0 + b < S) {
            const float* row = parts + (int64_t(s0 + b) * nh + h) * w;
            ml[u][b] = *reinterpret_cast<const float2*>(row + hd);
            lo[u][b] = *reinterpret_cast<const float2*>(row + d);
            hi[u][b] = *reinterpret_cast<const float2*>(row + d + 2);
          } else {
            ml[u][b] = make_float2(0.0f, 0.0f);  // l = 0: skipped
            lo[u][b] = hi[u][b] = make_float2(0.0f, 0.0f);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kStackVecs; ++u) {
        float Mb = M[u];
#pragma unroll
        for (int b = 0; b < kStackBatch; ++b)
          if (ml[u][b].y > 0.0f) Mb = fmaxf(Mb, ml[u][b].x);
        if (Mb > M[u]) {  // a larger max: rescale what the earlier batches summed
          const float r = L[u] > 0.0f ? expf(M[u] - Mb) : 0.0f;
          L[u] *= r;
          acc[u] = make_float4(acc[u].x * r, acc[u].y * r, acc[u].z * r, acc[u].w * r);
          M[u] = Mb;
        }
#pragma unroll
        for (int b = 0; b < kStackBatch; ++b) {
          const float l = ml[u][b].y;
          if (!(l > 0.0f)) continue;
          const float e = expf(ml[u][b].x - M[u]);
          L[u] = fmaf(e, l, L[u]);
          acc[u] = make_float4(fmaf(e, lo[u][b].x, acc[u].x), fmaf(e, lo[u][b].y, acc[u].y),
                               fmaf(e, hi[u][b].x, acc[u].z), fmaf(e, hi[u][b].y, acc[u].w));
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kStackVecs; ++u) {
      const int v = v0 + u * n_threads;
      if (v >= n4) break;
      const float l = L[u];
      xs4[layout.slot4(v)] = l > 0.0f ? make_float4(acc[u].x / l, acc[u].y / l, acc[u].z / l,
                                                     acc[u].w / l)
                                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
}

// Step 1: activation row r -> xs (K floats in shared memory, in `layout`). Ends with a consumer
// barrier.
__device__ __forceinline__ void build_x(const OpContext& c, const Gemv& g, int64_t r, float* xs,
                                        float* red, const XLayout& layout, int32_t pos = -1) {
  const int op = c.inst->op;
  const int K = g.K;
  const int64_t base = r * K;
  float4* xs4 = reinterpret_cast<float4*>(xs);
  const bool vec = K % 4 == 0 && vec4_ok(*g.x, base) &&
                   (g.aux == nullptr || vec4_ok(*g.aux, has_norm_prologue(op) ? 0 : base));
  if (has_combine_prologue(op)) {
    const amk_params_t& p = c.inst->params;
    const bool window = (p.flags & AMK_ATTN_FLAG_RUNTIME_WINDOW) != 0 && p.kv_len > 0;
    // x is heads [m_off, m_off + K / head_dim) of every slab (m_off 0: from the first): the
    // merge starts at head m_off's row of slab 0, the slabs still n_heads rows apart.
    build_x_combine(static_cast<const float*>(g.x->ptr) + int64_t(p.m_off) * (p.head_dim + 2),
                    g.x->numel, p.head_dim, p.n_heads, K, window ? p.kv_len : 0, c.prog, c.tid,
                    c.n_threads, xs, layout.split, pos);
  } else if (op == AMK_OP_SILU_MUL_GEMV_TILE || op == AMK_OP_SILU_MUL_GEMV_ADD_TILE) {
    if (vec)
      build_x_vec4(c, *g.x, base / 4, *g.aux, base / 4, K / 4, xs4, layout,
                   [](float gate, float up) { return silu(gate) * up; });
    else
      for (int k = c.tid; k < K; k += c.n_threads)
        xs[layout.index(k)] = silu(load_f(*g.x, base + k)) * load_f(*g.aux, base + k);
  } else if (has_norm_prologue(op) && vec && K / 4 <= kNormVecs * c.n_threads) {
    // The row and the norm weight requested together: one L2 round trip after the wait, not two
    // (the weight's used to follow the sum). The row goes to xs as it arrives; the weight waits
    // in registers for the sum. (Requesting the weight before the task's gate gains nothing:
    // both are L2 hits issued together, and the 256-thread build spills them across the gate.)
    // The sum of squares runs over each thread's vectors, then block_sum: fp32 rounding noise
    // against RMSNORM's order (docs/OPCODES.md), the same bound as the GEMV's own sum.
    const int n4 = K / 4;
    float4 w[kNormVecs];
    float s = 0.0f;
#pragma unroll
    for (int u = 0; u < kNormVecs; ++u) {
      const int v = c.tid + u * c.n_threads;
      if (v < n4) {
        const float4 x = load_f4(*g.x, base / 4 + v);
        w[u] = load_f4(*g.aux, v);
        xs4[layout.slot4(v)] = x;
        s += x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
      }
    }
    s = block_sum(s, red, c.tid, c.n_threads);
    const float inv = rsqrtf(s / float(K) + c.inst->params.eps);
#pragma unroll
    for (int u = 0; u < kNormVecs; ++u) {
      const int v = c.tid + u * c.n_threads;
      if (v < n4) {  // in place: each thread rewrites only the vectors it wrote
        const float4 x = xs4[layout.slot4(v)];
        xs4[layout.slot4(v)] = make_float4(x.x * inv * w[u].x, x.y * inv * w[u].y,
                                           x.z * inv * w[u].z, x.w * inv * w[u].w);
      }
    }
  } else {
    if (vec)
      build_x_vec4(c, *g.x, base / 4, *g.x, base / 4, K / 4, xs4, layout,
                   [](float x, float) { return x; });
    else
      for (int k = c.tid; k < K; k += c.n_threads) xs[layout.index(k)] = load_f(*g.x, base + k);
    if (has_norm_prologue(op)) {
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

// This lane's part of dot(x, row) for a row of n_vec 16-byte vectors in global memory: four
// independent loads in flight per lane (HBM latency). Not unrolled further: the registers belong
// to the whole megakernel.
template <bool kBf16>
__device__ __forceinline__ float lane_dot(const uint4* row, int n_vec, const XView& xs, int lane) {
  constexpr int kInFlight = 4;
  float acc[kInFlight];
#pragma unroll
  for (int u = 0; u < kInFlight; ++u) acc[u] = 0.0f;
  int v = lane;
#pragma unroll 1
  for (; v + 32 * (kInFlight - 1) < n_vec; v += 32 * kInFlight) {
    uint4 w[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) w[u] = load_stream16(row + v + 32 * u);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) acc[u] = dot16<kBf16>(w[u], xs, v + 32 * u, acc[u]);
  }
#pragma unroll 1
  for (; v < n_vec; v += 32) acc[0] = dot16<kBf16>(load_stream16(row + v), xs, v, acc[0]);
  float sum = 0.0f;
#pragma unroll
  for (int u = 0; u < kInFlight; ++u) sum += acc[u];
  return sum;
}

// Scalar fallback for rows that are not 16-byte multiples (or a misaligned weight).
__device__ __forceinline__ float lane_dot_scalar(const Gemv& g, const void* W, int64_t n,
                                                 const float* xs, const XLayout& layout, int lane) {
  float acc = 0.0f;
  const int64_t base = n * g.K;
  if (g.w_bf16) {
    const uint16_t* w = static_cast<const uint16_t*>(W) + base;
    for (int k = lane; k < g.K; k += 32)
      acc = fmaf(bf16_bits_to_float(__ldg(w + k)), xs[layout.index(k)], acc);
  } else {
    const float* w = static_cast<const float*>(W) + base;
    for (int k = lane; k < g.K; k += 32) acc = fmaf(__ldg(w + k), xs[layout.index(k)], acc);
  }
  return acc;
}

// The epilogue's addends of output column n_off + j of row r: the bias and the residual (a GLU
// tile: the gate's and the up's bias), kept apart so the sum rounds as (dot + bias) + residual,
// like the reference's GEMV then ADD.
struct Addends {
  float bias = 0.0f, residual = 0.0f;  // GLU: residual holds the up bias
};
__device__ __forceinline__ Addends load_addends(const OpContext& c, const Gemv& g, int64_t r,
                                               int j) {
  const int64_t n = int64_t(g.n_off) + j;
  Addends a;
  if (g.bias) a.bias = load_f(*g.bias, n);
  if (g.glu && g.bias) a.residual = load_f(*up_bias(c, g), n);
  // GEMV_ADD_TILE / SILU_MUL_GEMV_ADD_TILE: read before the write, so the residual may alias
  // the output.
  if (g.residual) a.residual = load_f(*g.residual, r * g.out_cols + n);
  return a;
}
// Output column n_off + j from its dot product(s): `up` is a GLU tile's up row's.
__device__ __forceinline__ float output_value(const Gemv& g, float dot, float up,
                                              const Addends& a) {
  float y = dot;
  if (g.bias) y += a.bias;
  if (g.glu) {
    // silu() is the SILU_MUL op's (elementwise.cuh), so the fused tile computes what the
    // gate GEMV, the up GEMV and SILU_MUL do unfused.
    y = silu(y) * (g.bias ? up + a.residual : up);
  } else if (g.residual) {
    y += a.residual;
  }
  return y;
}

// Thread j's addends for row j, requested as the op begins (rows <= threads): their L2 round
// trip then overlaps the weight stream instead of following it in the epilogue. The residual
// and the bias are complete before the task runs (its waits cover them), so reading early is
// safe; the value is used only in finish_rows.
struct EarlyAddends {
  bool loaded = false;
  Addends a;
};
__device__ __forceinline__ EarlyAddends early_addends(const OpContext& c, const Gemv& g, int64_t r) {
  EarlyAddends e;
  if ((g.bias || g.residual) && g.N_tile <= c.n_threads) {
    e.loaded = true;
    if (c.tid < g.N_tile) e.a = load_addends(c, g, r, c.tid);
  }
  return e;
}

// The deferred epilogue: row j's dot is the sum of its `segs` partials part[s * rows + j] (in
// segment order, so the result does not depend on warp timing; segment-major, so a warp's
// threads read consecutive words where row-major was a gcd(segs, 32)-way bank conflict a load);
// a GLU tile's output j also sums up row N_tile + j. One thread per row, all in parallel, so the
// bias / residual loads (when not loaded early) overlap instead of queueing behind each row's
// dot product on one lane. Starts with the barrier that publishes the
// partials, which doubles as the abort vote; false (on every thread) when the launch is aborting.
__device__ __forceinline__ bool finish_rows(const OpContext& c, const Gemv& g, int64_t r,
                                            const float* part, int segs, bool aborted,
                                            const EarlyAddends& early) {
  if (consumer_any(aborted, c.n_threads)) return false;
  const int64_t first = r * g.out_cols + g.n_off;
  const int rows = g.body_rows();
  for (int j = c.tid; j < g.N_tile; j += c.n_threads) {
    float dot = 0.0f, up = 0.0f;
    for (int k = 0; k < segs; ++k) dot += part[k * rows + j];
    if (g.glu)
      for (int k = 0; k < segs; ++k) up += part[k * rows + g.N_tile + j];
    const float y =
        output_value(g, dot, up, early.loaded ? early.a : load_addends(c, g, r, j));
    store_f(*g.out, first + j, y);
  }
  return true;
}

// ---- Step 2 over the ring: strips ---------------------------------------------------------------
//
// A chunk of the ring holds n_rows whole weight rows of `cols` 16-byte vectors. It is cut into
// strips of 32 vectors (one per lane) of one row: S = ceil(cols / 32) strips a row, strip q of
// the chunk is row q / S, segment q % S. Warp w takes strips w, w + W, w + 2W, ... (W consumer
// warps), so every warp has work in every chunk whatever the row length, and one strip is one
// 16-byte shared-memory load per lane.
//
// Warp w's segments repeat with period P = S / gcd(S, W): its i-th strip of a chunk has segment
// (w + i W) mod S. For P <= 4 (S dividing W or W dividing S, and S = 3, 6, 12: every K of the
// Llama / Qwen / SmolLM shapes we ship) the P slices of x a lane ever meets stay in its registers
// for the whole tile, so the inner loop reads only weights from shared memory. Other shapes read
// x from shared memory (P = 0).
//
// Each batch of 8 strips (6 for P = 3: a whole number of periods) is summed over the warp by a
// transposing reduction (9 shuffles for 8 sums, not 8 x 5) and strip (row, seg)'s sum lands in
// part[seg * rows + row]; finish_rows adds a row's S partials in segment order, so the result does
// not depend on warp timing.

// The 16 bytes at `addr` in the shared window (the compiler cannot tell that the ring's generic
// pointer is shared memory and would emit generic loads).
__device__ __forceinline__ uint4 lds16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}

// Sums each of the 8 values over the warp: lane L returns the warp's sum of v[(L >> 2) & 7].
// Each step halves the values a lane holds and sends the other half to its partner, so 8 sums
// cost 4 + 2 + 1 + 1 + 1 shuffles.
__device__ __forceinline__ float warp_sum8(float (&v)[8], int lane) {
#pragma unroll
  for (int half = 4, bit = 16; half >= 1; half >>= 1, bit >>= 1) {
    const bool upper = (lane & bit) != 0;
#pragma unroll
    for (int j = 0; j < half; ++j) {
      const float keep = upper ? v[j + half] : v[j];
      const float send = upper ? v[j] : v[j + half];
      v[j] = keep + __shfl_xor_sync(0xffffffffu, send, bit);
    }
  }
  float s = v[0];
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  return s;
}

// The period of warp w's segments (see above, gemv_strips.h), or 0 when x should come from
// shared memory.
__device__ __forceinline__ int strip_period(int S, int n_warps, bool bf16) {
  if (!bf16) return 0;  // F32 weights: the oracle's path, not a fast one
  return gemv_strip_period_with(S, n_warps, [](int a, int b) { return small_divmod(a, b).r; });
}

// Warp `warp`'s share of every chunk of a tile, worked out before the task's gate (all the
// divisions are here): for P > 0, strip slot p < P of a batch is a segment of row first_row[p]
// (+ R rows per period), the lane reading its 16-byte vector vec[p] (-1: past the row's end); for
// P == 0 the first strip's (row, segment) and the carries from strip to strip.
constexpr int kMaxStripPeriod = 4;
// Pairs of small ints (rows, segments, vector indices, -1 .. 2^15 - 1: ring_tile leaves longer
// rows to the global-memory path) share a register: the plan lives across the gate's spin, and
// the 256-thread build spills what does not fit.
struct Pair16 {
  uint32_t v = 0;
  __device__ __forceinline__ static Pair16 of(int hi, int lo) {
    return {(uint32_t(hi) << 16) | (uint32_t(lo) & 0xffffu)};
  }
  __device__ __forceinline__ int hi() const { return int(v >> 16); }
  __device__ __forceinline__ int lo() const { return int(int16_t(v & 0xffffu)); }  // -1 survives
};
struct StripPlan {
  int S = 0, cols = 0, P = 0, R = 0;
  Pair16 slot[kMaxStripPeriod];  // (first_row, vec) of slot p < P
  Pair16 warp0, step, batch;     // P == 0: (rows, segments) of the first strip and the carries
};
__device__ __forceinline__ StripPlan strip_plan(const OpContext& c, const RingTile& t, bool bf16) {
  StripPlan sp;
  const int warp = c.tid >> 5, lane = c.tid & 31, W = c.n_threads >> 5;
  sp.cols = int(t.row_bytes / 16);
  sp.S = int(gemv_strips_per_row(t.row_bytes));
  sp.P = strip_period(sp.S, W, bf16);
  const int S = sp.S;
  // Constant indices only (unrolled, guarded by P), so the plan stays in registers.
#pragma unroll
  for (int p = 0; p < kMaxStripPeriod; ++p) {
    const SmallDiv d = small_divmod(warp + p * W, S);
    const int v = d.r * 32 + lane;
    sp.slot[p] = Pair16::of(d.q, p < sp.P && v < sp.cols ? v : -1);
  }
  sp.R = small_divmod(sp.P * W, S).q;  // exact for P > 0
  constexpr int kBatch0 = 8;  // the P == 0 batch
  const SmallDiv w0 = small_divmod(warp, S), st = small_divmod(W, S),
                 ba = small_divmod(kBatch0 * W, S);
  sp.warp0 = Pair16::of(w0.q, w0.r);
  sp.step = Pair16::of(st.q, st.r);
  sp.batch = Pair16::of(ba.q, ba.r);
  return sp;
}

// One tile's chunks, strips of warp `warp` as `sp` planned them. P > 0: the segment pattern
// repeats every P strips and x stays in registers; P == 0: any pattern, x from shared memory.
template <bool kBf16, int P>
__device__ __forceinline__ bool gemv_strips(const OpContext& c, const RingTile& t, const XView& xs,
                                            float* part, RingCursor cur, const StripPlan& sp) {
  constexpr int kBatch = P == 0 ? 8 : (8 / P) * P;
  const WeightRing& ring = *c.ring;
  const int warp = c.tid >> 5, lane = c.tid & 31, W = c.n_threads >> 5;
  const int cols = sp.cols, S = sp.S;
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  // Slot k of batch b (P > 0) is strip q = warp + (b kBatch + k) W: segment seg[k % P], row
  // first_row[k % P] + (b kBatch / P + k / P) R, since every P strips of a warp cover P W strips, a
  // whole number R = P W / S of rows. Its lane reads the row's vector vec[k % P].
  constexpr int kP = P > 0 ? P : 1;
  float4 xa[kP], xb[kP];
  const int R = sp.R;
  if constexpr (P > 0) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int v = sp.slot[p].lo();
      xa[p] = v >= 0 ? xs.a[v] : zero;
      xb[p] = v >= 0 && kBf16 ? xs.b[v] : zero;
    }
  }
  // P == 0: strip q's (row, segment) are carried from slot to slot and batch to batch by adding
  // W (and kBatch W) strips with a carry, so the loop never divides (the divisions per slot made
  // the shared-x path ~3x slower per chunk: 224 threads measured 2121 against 1505 us on
  // llama-3.2-1b).
  const int step_rows = sp.step.hi(), step_segs = sp.step.lo();
  const int batch_rows = sp.batch.hi(), batch_segs = sp.batch.lo();
  // The strip whose warp sum this lane writes: slot (lane >> 2) & 7 of each batch.
  const int my_slot = (lane >> 2) & 7;
  const bool writer = (lane & 3) == 0 && my_slot < kBatch;
  // Its (row, segment) in the chunk, carried from batch to batch like the slots' (no division in
  // the loop): a batch moves on kBatch W strips, (8 / P) R whole rows for P > 0.
  const SmallDiv my0 = small_divmod(warp + my_slot * W, S);
  bool aborted = false;
  for (int row0 = 0; row0 < t.rows && !aborted; row0 += t.rows_per_chunk) {
    const int n_rows = min(t.rows_per_chunk, t.rows - row0);
    if (!ring_wait_full(*c.prog, ring, cur)) {  // warp-uniform
      aborted = true;
      break;
    }
    const uint32_t stage = ring.stage_base_smem + uint32_t(cur.stage) * uint32_t(ring.chunk_bytes);
    int my_row = my0.q, my_seg = my0.r;
    int b_row = sp.warp0.hi(), b_seg = sp.warp0.lo();  // P == 0: slot 0's strip of batch b
    for (int b = 0;; ++b) {
      // Strips of this batch: q = warp + (b kBatch + k) W.
      const int q0 = warp + b * kBatch * W;
      if (q0 >= n_rows * S) break;
      float v[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = 0.0f;
      uint4 w[kBatch];
      int vec[kBatch];  // P == 0: the lane's vector of slot k's row
      int row = b_row, seg = b_seg;
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        int lane_off;
        if constexpr (P > 0) {
          row = sp.slot[k % P].hi() + (b * (kBatch / P) + k / P) * R;
          const int v = sp.slot[k % P].lo();
          lane_off = v >= 0 ? v * 16 : -1;
        } else {
          vec[k] = seg * 32 + lane;
          lane_off = vec[k] < cols ? vec[k] * 16 : -1;
        }
        w[k] = row < n_rows && lane_off >= 0
                   ? lds16(stage + uint32_t(row) * t.row_bytes + uint32_t(lane_off))
                   : make_uint4(0u, 0u, 0u, 0u);
        if constexpr (P == 0) {  // the next slot: W strips on
          row += step_rows;
          seg += step_segs;
          if (seg >= S) {
            seg -= S;
            ++row;
          }
        }
      }
      if constexpr (P == 0) {
        b_row += batch_rows;
        b_seg += batch_segs;
        if (b_seg >= S) {
          b_seg -= S;
          ++b_row;
        }
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        if constexpr (P > 0) {
          v[k] = dot16<kBf16>(w[k], xa[k % P], xb[k % P], 0.0f);
        } else {
          if (vec[k] < cols) v[k] = dot16<kBf16>(w[k], xs, vec[k], 0.0f);
        }
      }
      const float sum = warp_sum8(v, lane);
      if (writer && my_row < n_rows) part[my_seg * t.rows + row0 + my_row] = sum;
      if constexpr (P > 0) {
        my_row += (kBatch / P) * R;
      } else {
        my_row += batch_rows;
        my_seg += batch_segs;
        if (my_seg >= S) {
          my_seg -= S;
          ++my_row;
        }
      }
    }
    ring_release(ring, cur);
    cur.advance(ring.n_stages);
  }
  return !aborted;
}

// Step 2 over the ring: the tile's rows arrive chunk by chunk and every warp takes its strips of
// each (above); the partials go to `part`, S per row. No consumer barrier per chunk: the stage's
// empty mbarrier counts one arrival per warp, and every warp waits on every chunk (even one with
// no strip for it) before releasing it, so a stage can never be refilled under a warp still
// reading it. False when the launch aborted mid-tile.
template <bool kBf16>
__device__ __forceinline__ bool gemv_from_ring(const OpContext& c, const Gemv& g,
                                               const RingTile& t, const XView& xs, float* part,
                                               RingCursor cur, const StripPlan& sp,
                                               const EarlyAddends& early) {
  bool ok;
  switch (sp.P) {
    case 1: ok = gemv_strips<kBf16, 1>(c, t, xs, part, cur, sp); break;
    case 2: ok = gemv_strips<kBf16, 2>(c, t, xs, part, cur, sp); break;
    case 3: ok = gemv_strips<kBf16, 3>(c, t, xs, part, cur, sp); break;
    case 4: ok = gemv_strips<kBf16, 4>(c, t, xs, part, cur, sp); break;
    default: ok = gemv_strips<kBf16, 0>(c, t, xs, part, cur, sp); break;
  }
  mark_body_end(c);
  return finish_rows(c, g, 0, part, sp.S, !ok, early);
}

// Step 2 from global memory for activation row r: warps take whole rows.
__device__ __forceinline__ void gemv_from_global(const OpContext& c, const Gemv& g, int64_t r,
                                                 const float* xs, const XLayout& layout,
                                                 float* part) {
  const int warp = c.tid >> 5, lane = c.tid & 31, n_warps = c.n_threads >> 5;
  const int64_t row_bytes = int64_t(g.K) * (g.w_bf16 ? 2 : 4);
  const bool vec = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(g.W->ptr) % 16 == 0 &&
                   (!g.glu || reinterpret_cast<uintptr_t>(up_weight(c).ptr) % 16 == 0);
  const int n_vec = int(row_bytes / 16);
  // Body row j: row n_off + j of W, or of W_up past a GLU tile's N_tile gate rows.
  for (int j = warp; j < g.body_rows(); j += n_warps) {
    const bool up_row = j >= g.N_tile;
    const void* W = up_row ? up_weight(c).ptr : g.W->ptr;
    const int64_t n = int64_t(g.n_off) + (up_row ? j - g.N_tile : j);
    float p;
    if (vec) {
      const uint4* row =
          reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(W) + n * row_bytes);
      const XView xv = x_view(xs, layout);
      p = g.w_bf16 ? lane_dot<true>(row, n_vec, xv, lane) : lane_dot<false>(row, n_vec, xv, lane);
    } else {
      p = lane_dot_scalar(g, W, n, xs, layout, lane);
    }
    const float dot = warp_sum(p);
    if (lane == 0) part[j] = dot;
  }
  finish_rows(c, g, r, part, 1, false, EarlyAddends{});
}

}  // namespace gemv_detail

// The op, around its task's gate: `pass_gate()` waits for the task's inputs (the megakernel's
// run_consumers; false on every consumer thread when the launch aborts, and the op returns).
// Everything before it reads only the task record and the CTA's own ring state, so its cost
// overlaps the wait instead of lengthening the layer's dependency chain: operand checks, the
// ring's chunking, the strip plan's divisions.
template <typename Gate>
__device__ inline void op_gemv(const OpContext& c, Gate&& pass_gate) {
  using namespace gemv_detail;
  Gemv g;
  resolve(c, g);
  // Scratch (scratch.h gemv_scratch_floats): [red: 32 floats][x: K floats][row partials: one
  // per body row, or one per body row and strip]
  float* red = c.scratch;
  float* xs = c.scratch + kReduceFloats;
  float* part = xs + g.K;
  const RingTile t = ring_tile(*c.inst, c.record_flags, *c.ring,
                               [&](int i) -> const amk_buffer_t& { return in_buf(c, i); });
  const XLayout layout = x_layout(g);
  if (t.eligible) {  // one activation row; the producer is streaming this tile's rows
    // S partials per row (the strips of gemv_from_ring): the loader checked that they fit.
    const StripPlan sp = strip_plan(c, t, g.w_bf16);
    WeightRing& ring = *c.ring;
    // Every thread reads the cursor before finish_rows' barrier; thread 0 stores the advanced
    // one after it, so no thread can read a cursor already moved past this tile.
    const RingCursor start{ring.consumer_stage, ring.consumer_phase};
    // x is a pure function of (op, x, fused operand) within a step: buffers have one writer
    // per step and a page is reused only after all its readers (this CTA's tasks included) are
    // done. So a CTA's consecutive tiles of one projection build x once. Every thread reads the
    // key before finish_rows' barrier; thread 0 rewrites it only after that barrier.
    // COMBINE_GEMV_ADD_TILE's x is the merge of heads from m_off (in in1's place: its input 1
    // is the weight), K / head_dim of them: another cluster's merge of the same stack builds
    // its own.
    const int in1 = gemv_weight_input(c.inst->op) == 2 ? c.inst->inputs[1]
                    : has_combine_prologue(c.inst->op) ? c.inst->params.m_off
                                                       : -1;
    // The key holds the layout (bit 8) and K (bits 9..; the loader's scratch check keeps K
    // under 2^16) too: a tile of another weight dtype lays x out anew.
    const int x_key = c.inst->op | (layout.split ? 0x100 : 0) | (g.K << 9);
    const bool x_ready = ring.x_op == x_key && ring.x_in0 == c.inst->inputs[0] &&
                         ring.x_in1 == in1 && ring.x_epoch == c.epoch;
    // COMBINE_GEMV_ADD_TILE's merge reads only the blocks the step's position reached: where
    // the CTA may read the position before its gate (OpContext::pos_visible), lane 0 of warp 1
    // does (warp 0 only polls) and leaves it in the reduction space, which the gate's barrier
    // publishes; its round trip then overlaps the wait instead of preceding the partials' loads.
    const bool pos_early = has_combine_prologue(c.inst->op) && c.pos_visible && !x_ready;
    if (pos_early && c.tid == 32) reinterpret_cast<int32_t*>(red)[0] = step_position(*c.prog);
    if (!pass_gate()) return;
    const EarlyAddends early = early_addends(c, g, 0);  // the residual: after the gate
    if (!x_ready)
      build_x(c, g, 0, xs, red, layout, pos_early ? reinterpret_cast<const int32_t*>(red)[0] : -1);
    mark_body_begin(c);
    const XView xv = x_view(xs, layout);
    const bool ok = g.w_bf16 ? gemv_from_ring<true>(c, g, t, xv, part, start, sp, early)
                             : gemv_from_ring<false>(c, g, t, xv, part, start, sp, early);
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
  if (!pass_gate()) return;
  if (c.tid == 0) c.ring->x_op = -1;  // read by no thread before the op's end barrier
  for (int64_t r = 0; r < g.rows; ++r) {
    build_x(c, g, r, xs, red, layout);
    gemv_from_global(c, g, r, xs, layout, part);
    if (r + 1 < g.rows) consumer_sync(c.n_threads);  // xs and part are rebuilt for the next row
  }
}

}  // namespace amk::cuda
