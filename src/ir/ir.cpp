// Enum names, the opcode registry, PARAM_FIELDS, built-in targets and the Program builder.
#include "amk/ir.h"

#include <array>
#include <cmath>
#include <limits>

namespace amk {

// ---- the IR's enum codes and caps must equal the ABI's (IR_SPEC §8) ---------------------------
static_assert(kMaxInputs == AMK_MAX_INPUTS && kMaxOutputs == AMK_MAX_OUTPUTS &&
              kMaxWaits == AMK_MAX_WAITS && kMaxRank == AMK_MAX_RANK);
static_assert(kNumDTypes == AMK_DTYPE_COUNT && kNumMemSpaces == AMK_MEM_COUNT &&
              kNumBufferKinds == AMK_BUF_COUNT && kNumOps == AMK_OP_COUNT);
static_assert(int(DType::F32) == AMK_DTYPE_F32 && int(DType::F16) == AMK_DTYPE_F16 &&
              int(DType::BF16) == AMK_DTYPE_BF16 && int(DType::F8E4M3) == AMK_DTYPE_F8E4M3 &&
              int(DType::F8E5M2) == AMK_DTYPE_F8E5M2 && int(DType::I32) == AMK_DTYPE_I32 &&
              int(DType::I8) == AMK_DTYPE_I8 && int(DType::I4) == AMK_DTYPE_I4 &&
              int(DType::U8) == AMK_DTYPE_U8 && int(DType::BOOL) == AMK_DTYPE_BOOL);
static_assert(int(MemSpace::HBM) == AMK_MEM_HBM &&
              int(MemSpace::GLOBAL_SCRATCH) == AMK_MEM_GLOBAL_SCRATCH &&
              int(MemSpace::SMEM) == AMK_MEM_SMEM && int(MemSpace::REGISTER) == AMK_MEM_REGISTER);
static_assert(int(BufferKind::WEIGHT) == AMK_BUF_WEIGHT &&
              int(BufferKind::ACTIVATION) == AMK_BUF_ACTIVATION &&
              int(BufferKind::KV_CACHE) == AMK_BUF_KV_CACHE &&
              int(BufferKind::IO_INPUT) == AMK_BUF_IO_INPUT &&
              int(BufferKind::IO_OUTPUT) == AMK_BUF_IO_OUTPUT &&
              int(BufferKind::CONST) == AMK_BUF_CONST);
static_assert(int(Op::NOP) == AMK_OP_NOP && int(Op::COPY) == AMK_OP_COPY &&
              int(Op::EMBED) == AMK_OP_EMBED && int(Op::RMSNORM) == AMK_OP_RMSNORM &&
              int(Op::LAYERNORM) == AMK_OP_LAYERNORM && int(Op::GEMV_TILE) == AMK_OP_GEMV_TILE &&
              int(Op::GEMM_TILE) == AMK_OP_GEMM_TILE &&
              int(Op::ATTENTION_TILE) == AMK_OP_ATTENTION_TILE && int(Op::ROPE) == AMK_OP_ROPE &&
              int(Op::SILU_MUL) == AMK_OP_SILU_MUL && int(Op::GELU) == AMK_OP_GELU &&
              int(Op::ADD) == AMK_OP_ADD && int(Op::MUL) == AMK_OP_MUL &&
              int(Op::DEQUANT) == AMK_OP_DEQUANT && int(Op::SOFTMAX) == AMK_OP_SOFTMAX &&
              int(Op::ALLREDUCE_SHARD) == AMK_OP_ALLREDUCE_SHARD &&
              int(Op::KV_APPEND) == AMK_OP_KV_APPEND &&
              int(Op::SAMPLE_ARGMAX) == AMK_OP_SAMPLE_ARGMAX &&
              int(Op::ATTENTION_COMBINE) == AMK_OP_ATTENTION_COMBINE &&
              int(Op::ROPE_FREQ) == AMK_OP_ROPE_FREQ &&
              int(Op::RMSNORM_GEMV_TILE) == AMK_OP_RMSNORM_GEMV_TILE &&
              int(Op::SILU_MUL_GEMV_TILE) == AMK_OP_SILU_MUL_GEMV_TILE &&
              int(Op::GEMV_ADD_TILE) == AMK_OP_GEMV_ADD_TILE &&
              int(Op::SILU_MUL_GEMV_ADD_TILE) == AMK_OP_SILU_MUL_GEMV_ADD_TILE &&
              int(Op::ROPE_KV_ATTENTION_TILE) == AMK_OP_ROPE_KV_ATTENTION_TILE &&
              int(Op::GEMV_GLU_TILE) == AMK_OP_GEMV_GLU_TILE &&
              int(Op::RMSNORM_GEMV_GLU_TILE) == AMK_OP_RMSNORM_GEMV_GLU_TILE &&
              int(Op::COMBINE_GEMV_ADD_TILE) == AMK_OP_COMBINE_GEMV_ADD_TILE &&
              int(Op::RMSNORM_GEMV_GLU_DOWN_TILE) == AMK_OP_RMSNORM_GEMV_GLU_DOWN_TILE &&
              kNumOps == AMK_OP_COUNT);

namespace {

constexpr std::array<std::string_view, kNumDTypes> kDTypeNames = {
    "F32", "F16", "BF16", "F8E4M3", "F8E5M2", "I32", "I8", "I4", "U8", "BOOL"};
constexpr std::array<int, kNumDTypes> kDTypeBits = {32, 16, 16, 8, 8, 32, 8, 4, 8, 8};
constexpr std::array<std::string_view, kNumMemSpaces> kMemSpaceNames = {"HBM", "GLOBAL_SCRATCH",
                                                                        "SMEM", "REGISTER"};
constexpr std::array<std::string_view, kNumBufferKinds> kBufferKindNames = {
    "WEIGHT", "ACTIVATION", "KV_CACHE", "IO_INPUT", "IO_OUTPUT", "CONST"};
constexpr std::array<std::string_view, kNumOps> kOpNames = {
    "NOP",   "COPY",     "EMBED",    "RMSNORM", "LAYERNORM",       "GEMV_TILE",
    "GEMM_TILE", "ATTENTION_TILE", "ROPE", "SILU_MUL", "GELU", "ADD", "MUL", "DEQUANT",
    "SOFTMAX", "ALLREDUCE_SHARD", "KV_APPEND", "SAMPLE_ARGMAX", "ATTENTION_COMBINE",
    "ROPE_FREQ", "RMSNORM_GEMV_TILE", "SILU_MUL_GEMV_TILE", "GEMV_ADD_TILE",
    "SILU_MUL_GEMV_ADD_TILE", "ROPE_KV_ATTENTION_TILE", "GEMV_GLU_TILE",
    "RMSNORM_GEMV_GLU_TILE", "COMBINE_GEMV_ADD_TILE", "RMSNORM_GEMV_GLU_DOWN_TILE"};

template <typename E, size_t N>
std::string_view lookup_name(const std::array<std::string_view, N>& names, E v) {
  const auto i = static_cast<size_t>(v);
  return i < N ? names[i] : std::string_view("<invalid>");
}

template <typename E, size_t N>
std::optional<E> lookup_value(const std::array<std::string_view, N>& names, std::string_view s) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<E>(i);
  return std::nullopt;
}

int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::numeric_limits<int64_t>::max();
  return r;
}

int64_t saturating_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::numeric_limits<int64_t>::max();
  return r;
}

}  // namespace

std::string_view name_of(DType v) { return lookup_name(kDTypeNames, v); }
std::string_view name_of(MemSpace v) { return lookup_name(kMemSpaceNames, v); }
std::string_view name_of(BufferKind v) { return lookup_name(kBufferKindNames, v); }
std::string_view name_of(Op v) { return lookup_name(kOpNames, v); }
std::optional<DType> parse_dtype(std::string_view s) { return lookup_value<DType>(kDTypeNames, s); }
std::optional<MemSpace> parse_memspace(std::string_view s) {
  return lookup_value<MemSpace>(kMemSpaceNames, s);
}
std::optional<BufferKind> parse_buffer_kind(std::string_view s) {
  return lookup_value<BufferKind>(kBufferKindNames, s);
}
std::optional<Op> parse_op(std::string_view s) { return lookup_value<Op>(kOpNames, s); }

int dtype_bits(DType d) {
  const auto i = static_cast<size_t>(d);
  return i < kDTypeBits.size() ? kDTypeBits[i] : 8;
}

int64_t dtype_nbytes(DType d, int64_t count) {
  if (count <= 0) return 0;
  const int64_t bits = saturating_mul(count, dtype_bits(d));
  return bits == std::numeric_limits<int64_t>::max() ? bits : (bits + 7) / 8;
}

bool is_readonly_kind(BufferKind k) {
  return k == BufferKind::WEIGHT || k == BufferKind::CONST || k == BufferKind::IO_INPUT;
}

const OpSpec& op_spec(Op op) {
  static const std::array<OpSpec, kNumOps> registry = {{
      {Op::NOP, 0, 0, 0, {}, "no-op"},
      {Op::COPY, 1, 1, 1, {}, "page -> page move"},
      {Op::EMBED, 2, 2, 1, {"hidden"}, "[ids, table[V,H]] -> gathered rows"},
      {Op::RMSNORM, 2, 2, 1, {"eps", "hidden"}, "x * rsqrt(mean(x^2) + eps) * w"},
      {Op::LAYERNORM, 2, 3, 1, {"eps", "hidden"}, "LayerNorm(x, w[, b])"},
      {Op::GEMV_TILE, 2, 3, 1, {"K", "N_tile", "n_off"}, "out[.., n_off:+N_tile] = x @ W.T"},
      {Op::GEMM_TILE, 2, 3, 1, {"M_tile", "K", "N_tile", "n_off"}, "tiled GEMM"},
      {Op::ATTENTION_TILE, 3, 4, 1,
       {"head_dim", "kv_start", "kv_len", "scale", "n_heads", "n_kv_heads"},
       "GQA attention over a KV window"},
      {Op::ROPE, 2, 2, 1, {"head_dim", "theta"}, "rotate-half rotary embedding"},
      {Op::SILU_MUL, 2, 2, 1, {}, "silu(gate) * up"},
      {Op::GELU, 1, 1, 1, {}, "GELU"},
      {Op::ADD, 2, 2, 1, {}, "residual add"},
      {Op::MUL, 1, 2, 1, {}, "elementwise product or scale"},
      {Op::DEQUANT, 2, 3, 1, {"qdtype", "group"}, "int4/int8 + scales -> fp"},
      {Op::SOFTMAX, 1, 1, 1, {}, "softmax over dim"},
      {Op::ALLREDUCE_SHARD, 1, 8, 1, {}, "shard sum"},
      {Op::KV_APPEND, 2, 2, 1, {"pos"}, "write new k/v into the cache at pos"},
      {Op::SAMPLE_ARGMAX, 1, 4, 1, {}, "greedy argmax, or a seeded draw (flags bit 1)"},
      {Op::ATTENTION_COMBINE, 2, 8, 1, {}, "merge split-KV flash partials"},
      {Op::ROPE_FREQ, 3, 3, 1, {"head_dim"}, "rotate-half RoPE with an inv_freq table"},
      {Op::RMSNORM_GEMV_TILE, 3, 4, 1, {"eps", "hidden", "K", "N_tile", "n_off"},
       "out[.., n_off:+N_tile] = rmsnorm(x, w) @ W.T"},
      {Op::SILU_MUL_GEMV_TILE, 3, 4, 1, {"K", "N_tile", "n_off"},
       "out[.., n_off:+N_tile] = (silu(gate) * up) @ W.T"},
      {Op::GEMV_ADD_TILE, 3, 4, 1, {"K", "N_tile", "n_off"},
       "out[.., n_off:+N_tile] = x @ W.T + residual[.., n_off:+N_tile] (and into output 1)", 2},
      {Op::SILU_MUL_GEMV_ADD_TILE, 4, 5, 1, {"K", "N_tile", "n_off"},
       "out[.., n_off:+N_tile] = (silu(gate) * up) @ W.T + residual[.., n_off:+N_tile]"},
      {Op::ROPE_KV_ATTENTION_TILE, 5, 8, 3,
       {"head_dim", "kv_start", "kv_len", "scale", "n_heads", "n_kv_heads", "flags"},
       "per-head norm + RoPE of q/k, the new KV row, then GQA attention over a KV window"},
      {Op::GEMV_GLU_TILE, 3, 5, 1, {"K", "N_tile", "n_off"},
       "out[.., n_off:+N_tile] = silu(x @ W_gate.T) * (x @ W_up.T)"},
      {Op::RMSNORM_GEMV_GLU_TILE, 4, 6, 1, {"eps", "hidden", "K", "N_tile", "n_off"},
       "out[.., n_off:+N_tile] = silu(rmsnorm(x, w) @ W_gate.T) * (rmsnorm(x, w) @ W_up.T)"},
      {Op::COMBINE_GEMV_ADD_TILE, 3, 4, 1, {"head_dim", "n_heads", "K", "N_tile", "n_off"},
       "out[.., n_off:+N_tile] = combine(partials) @ W.T + residual[.., n_off:+N_tile] (and into output 1)",
       2},
      {Op::RMSNORM_GEMV_GLU_DOWN_TILE, 5, 8, 1, {"eps", "hidden", "K", "N_tile", "n_off"},
       "acc += glu(rmsnorm(x, w))[n_off:+N_tile] @ W_down[:, n_off:+N_tile].T"},
  }};
  const auto i = static_cast<size_t>(op);
  return registry[i < registry.size() ? i : 0];
}

const std::vector<ParamField>& param_fields() {
  static const std::vector<ParamField> fields = {
      {"K", ParamType::Int32},        {"N", ParamType::Int32},       {"M", ParamType::Int32},
      {"N_tile", ParamType::Int32},   {"M_tile", ParamType::Int32},  {"n_off", ParamType::Int32},
      {"m_off", ParamType::Int32},    {"hidden", ParamType::Int32},  {"vocab", ParamType::Int32},
      {"head_dim", ParamType::Int32}, {"n_heads", ParamType::Int32}, {"n_kv_heads", ParamType::Int32},
      {"kv_start", ParamType::Int32}, {"kv_len", ParamType::Int32},  {"pos", ParamType::Int32},
      {"qdtype", ParamType::Int32},   {"flags", ParamType::Int32},   {"group", ParamType::Int32},
      {"dim", ParamType::Int32},      {"kv_stride", ParamType::Int32}, {"eps", ParamType::Real},
      {"scale", ParamType::Real},     {"theta", ParamType::Real},
  };
  return fields;
}

std::optional<ParamType> param_field_type(std::string_view name) {
  for (const auto& f : param_fields())
    if (f.name == name) return f.type;
  return std::nullopt;
}

// ---- Params -----------------------------------------------------------------------------------
Params::Params(std::initializer_list<std::pair<std::string, ParamValue>> init) {
  for (const auto& [k, v] : init) set(k, v);
}

const ParamValue* Params::find(std::string_view key) const {
  for (const auto& [k, v] : items_)
    if (k == key) return &v;
  return nullptr;
}

void Params::set(std::string key, ParamValue value) {
  for (auto& [k, v] : items_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  items_.emplace_back(std::move(key), std::move(value));
}

int64_t Params::get_int(std::string_view key, int64_t fallback) const {
  const ParamValue* v = find(key);
  if (!v || v->kind == ParamValue::Kind::Other) return fallback;
  return v->kind == ParamValue::Kind::Int ? v->i : static_cast<int64_t>(v->f);
}

double Params::get_real(std::string_view key, double fallback) const {
  const ParamValue* v = find(key);
  return v && v->is_number() ? v->as_double() : fallback;
}

// ---- records ----------------------------------------------------------------------------------
int64_t Buffer::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n = saturating_mul(n, d < 0 ? 0 : d);
  return n;
}

int64_t Buffer::nbytes() const { return dtype_nbytes(dtype, numel()); }

std::vector<int64_t> Buffer::contiguous_strides() const {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = saturating_mul(strides[i], shape[i]);
  return strides;
}

int64_t PageAllocation::total_scratch_bytes() const {
  int64_t total = 0;
  for (const Page& p : pages) total = saturating_add(total, p.nbytes);
  return total;
}

double GpuTarget::bandwidth_bound_us(int64_t weight_bytes) const {
  if (hbm_bandwidth_gbs <= 0) return std::nan("");
  return static_cast<double>(weight_bytes) / (hbm_bandwidth_gbs * 1e9) * 1e6;
}

double GpuTarget::measured_bandwidth_bound_us(int64_t weight_bytes) const {
  const double bw = measured_bw_gbs > 0 ? measured_bw_gbs : hbm_bandwidth_gbs;
  if (bw <= 0) return std::nan("");
  return static_cast<double>(weight_bytes) / (bw * 1e9) * 1e6;
}

const std::vector<GpuTarget>& builtin_targets() {
  constexpr int64_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;
  static const std::vector<GpuTarget> targets = {
      {"h100", 90, 132, 233472, 232448, 65536, 2048, 255, 50 * MiB, 80 * GiB, 3350.0, 989.0, 1.98,
       true, false, 3100.0,
       "Hopper SXM5, HBM3. measured_bw_gbs: 16-byte streaming read over 4 GiB, this workplace, "
       "2026-11-22."},
      {"h200", 90, 132, 233472, 232448, 65536, 2048, 255, 60 * MiB, 141 * GiB, 4800.0, 989.0, 1.98,
       true, false, 4450.0,
       "Hopper H200, HBM3e. measured_bw_gbs: 16-byte streaming read over 4 GiB, this workplace, "
       "2026-11-22."},
      {"b200", 100, 148, 233472, 232448, 65536, 2048, 255, 50 * MiB, 192 * GiB, 8000.0, 2250.0,
       1.86, true, false, 0.0, "Datacenter Blackwell, HBM3e. Spec only."},
      {"a100", 80, 108, 167936, 166912, 65536, 2048, 255, 40 * MiB, 40 * GiB, 1555.0, 312.0, 1.41,
       true, false, 0.0, "Ampere SXM4 40GB, HBM2e. Spec only."},
      {"rtx5090", 120, 82, 102400, 101376, 65536, 2048, 255, 64 * MiB, 24 * GiB, 896.0, 210.0,
       1.597, true, true, 0.0,
       "Blackwell laptop GB203, sm_120, WDDM display GPU (~2 s TDR). Spec only."},
  };
  return targets;
}

const GpuTarget* find_target(std::string_view name) {
  for (const GpuTarget& t : builtin_targets())
    if (t.name == name) return &t;
  return nullptr;
}

// ---- Program ----------------------------------------------------------------------------------
int64_t Program::new_buffer(std::string name, BufferKind kind, DType dtype,
                            std::vector<int64_t> shape, MemSpace space,
                            std::optional<std::string> source) {
  const auto id = static_cast<int64_t>(buffers.size());
  buffers.push_back(Buffer{id, std::move(name), kind, dtype, std::move(shape), space,
                           std::move(source)});
  return id;
}

int64_t Program::new_counter(std::string note) {
  const auto id = static_cast<int64_t>(counters.size());
  counters.push_back(Counter{id, 0, std::move(note)});
  return id;
}

Task& Program::add_task(Op op, std::vector<int64_t> inputs, std::vector<int64_t> outputs,
                        int64_t out_counter, std::vector<Wait> waits, Params params,
                        std::string label) {
  Task t;
  t.id = static_cast<int64_t>(tasks.size());
  t.op = op;
  t.inputs = std::move(inputs);
  t.outputs = std::move(outputs);
  t.out_counter = out_counter;
  t.waits = std::move(waits);
  t.params = std::move(params);
  t.label = std::move(label);
  tasks.push_back(std::move(t));
  return tasks.back();
}

int64_t Program::total_weight_bytes() const {
  int64_t total = 0;
  for (const Buffer& b : buffers)
    if (b.kind == BufferKind::WEIGHT) total = saturating_add(total, b.nbytes());
  return total;
}

int64_t Program::total_est_bytes() const {
  int64_t total = 0;
  for (const Task& t : tasks) total = saturating_add(total, t.est_bytes);
  return total;
}

int64_t Program::total_est_flops() const {
  int64_t total = 0;
  for (const Task& t : tasks) total = saturating_add(total, t.est_flops);
  return total;
}

}  // namespace amk
