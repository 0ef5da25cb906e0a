#include "vm/cuda/attention_tile_check.h"

#include <fmt/format.h>

#include <cstdint>

#include "amk/op_flags.h"
#include "amk/op_traits.h"
#include "vm/cuda/buffer_text.h"
#include "vm/cuda/ops/scratch.h"

namespace amk::cuda {

namespace {

bool f32_or_bf16(int32_t dtype) { return dtype == AMK_DTYPE_F32 || dtype == AMK_DTYPE_BF16; }

// What both ops share (the device's attention_setup): q the query rows as given, k / v the caches.
std::string shared_error(const amk_instruction_t& inst, const amk_buffer_t& q,
                         const amk_buffer_t& k, const amk_buffer_t& v, const amk_buffer_t& out,
                         int32_t known_flags) {
  const amk_params_t& p = inst.params;
  if (p.head_dim < 1 || p.head_dim > kOpMaxHeadDim || p.n_heads < 1 || p.n_kv_heads < 1 ||
      p.n_heads % p.n_kv_heads != 0)
    return fmt::format("head_dim {} (1..{}), n_heads {} and n_kv_heads {} (dividing it) do not fit",
                       p.head_dim, kOpMaxHeadDim, p.n_heads, p.n_kv_heads);
  if (p.kv_start < 0 || p.kv_len < 0)
    return fmt::format("the window kv_start {}, kv_len {} is negative", p.kv_start, p.kv_len);
  if ((p.flags & ~known_flags) != 0)
    return fmt::format("flags {} has bits the op does not know", p.flags);
  // A strided window's runs are whole 64-key blocks (the device's block staging).
  if (p.kv_stride < 0 ||
      (p.kv_stride > 0 && (p.kv_len < kAttnBlockKeys || p.kv_len % kAttnBlockKeys != 0 ||
                           p.kv_stride < p.kv_len)))
    return fmt::format("kv_stride {} with runs of kv_len {}: runs must be whole 64-key blocks "
                       "no longer than the stride",
                       p.kv_stride, p.kv_len);
  const int rep = p.n_heads / p.n_kv_heads;
  const bool ranged = p.N_tile != 0;
  if (ranged ? (p.n_off < 0 || p.N_tile < 1 || p.n_off % rep != 0 || p.N_tile % rep != 0 ||
                int64_t(p.n_off) + p.N_tile > p.n_heads)
             : p.n_off != 0)
    return fmt::format("the head range n_off {}, N_tile {} is not whole GQA groups of {} within "
                       "{} heads",
                       p.n_off, p.N_tile, rep, p.n_heads);
  const int count = ranged ? p.N_tile : p.n_heads;
  const bool partial = (p.flags & AMK_ATTN_FLAG_PARTIAL) != 0;
  const int64_t width = partial ? int64_t(p.head_dim) + 2 : p.head_dim;
  const bool slice =
      attention_flags::writes_head_slice(partial, count, p.n_heads, p.head_dim, out.numel);
  const int64_t slab = int64_t(p.n_heads) * width;
  const bool stack =
      attention_flags::writes_partial_stack(partial, count, p.n_heads, p.head_dim, out.numel);
  if (stack ? (p.m_off < 0 || int64_t(p.m_off) >= out.numel / slab) : p.m_off != 0)
    return fmt::format("m_off {} is not a slab of the output's {}", p.m_off,
                       stack ? out.numel / slab : 1);
  const int64_t max_seq = k.rank == 3 ? k.shape[1] : 0;
  if (q.numel != int64_t(p.n_heads) * p.head_dim)
    return fmt::format("q has {} elements, not n_heads x head_dim = {}", q.numel,
                       int64_t(p.n_heads) * p.head_dim);
  if (k.rank != 3 || k.shape[0] != p.n_kv_heads || k.shape[2] != p.head_dim || v.rank != 3 ||
      v.shape[0] != k.shape[0] || v.shape[1] != k.shape[1] || v.shape[2] != k.shape[2])
    return fmt::format("the caches {} and {} are not [n_kv_heads {}, max_seq, head_dim {}] alike",
                       shape_text(k), shape_text(v), p.n_kv_heads, p.head_dim);
  if (int64_t(p.kv_start) + p.kv_len > max_seq)
    return fmt::format("the window [{}, {}) passes the cache's {} positions", p.kv_start,
                       int64_t(p.kv_start) + p.kv_len, max_seq);
  if (!slice && !stack && out.numel != int64_t(count) * width)
    return fmt::format("the output has {} elements, not {} heads x {}", out.numel, count, width);
  if (q.dtype != AMK_DTYPE_F32 || !f32_or_bf16(k.dtype) || v.dtype != k.dtype ||
      out.dtype != AMK_DTYPE_F32)
    return fmt::format("dtypes q {}, caches {} / {}, output {}: q and the output F32, the caches "
                       "F32 or BF16 alike",
                       q.dtype, k.dtype, v.dtype, out.dtype);
  return {};
}

// ROPE_KV_ATTENTION_TILE's own (the device's rope_kv_check before the gate).
std::string rope_kv_error(const amk_task_record_t& r, const MegakernelLayout& layout) {
  const amk_instruction_t& inst = r.inst;
  const amk_params_t& p = inst.params;
  const bool norm = (p.flags & AMK_ATTN_FLAG_HEAD_NORM) != 0;
  const bool table = (p.flags & AMK_ATTN_FLAG_ROPE_TABLE) != 0;
  const int want_inputs = 5 + (norm ? 2 : 0) + (table ? 1 : 0);
  if (inst.n_inputs != want_inputs || inst.n_outputs != 3)
    return fmt::format("{} inputs and {} outputs, not {} and 3 for flags {}", inst.n_inputs,
                       inst.n_outputs, want_inputs, p.flags);
  if ((p.flags & AMK_ATTN_FLAG_RUNTIME_WINDOW) == 0)
    return "no runtime window (flags bit 2): the fused op appends the step's own row";
  const amk_buffer_t& q = r.desc[0];
  const amk_buffer_t& k = r.desc[1];
  const amk_buffer_t& v = r.desc[2];
  const amk_buffer_t& out = r.desc[inst.n_inputs];
  const amk_buffer_t& kc = r.desc[inst.n_inputs + 1];
  const amk_buffer_t& vc = r.desc[inst.n_inputs + 2];
  const int32_t known = AMK_ATTN_FLAG_CAUSAL | AMK_ATTN_FLAG_PARTIAL |
                        AMK_ATTN_FLAG_RUNTIME_WINDOW | AMK_ATTN_FLAG_HEAD_NORM |
                        AMK_ATTN_FLAG_ROPE_TABLE;
  if (std::string e = shared_error(inst, q, kc, vc, out, known); !e.empty()) return e;
  const int D = p.head_dim;
  if (D % 2 != 0) return fmt::format("head_dim {} is odd: RoPE rotates pairs", D);
  if (k.numel != int64_t(p.n_kv_heads) * D || v.numel != k.numel)
    return fmt::format("the new k / v rows have {} / {} elements, not n_kv_heads x head_dim = {}",
                       k.numel, v.numel, int64_t(p.n_kv_heads) * D);
  if (!f32_or_bf16(k.dtype) || !f32_or_bf16(v.dtype))
    return fmt::format("the new k / v rows' dtypes {} / {} are not F32 or BF16", k.dtype,
                       v.dtype);
  if (!table && !(p.theta > 0.0f))
    return fmt::format("theta {} must be > 0 without an inv_freq table", p.theta);
  if (norm && (r.desc[5].numel != D || r.desc[6].numel != D || !(p.eps >= 0.0f)))
    return fmt::format("the head norm's weights ({} and {} elements) and eps {} do not fit "
                       "head_dim {}",
                       r.desc[5].numel, r.desc[6].numel, p.eps, D);
  if (table && r.desc[inst.n_inputs - 1].numel != D / 2)
    return fmt::format("the inv_freq table has {} elements, not head_dim / 2 = {}",
                       r.desc[inst.n_inputs - 1].numel, D / 2);
  const int count = p.N_tile != 0 ? p.N_tile : p.n_heads;
  const int kv = count / (p.n_heads / p.n_kv_heads);
  if (const int64_t need = 4 * int64_t(rope_kv_prologue_floats(count, kv, D, norm));
      need > layout.scratch_bytes)
    return fmt::format("the prologue needs {} bytes of op scratch; the layout has {}", need,
                       layout.scratch_bytes);
  return {};
}

}  // namespace

std::string check_attention_tile(const amk_task_record_t& r, const MegakernelLayout& layout) {
  const amk_instruction_t& inst = r.inst;
  if (inst.op == AMK_OP_ROPE_KV_ATTENTION_TILE) return rope_kv_error(r, layout);
  if (inst.n_inputs < 3 || inst.n_outputs < 1)
    return fmt::format("{} inputs and {} outputs, not q, k, v and an output", inst.n_inputs,
                       inst.n_outputs);
  return shared_error(inst, r.desc[0], r.desc[1], r.desc[2], r.desc[inst.n_inputs],
                      AMK_ATTN_FLAG_CAUSAL | AMK_ATTN_FLAG_PARTIAL | AMK_ATTN_FLAG_RUNTIME_WINDOW);
}

}  // namespace amk::cuda
