// Program -> PreparedProgram: what each task costs in the timing model's terms, and the weight
// ring's geometry exactly as the CUDA VM's loader plans it (cuda::marshal, plain C++).
#include "search/sim_program.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "amk/kv_window.h"
#include "amk/op_flags.h"
#include "amk/op_traits.h"
#include "ir/cluster_handoffs.h"
#include "vm/cuda/marshal.h"
#include "vm/cuda/ops/gemv_strips.h"

namespace amk::sim {

namespace {

bool silu_prologue(Op op) { return op == Op::SILU_MUL_GEMV_TILE || op == Op::SILU_MUL_GEMV_ADD_TILE; }

// The bench's mean position (amk bench: one warm launch of 64, four timed ones) when none is
// given: where the split-KV blocks of a 512-token context are half full.
constexpr int64_t kDefaultPosition = 192;

// The ring as the loader would plan it; for a program the CUDA VM cannot load (a hand-built
// test program) the same rules with the default stage and a typical ring of 5 stages.
void plan_ring(const Program& program, const GpuTarget& target, PreparedProgram& p) {
  const ScheduleConfig config = program.config.value_or(ScheduleConfig{});
  try {
    cuda::MarshalLimits limits;
    if (target.smem_bytes_per_block_optin > 0)
      limits.smem_bytes_per_block_optin = target.smem_bytes_per_block_optin;
    const cuda::MarshalledProgram m = cuda::marshal(program, limits);
    p.chunk_bytes = m.layout.chunk_bytes;
    p.ring_bytes = double(m.layout.ring_stages) * m.layout.chunk_bytes;
    p.inflight_chunks = m.layout.inflight_chunks;
    p.prefetch_chunks = m.layout.prefetch_chunks;
    p.sink = m.sink_instruction;
    return;
  } catch (const std::exception&) {
    // Not loadable as it stands (no buffers, an op without device code): use the rules below.
  }
  const int64_t chunk = config.stream_chunk_bytes > 0 ? config.stream_chunk_bytes : 32768;
  const int64_t stages = 5;
  auto chunks_for = [&](int64_t bytes) {
    return bytes > 0 ? int(std::clamp<int64_t>(bytes / chunk, 1, stages)) : int(stages);
  };
  p.chunk_bytes = double(chunk);
  p.ring_bytes = double(stages * chunk);
  p.inflight_chunks = chunks_for(config.stream_bytes_in_flight);
  p.prefetch_chunks = config.stream_prefetch_bytes_in_flight > 0
                          ? chunks_for(config.stream_prefetch_bytes_in_flight)
                          : p.inflight_chunks;
  p.sink = -1;
}

}  // namespace

void PreparedDeleter::operator()(PreparedProgram* p) const { delete p; }

Prepared prepare(const Program& program, const GpuTarget& target, const SimOptions& options) {
  if (options.steps < 1) throw std::invalid_argument("simulate_step: steps must be >= 1");
  Prepared prepared(new PreparedProgram);
  PreparedProgram& p = *prepared;
  p.num_sms = std::max<int64_t>(target.num_sms, 1);
  p.target_gbs = target.measured_bw_gbs > 0 ? target.measured_bw_gbs : target.hbm_bandwidth_gbs;
  if (!(p.target_gbs > 0))
    throw std::invalid_argument("simulate_step: target '" + target.name + "' has no bandwidth");

  std::unordered_map<int64_t, const Buffer*> buffers;
  int64_t context = 0;
  for (const Buffer& b : program.buffers) {
    buffers[b.id] = &b;
    if (b.kind == BufferKind::KV_CACHE) context = std::max(context, kv_cache_positions(b));
  }
  p.position = options.position >= 0 ? options.position
                                      : std::max<int64_t>(0, std::min(kDefaultPosition, context - 1));
  p.steps = options.steps;
  const int64_t threads = program.config ? program.config->threads_per_block : 256;
  const int64_t n_warps = std::max<int64_t>(threads / 32, 1);

  std::unordered_map<int64_t, int32_t> counter_index, counter_init;
  for (const Counter& c : program.counters) {
    const int32_t i = int32_t(counter_index.size());
    if (!counter_index.emplace(c.id, i).second)
      throw std::invalid_argument(fmt::format("simulate_step: counter {} declared twice", c.id));
    counter_init[c.id] = int32_t(c.init);
  }
  p.counter_increment.assign(counter_index.size(), 0);
  std::map<int64_t, int32_t> slot_of;  // SM id -> slot, in SM order
  for (const Task& t : program.tasks) {
    if (!t.sm) throw std::invalid_argument("simulate_step: task without an SM: " + t.label);
    if (*t.sm < 0) throw std::invalid_argument("simulate_step: task on a negative SM: " + t.label);
    slot_of.emplace(*t.sm, 0);
  }
  for (auto& [sm, slot] : slot_of) {
    slot = int32_t(p.sms.size());
    p.sms.push_back(sm);
  }
  p.queues.assign(p.sms.size(), {});
  p.gemvs.assign(p.sms.size(), {});

  auto counter = [&](int64_t id, const Task& t) {
    const auto it = counter_index.find(id);
    if (it == counter_index.end())
      throw std::invalid_argument(
          fmt::format("simulate_step: task '{}' names undeclared counter {}", t.label, id));
    return it->second;
  };

  p.tasks.reserve(program.tasks.size());
  for (size_t i = 0; i < program.tasks.size(); ++i) {
    const Task& t = program.tasks[i];
    SimTask s;
    s.warp_scale = double(n_warps) / 8.0;  // every op spreads its work over the warps
    s.slot = slot_of.at(*t.sm);
    s.out_counter = counter(t.out_counter, t);
    ++p.counter_increment[size_t(s.out_counter)];
    for (const Wait& w : t.waits) {
      const int32_t need = int32_t(w.threshold - counter_init[w.counter]);
      if (need > 0) s.waits.emplace_back(counter(w.counter, t), need);
    }
    const double est = double(std::max<int64_t>(t.est_bytes, 0));
    if (is_gemv_family(t.op)) {
      s.kind = TaskKind::Stream;
      const int64_t K = t.params.get_int("K", 0), width = t.params.get_int("N_tile", 0);
      const size_t slot = gemv_weight_input(t.op);
      double w = est;  // a hand-built tile without its weight declared: est_bytes is the rows
      if (slot < t.inputs.size()) {
        const auto it = buffers.find(t.inputs[slot]);
        if (it != buffers.end() && K > 0 && width > 0) {
          w = double(dtype_nbytes(it->second->dtype, K * width * gemv_weight_count(t.op)));
          if (it->second->dtype == DType::BF16) {
            const int64_t S = cuda::gemv_strips_per_row(K * 2);
            s.slow_strips = cuda::gemv_strip_period(int(S), int(n_warps)) == 0;
          }
        }
      }
      s.out_rows = double(std::max<int64_t>(width, 0));
      s.weight_bytes = std::max(0.0, w);
      // x in F32 (two vectors for the SiLU prologue), plus what else the tile reads besides its
      // rows (a norm weight, a bias).
      s.act_bytes = double(4 * K * (silu_prologue(t.op) ? 2 : 1)) + std::max(0.0, est - w);
      if (t.op == Op::COMBINE_GEMV_ADD_TILE && !t.inputs.empty()) {
        // x is merged from the live slabs of a stack of partials: those the position reached.
        const int64_t slab =
            t.params.get_int("n_heads", 0) * (t.params.get_int("head_dim", 0) + 2);
        const auto stack = buffers.find(t.inputs[0]);
        if (slab > 0 && stack != buffers.end()) {
          int64_t live = stack->second->numel() / slab;
          const int64_t block = t.params.get_int("kv_len", 0);
          if (block > 0 && (t.params.get_int("flags", 0) & attention_flags::kRuntimeWindow) != 0)
            live = std::min(live, std::max<int64_t>(p.position, 0) / block + 1);
          s.act_bytes = double(4 * live * slab) + std::max(0.0, est - w);
          // The merge's dependent trips (a batch of kMergeBatch partials per float4 of x per
          // thread) against the one of a copied row (build_x_vec4: 4 float4 a thread a trip).
          constexpr int64_t kMergeBatch = 6, kCopyVecs = 4;  // gemv.cuh kStackBatch
          const int64_t n4 = std::max<int64_t>(K / 4, 1);
          const int64_t per_thread = (n4 + threads - 1) / threads;
          const int64_t merge = per_thread * ((live + kMergeBatch - 1) / kMergeBatch);
          const int64_t copy = (n4 + kCopyVecs * threads - 1) / (kCopyVecs * threads);
          s.extra_trips = double(std::max<int64_t>(merge - copy, 0));
        }
      }
      const int64_t x = t.inputs.empty() ? -1 : t.inputs[0];
      const int64_t fused = t.inputs.size() > 1 && slot == 2 ? t.inputs[1] : -1;
      s.x_key = (int64_t(t.op) << 48) ^ ((x & 0xffffff) << 24) ^ (fused & 0xffffff);
      s.depth = int32_t(std::max<int64_t>(t.params.get_int("M_tile", 0), 0));
      s.gemv_index = int32_t(p.gemvs[size_t(s.slot)].size());
      p.gemvs[size_t(s.slot)].push_back(int32_t(i));
    } else if (t.op == Op::ATTENTION_TILE || t.op == Op::ROPE_KV_ATTENTION_TILE) {
      s.kind = TaskKind::Attention;
      // The window's keys the position reached (a strided window's runs: amk/kv_window.h).
      const int64_t start = t.params.get_int("kv_start", 0);
      const int64_t len = t.params.get_int("kv_len", 0);
      const int64_t stride = std::max<int64_t>(t.params.get_int("kv_stride", 0), 0);
      const size_t cache_at = attention_k_cache_input(t.op);
      int64_t max_seq = start + len;
      if (t.inputs.size() > cache_at)
        if (const auto cache = buffers.find(t.inputs[cache_at]);
            cache != buffers.end() && cache->second->shape.size() == 3)
          max_seq = cache->second->shape[1];
      const KvWindow window{start, len, stride, max_seq};
      const int64_t keys = window.keys();
      double fraction = 1.0;
      if (keys > 0 && (t.params.get_int("flags", 0) & attention_flags::kRuntimeWindow) != 0)
        fraction = double(window.seen(p.position)) / double(keys);
      s.kv_bytes = est * fraction;
    } else {
      s.kind = TaskKind::Other;
      // Zero-byte ops (argmax partials, combines) scan est_flops elements.
      s.act_bytes = est > 0 ? est : double(std::max<int64_t>(t.est_flops, 0));
    }
    p.queues[size_t(s.slot)].push_back(int32_t(i));
    p.tasks.push_back(std::move(s));
  }
  if (options.cluster_size > 1) {
    p.cluster_hop_us = cluster_hop_us(options.cluster_size);
    std::unordered_set<int64_t> local;
    for (const ClusterHandoff& h : find_cluster_handoffs(program, options.cluster_size).handoffs)
      local.insert(h.counter);
    for (size_t i = 0; i < program.tasks.size(); ++i)
      p.tasks[i].in_cluster = local.contains(program.tasks[i].out_counter);
  }
  plan_ring(program, target, p);
  return prepared;
}

}  // namespace amk::sim
