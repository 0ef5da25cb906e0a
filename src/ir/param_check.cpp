// Params against buffer shapes: a task whose params address outside its buffers (a GEMV tile
// past the weight's rows or the output's columns, K that is not x's last dimension or the
// weight's columns, an append past the cache's rows, an attention window past them or head
// counts that disagree with the cache, a norm whose hidden is not x's last dimension) would
// only fail in the VM, after other tasks may have written GPU memory. validate() rejects it
// first. Driven by op; each check mirrors the reference op's (src/vm/reference/ops/), and is
// skipped where a param is missing or malformed or a buffer reference is bad (those are
// reported by the structural checks).
#include <cstdint>
#include <optional>
#include <string>

#include "ir/validate_context.h"

namespace amk::detail {

namespace {

// An int32 param (a larger one is already an error of its own), or nullopt.
std::optional<int64_t> int_param(const Task& task, std::string_view key) {
  const ParamValue* v = task.params.find(key);
  if (!v || v->kind != ParamValue::Kind::Int || v->i < INT32_MIN || v->i > INT32_MAX)
    return std::nullopt;
  return v->i;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

struct TaskParams {
  const Program& p;
  int32_t t;
  Diagnostics& d;
  const Task& task() const { return p.tasks[static_cast<size_t>(t)]; }

  // Buffer `i` of inputs (or outputs), or nullptr when absent or a bad reference.
  const Buffer* in(size_t i) const { return at(task().inputs, i); }
  const Buffer* out(size_t i) const { return at(task().outputs, i); }
  const Buffer* at(const std::vector<int64_t>& list, size_t i) const {
    if (i >= list.size() || list[i] < 0 || list[i] >= static_cast<int64_t>(p.buffers.size()))
      return nullptr;
    return &p.buffers[static_cast<size_t>(list[i])];
  }
  std::string ref(const Buffer& b) const {
    return "buffer " + buffer_ref(p, static_cast<int32_t>(&b - p.buffers.data())) + " shape " +
           shape_text(b.shape);
  }
  void error(const std::string& what) const {
    d.error("task " + task_ref(p, t) + " " + std::string(name_of(task().op)) + ": " + what +
            " (params address outside the buffers)");
  }
};

void check_gemv(const TaskParams& c, size_t x_at, size_t w_at) {
  const auto K = int_param(c.task(), "K"), n_off = int_param(c.task(), "n_off"),
             n_tile = int_param(c.task(), "N_tile");
  if (!K || !n_off || !n_tile || *K < 1 || *n_off < 0 || *n_tile < 1) return;
  const int64_t end = *n_off + *n_tile;  // int32 params: no int64 overflow
  if (const Buffer* x = c.in(x_at); x && !x->shape.empty() && x->shape.back() != *K)
    c.error("param K " + std::to_string(*K) + " is not the last dimension of input " +
            std::to_string(x_at) + " (x) " + c.ref(*x));
  if (const Buffer* w = c.in(w_at); w && w->shape.size() == 2) {
    if (end > w->shape[0])
      c.error("param n_off " + std::to_string(*n_off) + " + N_tile " + std::to_string(*n_tile) +
              " exceeds the weight rows N " + std::to_string(w->shape[0]) + " of input " +
              std::to_string(w_at) + " (weight) " + c.ref(*w));
    if (w->shape[1] != *K)
      c.error("param K " + std::to_string(*K) + " is not the columns of input " +
              std::to_string(w_at) + " (weight) " + c.ref(*w));
  }
  if (const Buffer* o = c.out(0); o && !o->shape.empty() && end > o->shape.back())
    c.error("param n_off " + std::to_string(*n_off) + " + N_tile " + std::to_string(*n_tile) +
            " exceeds the columns of output 0 " + c.ref(*o));
}

void check_norm(const TaskParams& c) {
  const auto hidden = int_param(c.task(), "hidden");
  if (!hidden || *hidden < 1) return;
  if (const Buffer* x = c.in(0); x && !x->shape.empty() && x->shape.back() != *hidden)
    c.error("param hidden " + std::to_string(*hidden) +
            " is not the last dimension of input 0 (x) " + c.ref(*x));
}

void check_kv_append(const TaskParams& c) {
  const auto pos = int_param(c.task(), "pos");
  const Buffer* fresh = c.in(0);
  const Buffer* cache = c.in(1);
  if (!pos || *pos < 0 || !fresh || !cache || cache->shape.size() != 3) return;
  int64_t row = 0;
  const int64_t numel = fresh->numel();
  if (__builtin_mul_overflow(cache->shape[1], cache->shape[2], &row) || row < 1 || numel < 1 || numel % row != 0) {
    c.error("input 0 (new) " + c.ref(*fresh) +
            " is not a positive multiple of the cache row of input 1 (cache) " + c.ref(*cache));
    return;
  }
  // With flags bit 0 pos is an offset from the step's position (>= 0): still a lower bound.
  const int64_t n = numel / row;
  if (*pos > cache->shape[0] - n)
    c.error("param pos " + std::to_string(*pos) + " + " + std::to_string(n) +
            " new row(s) exceeds the rows of input 1 (cache) " + c.ref(*cache));
}

void check_attention(const TaskParams& c, size_t k_at) {
  const auto kv_start = int_param(c.task(), "kv_start"), kv_len = int_param(c.task(), "kv_len"),
             head_dim = int_param(c.task(), "head_dim"), n_kv = int_param(c.task(), "n_kv_heads");
  for (size_t i = k_at; i < k_at + 2; ++i) {
    const Buffer* cache = c.in(i);
    if (!cache) continue;
    const std::string which =
        "input " + std::to_string(i) + (i == k_at ? " (k cache) " : " (v cache) ") + c.ref(*cache);
    if (cache->shape.size() != 3) {
      c.error(which + " is not [max_seq, n_kv_heads, head_dim]");
      continue;
    }
    if (kv_start && kv_len && *kv_start >= 0 && *kv_len >= 0 &&
        *kv_start + *kv_len > cache->shape[0])
      c.error("params kv_start " + std::to_string(*kv_start) + " + kv_len " +
              std::to_string(*kv_len) + " exceed the rows of " + which);
    if (head_dim && *head_dim != cache->shape[2])
      c.error("param head_dim " + std::to_string(*head_dim) + " disagrees with " + which);
    if (n_kv && *n_kv != cache->shape[1])
      c.error("param n_kv_heads " + std::to_string(*n_kv) + " disagrees with " + which);
  }
}

}  // namespace

void check_task_params(const Program& p, Diagnostics& d) {
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    const TaskParams c{p, static_cast<int32_t>(t), d};
    switch (p.tasks[t].op) {
      case Op::GEMV_TILE:
      case Op::GEMM_TILE:
      case Op::GEMV_ADD_TILE:
        check_gemv(c, 0, 1);
        break;
      case Op::RMSNORM_GEMV_TILE:
      case Op::SILU_MUL_GEMV_TILE:
      case Op::SILU_MUL_GEMV_ADD_TILE:
        check_gemv(c, 0, 2);
        if (p.tasks[t].op == Op::RMSNORM_GEMV_TILE) check_norm(c);
        break;
      case Op::RMSNORM:
      case Op::LAYERNORM:
        check_norm(c);
        break;
      case Op::KV_APPEND:
        check_kv_append(c);
        break;
      case Op::ATTENTION_TILE:
        check_attention(c, 1);
        break;
      case Op::ROPE_KV_ATTENTION_TILE:
        check_attention(c, 3);
        break;
      default:
        break;
    }
  }
}

}  // namespace amk::detail
