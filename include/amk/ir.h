// The AMK megakernel IR (IR_SPEC §1, §5): an SM-level task DAG synchronised by counters.
//
// The IR is plain data. Passes map a Program to a Program; validate() (amk/validate.h) proves a
// program safe before anything runs it; amk/json.h reads and writes the on-disk format.
// Integers are held as int64 so that a malformed file (a negative id, a threshold of 2^40) is
// represented faithfully and rejected by validate() with a message, never truncated on load.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "amk/abi.h"

namespace amk {

inline constexpr std::string_view kIrVersion = "0.12.0";
inline constexpr std::string_view kAbiVersion = "0.12";

inline constexpr int kMaxInputs = 8;
inline constexpr int kMaxOutputs = 4;
inline constexpr int kMaxWaits = 8;
inline constexpr int kMaxRank = 4;

// ---- enums: numeric codes are canonical (IR_SPEC §1.1) and mirrored in abi.h -----------------
enum class DType : int32_t { F32 = 0, F16, BF16, F8E4M3, F8E5M2, I32, I8, I4, U8, BOOL };
enum class MemSpace : int32_t { HBM = 0, GLOBAL_SCRATCH, SMEM, REGISTER };
enum class BufferKind : int32_t { WEIGHT = 0, ACTIVATION, KV_CACHE, IO_INPUT, IO_OUTPUT, CONST };
enum class Op : int32_t {
  NOP = 0,
  COPY,
  EMBED,
  RMSNORM,
  LAYERNORM,
  GEMV_TILE,
  GEMM_TILE,
  ATTENTION_TILE,
  ROPE,
  SILU_MUL,
  GELU,
  ADD,
  MUL,
  DEQUANT,
  SOFTMAX,
  ALLREDUCE_SHARD,
  KV_APPEND,
  SAMPLE_ARGMAX,
  ATTENTION_COMBINE,
  ROPE_FREQ,  // 19: ROPE with an explicit inverse-frequency table (scaled RoPE)
  // Fused GEMV tiles (ScheduleConfig.fusion_grouping): each composes existing ops' semantics.
  RMSNORM_GEMV_TILE,   // 20: RMSNORM(x) then the GEMV_TILE body
  SILU_MUL_GEMV_TILE,  // 21: SILU_MUL(gate, up) then the GEMV_TILE body
  GEMV_ADD_TILE,       // 22: the GEMV_TILE body, then + residual over the tile's columns
  SILU_MUL_GEMV_ADD_TILE,  // 23: SILU_MUL(gate, up), the GEMV_TILE body, then + residual
  // 24: the decode attention of a layer with its prologue: per-head RMSNORM (Qwen3), ROPE of q
  // and k at the step's position, the new k/v row into the caches, then ATTENTION_TILE.
  ROPE_KV_ATTENTION_TILE,
  // 25: a gated linear unit's two projections as one tile: silu(x @ W_gate.T (+ b_gate)) *
  // (x @ W_up.T (+ b_up)) over columns [n_off, n_off + N_tile), i.e. two GEMV_TILEs and SILU_MUL.
  GEMV_GLU_TILE,
  RMSNORM_GEMV_GLU_TILE,  // 26: RMSNORM(x) first
  // 27: o_proj over the split-KV attention's partials: ATTENTION_COMBINE of a stack of
  // partials [S * n_heads, head_dim + 2] in the prologue, then the GEMV_ADD_TILE body.
  COMBINE_GEMV_ADD_TILE,
  // 28: a whole MLP over a slice of its features: RMSNORM_GEMV_GLU_TILE's activations a of
  // features [n_off, n_off + N_tile), then out += a @ W_down[:, n_off:+N_tile].T. Its output is an
  // accumulator: the tiles of one MLP add into it in any order (the validator's accumulation rule).
  RMSNORM_GEMV_GLU_DOWN_TILE,
};
inline constexpr int kNumDTypes = 10;
inline constexpr int kNumMemSpaces = 4;
inline constexpr int kNumBufferKinds = 6;
inline constexpr int kNumOps = 29;

// Names exactly as the JSON format spells them ("BF16", "GEMV_TILE", ...).
std::string_view name_of(DType v);
std::string_view name_of(MemSpace v);
std::string_view name_of(BufferKind v);
std::string_view name_of(Op v);
std::optional<DType> parse_dtype(std::string_view name);
std::optional<MemSpace> parse_memspace(std::string_view name);
std::optional<BufferKind> parse_buffer_kind(std::string_view name);
std::optional<Op> parse_op(std::string_view name);

int dtype_bits(DType d);
// Bytes for `count` elements; sub-byte packed types round up.
int64_t dtype_nbytes(DType d, int64_t count);

// WEIGHT, CONST and IO_INPUT are never written by a schedule: reading them needs no producer.
bool is_readonly_kind(BufferKind k);

// ---- the opcode registry (arity and required params, spec README) ----------------------------
struct OpSpec {
  Op op;
  int min_inputs;
  int max_inputs;
  int n_outputs;
  std::vector<std::string_view> required_params;
  std::string_view summary;
  // More outputs allowed than n_outputs (0: exactly n_outputs): GEMV_ADD_TILE and
  // COMBINE_GEMV_ADD_TILE may write their tile to a second buffer too.
  int max_outputs = 0;
  int most_outputs() const { return max_outputs > n_outputs ? max_outputs : n_outputs; }
};
// Every Op has an entry; the pointer is never null for a valid Op value.
const OpSpec& op_spec(Op op);

// PARAM_FIELDS: param name -> marshalled type, in amk_params_t order (ints, then floats).
enum class ParamType { Int32, Real };
struct ParamField {
  std::string_view name;
  ParamType type;
};
const std::vector<ParamField>& param_fields();
std::optional<ParamType> param_field_type(std::string_view name);

// A param value as it appeared: a JSON integer, a JSON real, or anything else (kept as its JSON
// text so it round-trips; validate() reports it if the key is a known field).
struct ParamValue {
  enum class Kind { Int, Real, Other };
  Kind kind = Kind::Int;
  int64_t i = 0;
  double f = 0.0;
  std::string other_json;  // Kind::Other only: the compact JSON text (e.g. "true", "\"x\"")

  static ParamValue integer(int64_t v) { return {Kind::Int, v, 0.0, {}}; }
  static ParamValue real(double v) { return {Kind::Real, 0, v, {}}; }
  static ParamValue other(std::string json) { return {Kind::Other, 0, 0.0, std::move(json)}; }
  bool is_number() const { return kind != Kind::Other; }
  double as_double() const { return kind == Kind::Int ? static_cast<double>(i) : f; }
  bool operator==(const ParamValue&) const = default;
};

// Insertion-ordered (the file's order survives a round trip). Small: linear lookup is fastest.
class Params {
 public:
  Params() = default;
  Params(std::initializer_list<std::pair<std::string, ParamValue>> init);
  const ParamValue* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  void set(std::string key, ParamValue value);
  void set_int(std::string key, int64_t v) { set(std::move(key), ParamValue::integer(v)); }
  void set_real(std::string key, double v) { set(std::move(key), ParamValue::real(v)); }
  // Numeric accessors with a default for an absent or non-numeric key.
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_real(std::string_view key, double fallback) const;
  const std::vector<std::pair<std::string, ParamValue>>& items() const { return items_; }
  bool operator==(const Params&) const = default;

 private:
  std::vector<std::pair<std::string, ParamValue>> items_;
};

// ---- records ----------------------------------------------------------------------------------
// A WEIGHT buffer that holds a box of its source tensor (IR 0.12.0): rows [row0, row0 + rows)
// and columns [col0, col0 + cols) of a rank-2 tensor, as a [rows, cols] buffer. A tensor-parallel
// step gives a cluster the rows (or columns) of its heads or features this way, and the decoders
// bind the box as a tensor of its own (amk/decoder.h weight_value).
struct SourceBox {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
  bool operator==(const SourceBox&) const = default;
};

struct Buffer {
  int64_t id = 0;
  std::string name;
  BufferKind kind = BufferKind::ACTIVATION;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  MemSpace space = MemSpace::HBM;
  std::optional<std::string> source;  // state-dict key for WEIGHT/CONST
  std::optional<SourceBox> source_box;  // WEIGHT only: the box of `source` it holds

  // Saturate at INT64_MAX on overflow (a malformed file must not wrap around).
  int64_t numel() const;
  int64_t nbytes() const;
  std::vector<int64_t> contiguous_strides() const;
  bool operator==(const Buffer&) const = default;
};

// KV caches (read by ATTENTION_TILE, written by KV_APPEND and ROPE_KV_ATTENTION_TILE;
// docs/OPCODES.md) are [n_kv_heads, max_seq, head_dim]: each KV head's history is contiguous,
// so a block of one head's keys is one run of memory (one bulk copy). Element (KV head g,
// position t, dim d) of a cache of `max_seq` positions:
inline int64_t kv_cache_offset(int64_t max_seq, int64_t head_dim, int64_t g, int64_t t,
                               int64_t d) {
  return (g * max_seq + t) * head_dim + d;
}
// The positions a cache holds (dimension 1), or -1 when `b` is not rank 3.
inline int64_t kv_cache_positions(const Buffer& b) {
  return b.shape.size() == 3 ? b.shape[1] : -1;
}

struct Wait {
  int64_t counter = 0;
  int64_t threshold = 0;
  bool operator==(const Wait&) const = default;
};

struct Task {
  int64_t id = 0;
  Op op = Op::NOP;
  std::vector<int64_t> inputs;
  std::vector<int64_t> outputs;
  int64_t out_counter = 0;
  std::vector<Wait> waits;
  Params params;
  std::optional<int64_t> sm;
  int64_t est_bytes = 0;
  int64_t est_flops = 0;
  std::string label;
  bool operator==(const Task&) const = default;
};

struct Counter {
  int64_t id = 0;
  int64_t init = 0;
  std::string note;
  bool operator==(const Counter&) const = default;
};

struct Page {
  int64_t id = 0;
  MemSpace space = MemSpace::GLOBAL_SCRATCH;
  int64_t nbytes = 0;
  int64_t live_start = -1;
  int64_t live_end = -1;
  bool operator==(const Page&) const = default;
};

struct PageAllocation {
  std::vector<std::pair<int64_t, int64_t>> buffer_to_page;  // (buffer id, page id), file order
  std::vector<Page> pages;
  int64_t total_scratch_bytes() const;
  bool operator==(const PageAllocation&) const = default;
};

// The Loop-2 search surface (IR_SPEC §5). Ordered containers keep the file's order.
struct ScheduleConfig {
  using TileSizes = std::vector<std::pair<std::string, int64_t>>;
  using ExplicitSmMap = std::vector<std::pair<int64_t, int64_t>>;  // task id -> sm
  std::vector<std::pair<std::string, TileSizes>> tiling;
  std::vector<std::vector<std::string>> fusion_grouping;
  std::variant<std::string, ExplicitSmMap> sm_assignment = std::string("load_balance");
  int64_t pipelining_depth = 2;
  std::string page_allocation = "graph_color";
  int64_t threads_per_block = 256;
  int64_t smem_bytes_per_block = 0;
  // The weight stream (docs/CUDA_VM.md "Weight streaming"): bytes of one ring stage (0: 32 KiB,
  // widened to the widest weight row) and the bytes of bulk copies one SM keeps in flight
  // (0: as many as the ring holds). Full bandwidth needs only ~32-64 KiB in flight per SM; more
  // queues every L2 round trip on the dependency chain behind weight traffic.
  int64_t stream_chunk_bytes = 0;
  int64_t stream_bytes_in_flight = 0;
  // The bound while the copies run ahead of the consumers, i.e. for a GEMV tile they have not
  // started (prefetch across a counter wait); 0: stream_bytes_in_flight. Tighter than the demand
  // bound, it leaves the memory system's queues short while other SMs finish the level the
  // waiting ones depend on, and lets streaming tiles keep more in flight.
  int64_t stream_prefetch_bytes_in_flight = 0;
  bool operator==(const ScheduleConfig&) const = default;
};

// A GPU as data (IR_SPEC §5.1). measured_bw_gbs = 0 means "not measured".
struct GpuTarget {
  std::string name;
  int64_t sm_arch = 0;
  int64_t num_sms = 0;
  int64_t smem_bytes_per_sm = 0;
  int64_t smem_bytes_per_block_optin = 0;
  int64_t regs_per_sm = 0;
  int64_t max_threads_per_sm = 0;
  int64_t max_regs_per_thread = 0;
  int64_t l2_bytes = 0;
  int64_t hbm_bytes = 0;
  double hbm_bandwidth_gbs = 0.0;
  double fp16_tflops = 0.0;
  double clock_ghz = 0.0;
  bool supports_cooperative = true;
  bool wddm_tdr = false;
  double measured_bw_gbs = 0.0;
  std::string note;

  // weight_bytes / spec bandwidth, in µs (NaN when the bandwidth is unknown).
  double bandwidth_bound_us(int64_t weight_bytes) const;
  // weight_bytes / measured bandwidth, falling back to the spec figure.
  double measured_bandwidth_bound_us(int64_t weight_bytes) const;
  bool operator==(const GpuTarget&) const = default;
};

// Built-in targets: h100, h200, b200, a100, rtx5090.
const std::vector<GpuTarget>& builtin_targets();
const GpuTarget* find_target(std::string_view name);

// ---- the program ------------------------------------------------------------------------------
struct Program {
  // meta: key -> compact JSON text of the value, in file order (values may be any JSON).
  std::vector<std::pair<std::string, std::string>> meta;
  std::optional<GpuTarget> target;
  std::vector<Buffer> buffers;
  std::vector<Counter> counters;
  std::vector<Task> tasks;
  std::optional<PageAllocation> pages;
  std::optional<ScheduleConfig> config;
  std::string ir_version{kIrVersion};
  std::string abi_version{kAbiVersion};

  // ---- builder (ids are dense: the new element's index) ----
  int64_t new_buffer(std::string name, BufferKind kind, DType dtype, std::vector<int64_t> shape,
                     MemSpace space = MemSpace::HBM, std::optional<std::string> source = {});
  int64_t new_counter(std::string note = {});
  // The returned reference is invalidated by the next add_task.
  Task& add_task(Op op, std::vector<int64_t> inputs, std::vector<int64_t> outputs,
                 int64_t out_counter, std::vector<Wait> waits = {}, Params params = {},
                 std::string label = {});

  // ---- queries ----
  int64_t total_weight_bytes() const;
  int64_t total_est_bytes() const;
  int64_t total_est_flops() const;
  // A meta value that is a JSON string, unescaped; nullopt if absent or not a string.
  std::optional<std::string> meta_string(std::string_view key) const;
  void set_meta_string(std::string key, std::string_view value);
  bool operator==(const Program&) const = default;
};

}  // namespace amk
