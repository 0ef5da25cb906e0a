// Program -> ABI tables (marshal.h). Every refusal happens here, on the CPU, before any device
// memory is touched: what the megakernel receives is always something it has code for.
#include "vm/cuda/marshal.h"

#include "amk/knob_space.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <unordered_map>

#include "amk/op_flags.h"
#include "amk/op_traits.h"
#include "vm/cuda/attention_tile_check.h"
#include "vm/cuda/buffer_text.h"
#include "vm/cuda/gemv_tile_check.h"
#include "vm/cuda/ops/gemv_strips.h"
#include "vm/cuda/ops/scratch.h"

namespace amk::cuda {

namespace {

constexpr int64_t kArenaAlignment = 256;   // cudaMalloc's alignment: every arena slot keeps it
constexpr int kDefaultChunkBytes = 32768;  // one ring stage when every weight row fits
// The floor for every op: the reductions (block_sum's 32 floats, SAMPLE_ARGMAX's per-warp
// bests), also the GEMV's room beside its x vector.
constexpr int64_t kSmallOpScratch = kReductionScratchBytes;

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

std::string task_name(const Task& t) {
  return t.label.empty() ? fmt::format("task {} ({})", t.id, name_of(t.op))
                         : fmt::format("task {} '{}' ({})", t.id, t.label, name_of(t.op));
}

bool device_implements(Op op) {
  switch (op) {
    case Op::NOP:
    case Op::COPY:
    case Op::EMBED:
    case Op::RMSNORM:
    case Op::GEMV_TILE:
    case Op::ATTENTION_TILE:
    case Op::ROPE:
    case Op::SILU_MUL:
    case Op::ADD:
    case Op::ALLREDUCE_SHARD:
    case Op::KV_APPEND:
    case Op::SAMPLE_ARGMAX:
    case Op::ATTENTION_COMBINE:
    case Op::ROPE_KV_ATTENTION_TILE:
    case Op::ROPE_FREQ:
    case Op::RMSNORM_GEMV_TILE:
    case Op::SILU_MUL_GEMV_TILE:
    case Op::GEMV_ADD_TILE:
    case Op::SILU_MUL_GEMV_ADD_TILE:
    case Op::GEMV_GLU_TILE:
    case Op::RMSNORM_GEMV_GLU_TILE:
    case Op::COMBINE_GEMV_ADD_TILE:
      return true;
    default:
      return false;
  }
}

bool device_dtype(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::I32; }

// Everything the marshaller looks up by IR id.
struct IdMaps {
  std::unordered_map<int64_t, int32_t> buffer_pos, counter_pos;
  std::unordered_map<int64_t, const Buffer*> buffer_by_id;

  int32_t buffer(int64_t id, const Task& t) const {
    const auto it = buffer_pos.find(id);
    if (it == buffer_pos.end())
      throw MarshalError(fmt::format("{} names buffer {}, which does not exist", task_name(t), id));
    return it->second;
  }
  int32_t counter(int64_t id, const Task& t) const {
    const auto it = counter_pos.find(id);
    if (it == counter_pos.end())
      throw MarshalError(
          fmt::format("{} names counter {}, which does not exist", task_name(t), id));
    return it->second;
  }
};

amk_buffer_t abi_buffer(const Buffer& b) {
  if (!device_dtype(b.dtype))
    throw MarshalError(fmt::format("buffer {} '{}' has dtype {}; the CUDA VM handles F32, BF16 and "
                                   "I32 only",
                                   b.id, b.name, name_of(b.dtype)));
  if (b.shape.size() > size_t(AMK_MAX_RANK))
    throw MarshalError(fmt::format("buffer {} '{}' has rank {} (at most {})", b.id, b.name,
                                   b.shape.size(), AMK_MAX_RANK));
  amk_buffer_t a{};
  a.ptr = nullptr;
  a.numel = b.numel();
  a.rank = int32_t(b.shape.size());
  a.dtype = int32_t(b.dtype);
  a.space = int32_t(b.space);
  a.pad = 0;
  const std::vector<int64_t> strides = b.contiguous_strides();
  for (size_t d = 0; d < b.shape.size(); ++d) {
    a.shape[d] = b.shape[d];
    a.stride[d] = strides[d];
  }
  return a;
}

// Activations go to the scratch arena: each page of the PageAllocation gets one 256-aligned slot
// (pages one after another, so two pages never share bytes whatever their live ranges), a buffer
// bound to a page takes that page's offset, and an unpaged activation gets a slot of its own.
// Everything else owns its allocation (weights, caches, IO and CONST persist across launches).
void place_buffers(const Program& program, const IdMaps& ids, MarshalledProgram& out) {
  std::unordered_map<int64_t, int64_t> page_offset, page_bytes;
  std::unordered_map<int64_t, int64_t> buffer_page;
  int64_t arena = 0;
  if (program.pages) {
    for (const Page& page : program.pages->pages) {
      page_offset[page.id] = arena;
      page_bytes[page.id] = page.nbytes;
      arena += round_up(std::max<int64_t>(page.nbytes, 1), kArenaAlignment);
    }
    for (const auto& [buffer, page] : program.pages->buffer_to_page) buffer_page[buffer] = page;
  }
  out.placement.resize(out.buffer_ids.size());
  for (size_t i = 0; i < out.buffer_ids.size(); ++i) {
    const Buffer& b = *ids.buffer_by_id.at(out.buffer_ids[i]);
    BufferPlacement& p = out.placement[i];
    p.nbytes = b.nbytes();
    if (b.kind != BufferKind::ACTIVATION) continue;  // Own
    p.where = BufferPlacement::Where::Arena;
    const auto bound = buffer_page.find(b.id);
    if (bound != buffer_page.end()) {
      const auto off = page_offset.find(bound->second);
      if (off == page_offset.end())
        throw MarshalError(fmt::format("buffer {} '{}' is bound to page {}, which does not exist",
                                       b.id, b.name, bound->second));
      if (p.nbytes > page_bytes[bound->second])
        throw MarshalError(fmt::format("buffer {} '{}' ({} bytes) does not fit its page {} ({} "
                                       "bytes)",
                                       b.id, b.name, p.nbytes, bound->second,
                                       page_bytes[bound->second]));
      p.arena_offset = off->second;
    } else {
      p.arena_offset = arena;
      arena += round_up(std::max<int64_t>(p.nbytes, 1), kArenaAlignment);
    }
  }
  out.arena_bytes = arena;
}

void check_task(const Task& t, int32_t n_sms) {
  if (!device_implements(t.op))
    throw MarshalError(fmt::format("{}: the CUDA VM has no device code for {}", task_name(t),
                                   name_of(t.op)));
  // GEMV_ADD_TILE's second output (the initial value of RMSNORM_GEMV_GLU_DOWN_TILE's
  // accumulator, which has no device code either: bench/attempts/glu-down-device.patch) would
  // be left unwritten.
  if (is_gemv_family(t.op) && t.outputs.size() > 1)
    throw MarshalError(fmt::format("{}: the CUDA VM writes one output of {}; a second output "
                                   "(fusion group [gemv, silu_mul, gemv]) has no device code",
                                   task_name(t), name_of(t.op)));
  if (is_gemv_family(t.op)) {
    const int64_t qdtype = t.params.get_int("qdtype", 0);
    if (qdtype < 0 || qdtype > 2)
      throw MarshalError(fmt::format("{}: qdtype {} is not supported on the CUDA VM (0, 1 or 2)",
                                     task_name(t), qdtype));
  }
  if (!t.sm) throw MarshalError(fmt::format("{} has no SM assignment", task_name(t)));
  if (*t.sm < 0 || *t.sm >= n_sms)
    throw MarshalError(
        fmt::format("{} is assigned to SM {}, outside the grid of {} SMs", task_name(t), *t.sm,
                    n_sms));
  if (t.inputs.size() > size_t(AMK_MAX_INPUTS) || t.outputs.size() > size_t(AMK_MAX_OUTPUTS) ||
      t.waits.size() > size_t(AMK_MAX_WAITS))
    throw MarshalError(fmt::format("{} has more operands or waits than the ABI holds",
                                   task_name(t)));
}

amk_instruction_t instruction(const Task& t, const IdMaps& ids,
                              const std::unordered_map<int64_t, int64_t>& counter_init) {
  amk_instruction_t in{};
  in.op = int32_t(t.op);
  in.n_inputs = int32_t(t.inputs.size());
  in.n_outputs = int32_t(t.outputs.size());
  in.n_waits = int32_t(t.waits.size());
  std::fill(std::begin(in.inputs), std::end(in.inputs), -1);
  std::fill(std::begin(in.outputs), std::end(in.outputs), -1);
  std::fill(std::begin(in.wait_counter), std::end(in.wait_counter), -1);
  for (size_t i = 0; i < t.inputs.size(); ++i) in.inputs[i] = ids.buffer(t.inputs[i], t);
  for (size_t i = 0; i < t.outputs.size(); ++i) in.outputs[i] = ids.buffer(t.outputs[i], t);
  for (size_t i = 0; i < t.waits.size(); ++i) {
    in.wait_counter[i] = ids.counter(t.waits[i].counter, t);
    // The device counts from 0 each epoch, the IR from the counter's init: a wait for
    // `threshold` is a wait for threshold - init signals (none when that is <= 0).
    const int64_t signals = t.waits[i].threshold - counter_init.at(t.waits[i].counter);
    in.wait_threshold[i] = int32_t(std::clamp<int64_t>(signals, 0, INT32_MAX));
  }
  in.out_counter = ids.counter(t.out_counter, t);
  in.sm = int32_t(*t.sm);
  in.params = marshal_params(t.params);
  return in;
}

// The SAMPLE_ARGMAX every other task happens-before, or -1. Happens-before is followed through
// all-join waits only (threshold >= the counter's producers): a partial wait orders no
// particular producer, so it cannot prove that a task of step s is done before step s + 1.
int32_t find_sink(const Program& program, const MarshalledProgram& m) {
  const size_t n_tasks = m.instructions.size();
  const size_t n_counters = m.counter_step_increment.size();
  std::vector<std::vector<int32_t>> producers(n_counters);
  for (size_t i = 0; i < n_tasks; ++i)
    producers[size_t(m.instructions[i].out_counter)].push_back(int32_t(i));

  int32_t sink = -1;
  for (size_t s = 0; s < n_tasks; ++s) {
    if (program.tasks[s].op != Op::SAMPLE_ARGMAX) continue;
    std::vector<uint8_t> reached(n_tasks, 0), counter_seen(n_counters, 0);
    std::vector<int32_t> stack{int32_t(s)};
    reached[s] = 1;
    size_t count = 1;
    while (!stack.empty()) {
      const amk_instruction_t& in = m.instructions[size_t(stack.back())];
      stack.pop_back();
      for (int w = 0; w < in.n_waits; ++w) {
        const size_t c = size_t(in.wait_counter[w]);
        if (counter_seen[c] || uint32_t(in.wait_threshold[w]) < m.counter_step_increment[c])
          continue;
        counter_seen[c] = 1;
        for (int32_t p : producers[c])
          if (!reached[size_t(p)]) {
            reached[size_t(p)] = 1;
            ++count;
            stack.push_back(p);
          }
      }
    }
    if (count != n_tasks) continue;
    if (sink >= 0) return -1;  // two sinks would each have to precede the other: not a sink
    sink = int32_t(s);
  }
  return sink;
}

int32_t int32_scalar_buffer(const Program& program, const IdMaps& ids, std::string_view name) {
  for (const Buffer& b : program.buffers)
    if (b.name == name && b.dtype == DType::I32 && b.numel() >= 1) return ids.buffer_pos.at(b.id);
  return -1;
}

// The op scratch a GEMV-family tile needs (ops/scratch.h gemv_scratch_floats): its partials
// counted per ring strip, the larger of its two paths, since whether its rows stream through the
// ring is known only once the buffers have addresses (task_records).
int64_t gemv_scratch_bytes(const Task& t, const IdMaps& ids) {
  const int64_t K = std::max<int64_t>(t.params.get_int("K", 0), 1);
  const int64_t n_tile = std::clamp<int64_t>(t.params.get_int("N_tile", 1), 1, 1 << 16);
  const size_t wi = gemv_weight_input(t.op);
  const int64_t bits = t.inputs.size() > wi ? dtype_bits(ids.buffer_by_id.at(t.inputs[wi])->dtype)
                                            : 32;
  const int64_t strips = gemv_strips_per_row(K * std::max<int64_t>(bits, 8) / 8);
  return 4 * gemv_scratch_floats(K, n_tile * gemv_weight_count(t.op), std::max<int64_t>(strips, 1));
}

// An attention task's query heads and their KV heads: a head range (N_tile) runs N_tile query
// heads over N_tile / (n_heads / n_kv_heads) KV heads. Clamped; kv 0 where the heads are malformed.
struct AttentionHeads {
  int64_t heads = 0, kv = 0;
};
AttentionHeads attention_task_heads(const Task& t) {
  const int64_t all_heads = std::clamp<int64_t>(t.params.get_int("n_heads", 0), 0, 1 << 16);
  const int64_t all_kv = std::clamp<int64_t>(t.params.get_int("n_kv_heads", 0), 0, 1 << 16);
  const int64_t range = std::clamp<int64_t>(t.params.get_int("N_tile", 0), 0, 1 << 16);
  const int64_t heads = range > 0 ? std::min(range, all_heads) : all_heads;
  const int64_t kv =
      all_kv > 0 && all_heads % all_kv == 0 && all_heads > 0 ? heads / (all_heads / all_kv) : 0;
  return {heads, kv};
}

// The op scratch a task needs in shared memory (bytes); ops/scratch.h says what each device op
// uses.
int64_t task_scratch_bytes(const Task& t, const IdMaps& ids, int consumer_threads) {
  if (is_gemv_family(t.op)) return gemv_scratch_bytes(t, ids);
  const int64_t head_dim = std::clamp<int64_t>(t.params.get_int("head_dim", 0), 0, kOpMaxHeadDim);
  switch (t.op) {
    case Op::ROPE:
    case Op::ROPE_FREQ:
      return std::max<int64_t>(rope_scratch_bytes(int(head_dim)), kSmallOpScratch);
    case Op::ATTENTION_TILE:
    case Op::ROPE_KV_ATTENTION_TILE: {
      // Optional, but without it a CTA cannot split a head's keys over its idle warps.
      const auto [heads, kv] = attention_task_heads(t);
      const int64_t attention = std::max<int64_t>(
          attention_split_scratch_bytes(int(head_dim), int(heads), int(kv), consumer_threads),
          kSmallOpScratch);
      // The fused op's prologue comes first (ops/attention.cuh): its q heads, the cos / sin
      // table (head_dim doubles), its KV heads' new row and the head norm's weights, each
      // rounded to 16 bytes.
      if (t.op != Op::ROPE_KV_ATTENTION_TILE) return attention;
      const bool head_norm = (t.params.get_int("flags", 0) & attention_flags::kHeadNorm) != 0;
      return attention +
             4 * int64_t(rope_kv_prologue_floats(int(heads), int(kv), int(head_dim), head_norm));
    }
    case Op::SAMPLE_ARGMAX:
      return (t.params.get_int("flags", 0) & sample_flags::kSample) != 0 ? kSampleScratchBytes
                                                                          : kSmallOpScratch;
    default:
      return kSmallOpScratch;
  }
}

// A strided attention window runs on the 64-key block walk only (ops/attention.cuh attention_run),
// whose blocks must not straddle two runs: runs of whole 64-key blocks, and a task shape the walk
// takes with this layout's threads and op scratch (after the fused op's prologue), or the launch
// would fail on the device (docs/CUDA_VM.md).
void check_strided_attention(const Task& t, const IdMaps& ids, const MegakernelLayout& layout) {
  if ((t.op != Op::ATTENTION_TILE && t.op != Op::ROPE_KV_ATTENTION_TILE) ||
      t.params.get_int("kv_stride", 0) <= 0)
    return;
  if (t.params.get_int("kv_len", 0) % kAttnBlockKeys != 0)
    throw MarshalError(fmt::format(
        "{}: a strided attention window's runs (kv_len {}) must be multiples of 64 keys on the "
        "CUDA VM (tiling.attention.kv_run)",
        task_name(t), t.params.get_int("kv_len", 0)));
  const int64_t head_dim = t.params.get_int("head_dim", 0);
  const auto [heads, kv] = attention_task_heads(t);
  const size_t cache_at = attention_k_cache_input(t.op);
  bool bf16 = false;
  if (t.inputs.size() > cache_at)
    if (const auto it = ids.buffer_by_id.find(t.inputs[cache_at]); it != ids.buffer_by_id.end())
      bf16 = it->second->dtype == DType::BF16;
  bool fits = head_dim > 0 && head_dim <= kOpMaxHeadDim && heads > 0 && kv > 0 &&
              t.params.get_int("N_tile", 0) <= t.params.get_int("n_heads", 0);
  if (fits) {
    int64_t scratch = layout.scratch_bytes;
    if (t.op == Op::ROPE_KV_ATTENTION_TILE)
      scratch -= 4 * int64_t(rope_kv_prologue_floats(
                         int(heads), int(kv), int(head_dim),
                         (t.params.get_int("flags", 0) & attention_flags::kHeadNorm) != 0));
    fits = attention_block_fits(int(head_dim), int(heads), int(kv), bf16, layout.consumer_threads,
                                scratch);
  }
  if (!fits)
    throw MarshalError(fmt::format(
        "{}: a strided attention window (kv_stride) runs on the 64-key block walk, which this "
        "task's shape does not fit (head_dim {}, {} query heads, {} caches, {} consumer threads, "
        "{} bytes of op scratch); use contiguous blocks (no tiling.attention.kv_run)",
        task_name(t), head_dim, heads, bf16 ? "BF16" : "F32", layout.consumer_threads,
        layout.scratch_bytes));
}

MegakernelLayout plan_layout(const Program& program, const IdMaps& ids,
                             const MarshalLimits& limits) {
  MegakernelLayout layout;
  const int64_t threads = program.config ? program.config->threads_per_block : 256;
  // The knob space's range (amk/knob_space.h), the one the lowering checks too.
  if (threads % 32 != 0 || threads < kMinThreadsPerBlock || threads > kMaxThreadsPerBlock)
    throw MarshalError(fmt::format("threads_per_block {} must be a multiple of 32 in [{}, {}] "
                                   "(one more warp streams the weights)",
                                   threads, kMinThreadsPerBlock, kMaxThreadsPerBlock));
  layout.consumer_threads = int(threads);

  int64_t budget = limits.smem_bytes_per_block_optin;
  if (program.config && program.config->smem_bytes_per_block > 0) {
    budget = program.config->smem_bytes_per_block;
    if (limits.smem_bytes_per_block_optin > 0 && budget > limits.smem_bytes_per_block_optin)
      throw MarshalError(fmt::format("smem_bytes_per_block {} exceeds the device's opt-in limit "
                                     "of {} bytes",
                                     budget, limits.smem_bytes_per_block_optin));
  }
  // The kernel's own static shared memory (staged instruction and descriptors) comes first.
  const int64_t configured_budget = budget;
  budget -= kStaticSmemReserve;

  int64_t scratch = 0, widest_row = 0;
  for (const Task& t : program.tasks) {
    scratch = std::max(scratch, task_scratch_bytes(t, ids, layout.consumer_threads));
    if (is_gemv_family(t.op) && t.inputs.size() > size_t(gemv_weight_input(t.op))) {
      const Buffer& w = *ids.buffer_by_id.at(t.inputs[size_t(gemv_weight_input(t.op))]);
      widest_row = std::max(widest_row, dtype_nbytes(w.dtype, t.params.get_int("K", 0)));
    }
  }
  scratch = round_up(scratch, kRingStageAlignment);
  const int64_t room = budget - scratch - kRingStateBytes;  // for stages and mbarriers
  auto stages_for = [&](int64_t chunk) { return room / (chunk + kMbarrierBytesPerStage); };

  const int64_t configured_chunk = program.config ? program.config->stream_chunk_bytes : 0;
  int64_t chunk = configured_chunk > 0 ? configured_chunk : kDefaultChunkBytes;
  // A stage holds whole rows: widen it to the widest row when two such stages still fit;
  // otherwise those rows are not ring-eligible and their tiles read global memory directly.
  if (widest_row > chunk && stages_for(round_up(widest_row, kRingStageAlignment)) >= 2)
    chunk = round_up(widest_row, kRingStageAlignment);
  int64_t stages = stages_for(chunk);
  if (stages < 2)
    throw MarshalError(fmt::format("shared memory budget {} ({} of it the kernel's own) cannot "
                                   "hold the op scratch {} and two ring stages of {} bytes",
                                   configured_budget, kStaticSmemReserve, scratch, chunk));
  layout.scratch_bytes = int(scratch);
  layout.chunk_bytes = int(chunk);
  layout.ring_stages = int(stages);
  // megakernel_smem_bytes() rounds the total up to 128: never let the rounding pass the budget.
  while (layout.ring_stages > 2 && megakernel_smem_bytes(layout) > budget) --layout.ring_stages;
  if (megakernel_smem_bytes(layout) > budget)
    throw MarshalError(fmt::format("shared memory budget {} ({} of it the kernel's own) cannot "
                                   "hold the op scratch {} and two ring stages of {} bytes",
                                   configured_budget, kStaticSmemReserve, scratch, chunk));
  // At least one copy in flight (a stage wider than the bound still streams, one at a time).
  const int64_t in_flight = program.config ? program.config->stream_bytes_in_flight : 0;
  auto chunks_for = [&](int64_t bytes) {
    return bytes > 0 ? int(std::clamp<int64_t>(bytes / chunk, 1, layout.ring_stages))
                     : layout.ring_stages;
  };
  layout.inflight_chunks = chunks_for(in_flight);
  const int64_t prefetch = program.config ? program.config->stream_prefetch_bytes_in_flight : 0;
  layout.prefetch_chunks = prefetch > 0 ? chunks_for(prefetch) : layout.inflight_chunks;
  return layout;
}

// ALLREDUCE_SHARD's operands as ops/elementwise.cuh op_allreduce_shard takes them, or what is
// wrong with them: 1 to 8 F32 shards of one size, an F32 output of that size, and a range
// (n_off, N_tile; both marshal as 0 when absent: the whole vector) within it. The device trusts
// what passes here.
std::string allreduce_shard_error(const amk_task_record_t& r) {
  const amk_instruction_t& inst = r.inst;
  const amk_params_t& p = inst.params;
  if (inst.n_inputs < 1 || inst.n_inputs > AMK_MAX_INPUTS || inst.n_outputs != 1)
    return fmt::format("{} shards and {} outputs: it sums 1 to {} shards into one output",
                       inst.n_inputs, inst.n_outputs, AMK_MAX_INPUTS);
  const int64_t n = r.desc[0].numel;
  for (int i = 0; i <= inst.n_inputs; ++i) {
    const amk_buffer_t& b = r.desc[i];
    const std::string what =
        i < inst.n_inputs ? fmt::format("input {} (a shard)", i) : std::string("output 0");
    if (b.dtype != AMK_DTYPE_F32)
      return fmt::format("{} {} is {}; the CUDA VM sums F32 shards into an F32 output", what,
                         shape_text(b), name_of(DType(b.dtype)));
    if (b.numel != n)
      return fmt::format("{} {} has {} elements, shard 0 {}: the shards and the output must be "
                         "of one size",
                         what, shape_text(b), b.numel, n);
  }
  if ((p.n_off != 0 || p.N_tile != 0) &&
      (p.n_off < 0 || p.N_tile < 1 || int64_t(p.n_off) + p.N_tile > n))
    return fmt::format("the range n_off {}, N_tile {} does not lie in the shards' {} elements",
                       p.n_off, p.N_tile, n);
  return {};
}

}  // namespace

std::vector<amk_task_record_t> task_records(const MarshalledProgram& m,
                                            const std::vector<amk_buffer_t>& table) {
  if (table.size() != m.buffers.size())
    throw MarshalError(fmt::format("task_records: a table of {} buffers for a program of {}",
                                   table.size(), m.buffers.size()));
  constexpr int kHeaderVectors = int(offsetof(amk_task_record_t, desc) / 16);
  constexpr int kDescVectors = int(sizeof(amk_buffer_t) / 16);
  std::vector<amk_task_record_t> records(m.sm_queue.size());
  for (size_t q = 0; q < m.sm_queue.size(); ++q) {
    amk_task_record_t& r = records[q];
    r = amk_task_record_t{};
    r.index = m.sm_queue[q];
    r.inst = m.instructions.at(size_t(r.index));
    const int n = r.inst.n_inputs + r.inst.n_outputs;
    for (int i = 0; i < n; ++i) {
      const int32_t id = i < r.inst.n_inputs ? r.inst.inputs[i] : r.inst.outputs[i - r.inst.n_inputs];
      r.desc[i] = table.at(size_t(id));
    }
    r.n_vectors = kHeaderVectors + n * kDescVectors;
    if (is_gemv_family(Op(r.inst.op))) {
      const GemvTileCheck c = check_gemv_tile(r, m.layout);
      if (!c.error.empty())
        throw MarshalError(fmt::format("instruction {} ({}): {}", r.index,
                                       name_of(Op(r.inst.op)), c.error));
      if (c.ring) r.flags |= AMK_RECORD_RING_TILE;
    } else if (r.inst.op == AMK_OP_ATTENTION_TILE || r.inst.op == AMK_OP_ROPE_KV_ATTENTION_TILE) {
      if (const std::string e = check_attention_tile(r, m.layout); !e.empty())
        throw MarshalError(fmt::format("instruction {} ({}): {}", r.index,
                                       name_of(Op(r.inst.op)), e));
    } else if (r.inst.op == AMK_OP_ALLREDUCE_SHARD) {
      if (const std::string e = allreduce_shard_error(r); !e.empty())
        throw MarshalError(fmt::format("instruction {} ({}): {}", r.index,
                                       name_of(Op(r.inst.op)), e));
    }
  }
  // Each CTA runs its queue in order, then (next step) from its start again.
  for (size_t s = 0; s + 1 < m.sm_queue_offset.size(); ++s) {
    const int32_t begin = m.sm_queue_offset[s], end = m.sm_queue_offset[s + 1];
    for (int32_t q = begin; q < end; ++q)
      records[size_t(q)].next_vectors = records[size_t(q + 1 < end ? q + 1 : begin)].n_vectors;
  }
  return records;
}

amk_params_t marshal_params(const Params& params) {
  amk_params_t p{};
  // PARAM_FIELDS order is amk_params_t's order: 20 int32, then 3 floats (abi.h pins it).
  int32_t* ints = &p.K;
  float* reals = &p.eps;
  int n_int = 0, n_real = 0;
  for (const ParamField& f : param_fields()) {
    if (f.type == ParamType::Int32)
      ints[n_int++] = int32_t(params.get_int(f.name, 0));
    else
      reals[n_real++] = float(params.get_real(f.name, 0.0));
  }
  return p;
}

MarshalledProgram marshal(const Program& program, const MarshalLimits& limits) {
  MarshalledProgram m;
  IdMaps ids;

  // Buffers and counters in id order; operands become positions.
  std::vector<const Buffer*> buffers;
  for (const Buffer& b : program.buffers) buffers.push_back(&b);
  std::stable_sort(buffers.begin(), buffers.end(),
                   [](const Buffer* a, const Buffer* b) { return a->id < b->id; });
  for (const Buffer* b : buffers) {
    ids.buffer_pos[b->id] = int32_t(m.buffers.size());
    ids.buffer_by_id[b->id] = b;
    m.buffer_ids.push_back(b->id);
    m.buffers.push_back(abi_buffer(*b));
  }
  std::vector<const Counter*> counters;
  for (const Counter& c : program.counters) counters.push_back(&c);
  std::stable_sort(counters.begin(), counters.end(),
                   [](const Counter* a, const Counter* b) { return a->id < b->id; });
  std::unordered_map<int64_t, int64_t> counter_init;
  for (const Counter* c : counters) {
    ids.counter_pos[c->id] = int32_t(ids.counter_pos.size());
    counter_init[c->id] = c->init;
  }
  place_buffers(program, ids, m);

  // The grid: the target's SM count, else just enough SMs for the assignment.
  int64_t n_sms = 0;
  if (program.target && program.target->num_sms > 0) {
    n_sms = program.target->num_sms;
  } else {
    for (const Task& t : program.tasks)
      if (t.sm) n_sms = std::max(n_sms, *t.sm + 1);
  }
  if (n_sms <= 0) n_sms = 1;
  if (limits.num_sms > 0 && n_sms > limits.num_sms)
    throw MarshalError(fmt::format("the program needs {} SMs; the device has {}", n_sms,
                                   limits.num_sms));
  m.n_sms = int32_t(n_sms);

  m.counter_step_increment.assign(counters.size(), 0);
  std::vector<std::vector<int32_t>> queues(static_cast<size_t>(n_sms));
  for (const Task& t : program.tasks) {
    check_task(t, m.n_sms);
    const int32_t index = int32_t(m.instructions.size());
    m.instructions.push_back(instruction(t, ids, counter_init));
    ++m.counter_step_increment[size_t(m.instructions.back().out_counter)];
    queues[size_t(*t.sm)].push_back(index);
  }
  m.sm_queue_offset.push_back(0);
  for (const auto& q : queues) {
    m.sm_queue.insert(m.sm_queue.end(), q.begin(), q.end());
    m.sm_queue_offset.push_back(int32_t(m.sm_queue.size()));
  }

  m.sink_instruction = find_sink(program, m);
  if (m.sink_instruction >= 0) {
    const amk_instruction_t& sink = m.instructions[size_t(m.sink_instruction)];
    const amk_buffer_t& out = m.buffers[size_t(sink.outputs[0])];
    if (out.dtype == AMK_DTYPE_I32 && out.numel >= 1) m.next_token_buffer = sink.outputs[0];
  }
  if (const auto named = program.meta_string("step_position")) {
    m.pos_buffer = int32_scalar_buffer(program, ids, *named);
    if (m.pos_buffer < 0)
      throw MarshalError(fmt::format("meta.step_position names '{}', which is not an I32 buffer",
                                     *named));
  } else {
    m.pos_buffer = int32_scalar_buffer(program, ids, "pos");
  }
  m.token_buffer = int32_scalar_buffer(program, ids, "token");
  m.layout = plan_layout(program, ids, limits);
  for (const Task& t : program.tasks) check_strided_attention(t, ids, m.layout);
  return m;
}

}  // namespace amk::cuda
