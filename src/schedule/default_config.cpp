// default_schedule_config(): the ScheduleConfig a model gets when nobody tuned one for it
// (docs/LOWERING.md "The derived default"). Rules, not a table per model: every streaming level
// uses every SM with its rows split evenly, and the fusions and knobs that measured best on the
// H100 (bench/RESULTS.md) are on. A per-model file (bench/configs/) is only ever a measured
// override of this.
#include <fmt/format.h>

#include <algorithm>

#include "amk/lowering.h"
#include "amk/model_config.h"
#include "schedule/tensor_parallel.h"
#include "vm/cuda/ops/gemv_strips.h"
#include "vm/cuda/ops/scratch.h"

namespace amk {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows (a GLU tile: features) in multiples of 4: a tile's F32 outputs are then a whole number
// of 16-byte words at a 16-byte offset. Measured on the H100 (bench/RESULTS.md, twenty-third
// session), the rounding alone: smollm2-135m -3.4 % (q/k/v and o_proj 16 rows instead of 15,
// down_proj 8 instead of 6). It was chosen for a bulk-store signal (-6.8 % with it, a race,
// gone since the thirty-eighth session: vm/cuda/sync.cuh publish_completion); the kernel
// without it was measured with these tiles only.
constexpr int64_t kOutputGranule = 4;
int64_t granular(int64_t rows) { return ceil_div(rows, kOutputGranule) * kOutputGranule; }

// The lm_head over `sms` SMs: one tile per SM, as every other level. It used to be capped at
// ~1 MiB of BF16 rows (several tiles per SM, so the ring pipelines from one into the next), and
// one tile per SM measured faster on the H100 (bench/RESULTS.md, 2026-11-24, ninth session):
// llama-3.2-1b -2.3 % (972 rows instead of 256), qwen3-0.6b -1.3 % (1151 instead of 512); a level
// of ~4 tiles a SM pays ~4 gate passes and epilogues where it needs one. The tile's strip
// partials (one float per row and 32-vector strip, ops/gemv.cuh) live in the op scratch, which
// the ring gives up: they stay within kMaxLmPartialBytes (an 8 KiB-row model's 972 rows would
// take 62 KiB; this keeps its tiles at 512 rows, two a SM).
int64_t lm_head_rows(const ModelConfig& m, int64_t sms) {
  constexpr int64_t kMaxLmPartialBytes = 32 * 1024;
  const int64_t lm_strips = cuda::gemv_strips_per_row(2 * m.hidden_size);
  const int64_t lm_cap = std::max<int64_t>(1, kMaxLmPartialBytes / (4 * lm_strips));
  return std::min({granular(std::max<int64_t>(1, ceil_div(m.vocab_size, sms))),
                   std::max(kOutputGranule, lm_cap / kOutputGranule * kOutputGranule),
                   std::max<int64_t>(m.vocab_size, 1)});
}

// One partial argmax per SM of `sms`, slices of a multiple of 4 logits (16-byte loads).
int64_t argmax_rows(int64_t vocab, int64_t sms) {
  return ceil_div(std::max<int64_t>(1, ceil_div(vocab, sms)), 4) * 4;
}

}  // namespace

ScheduleConfig default_schedule_config(const ModelConfig& m, const GpuTarget& target,
                                       int64_t max_context) {
  ScheduleConfig c;
  const int64_t sms = std::max<int64_t>(target.num_sms, 1);
  // One layer's weights, as the model lists them (every layer has the same shapes).
  int64_t layer_weight_bytes = 0;
  for (const WeightSpec& w : expected_weights(m))
    if (w.name.starts_with("model.layers.0.")) {
      int64_t n = 1;
      for (const int64_t d : w.shape) n *= d;
      layer_weight_bytes += dtype_nbytes(DType::BF16, n);
    }
  const int64_t layer_bytes_per_sm = ceil_div(layer_weight_bytes, sms);
  // The weight ring one 32 KiB stage short of what fits: 35 KiB of the opt-in left unused. The
  // GPU autoresearch campaigns found it first (smem_bytes_per_block 196608 on the H100) and a
  // fresh run confirmed it on all three presets: -1.7 % (llama-3.2-1b), -4.3 % (qwen3-0.6b),
  // -5.5 % (smollm2-135m) (bench/RESULTS.md, 2026-11-24). What it buys is most likely L1, not a
  // shorter ring: a stage shorter still (163840) is no faster (+0.5 % on the 1B, eleventh
  // session), while dynamic shared memory past 196 KiB makes the SM take its 228 KiB carve-out
  // and leaves ~28 KiB of L1 for the spill stack (+2.9 % on the 1B at a 4,096 context on that
  // session's kernel).
  // Where streaming bounds the step (a layer's weights per SM fill that ring more than twice),
  // the stage is worth more than the L1: the whole opt-in (0) measured -2.3 % on llama-3.2-1b
  // (H100, 512 tokens), and on the H200 -1.4 % (1B, 512 and 4,096 tokens) and -0.9 % (the 8B)
  // (bench/RESULTS.md, thirtieth and thirty-first sessions); qwen3-0.6b (1.2 rings a SM) +0.3 %
  // (H100, one round).
  int64_t short_ring = 0;  // 0: the opt-in maximum
  if (target.smem_bytes_per_block_optin > 2 * kRingHeadroomBytes)
    short_ring = target.smem_bytes_per_block_optin - kRingHeadroomBytes;
  const bool streaming_bound = short_ring > 0 && layer_bytes_per_sm > 2 * short_ring;
  c.smem_bytes_per_block = streaming_bound ? 0 : short_ring;
  const int64_t ring_bytes =
      c.smem_bytes_per_block > 0 ? c.smem_bytes_per_block : target.smem_bytes_per_block_optin;
  // Split-KV blocks of 64 keys, each KV head its own task, the blocks doubled until the level's
  // tasks (KV heads x blocks) take one SM each: the level lasts one task's walk, and a task's walk
  // is dependent compute (~2.2 µs a 64-key block), so two on an SM double it (kMaxKvBlocks at
  // most). Shorter walks beat fewer partials to merge: llama-3.2-1b at a 4,096 context on the
  // H100, 256-key blocks (128 tasks) 1297 µs/token against 512 (64 tasks) 1356 and 128 (256
  // tasks) 1402 (bench/RESULTS.md, twenty-seventh session, through a combine tree); on the H200
  // with o_proj merging (thirty-ninth), 256-key blocks 1090.0 against 512's 1169.7 at positions
  // ~3,928, 979.2 against 976.2 at 64..320. A context of one block stays one task per layer.
  // (parse_model_config fills num_key_value_heads from num_attention_heads where it is absent.)
  const int64_t kv_heads = std::max<int64_t>(1, m.num_key_value_heads);
  int64_t kv_block = 64;
  while (ceil_div(max_context, kv_block) > kMaxKvBlocks ||
         (ceil_div(max_context, kv_block) > kMaxInputs &&
          kv_heads * ceil_div(max_context, kv_block) > sms))
    kv_block *= 2;
  const int64_t kv_blocks = ceil_div(max_context, kv_block);
  const bool split_kv = kv_blocks >= 2;
  // Rows of one level over `over` SMs (every SM unless said otherwise): the tiles of one level
  // (which may span several projections that wait on the same input) number about one per SM.
  const auto per_sm = [&](int64_t rows, int64_t over) {
    return std::max<int64_t>(1, ceil_div(rows, over));
  };
  // ... but no GEMV tile streams less than kMinTileBytes of BF16 rows of length k. On a small
  // model one tile per SM makes tasks of a few KiB whose fixed costs (the gate pass, the release,
  // one more signal on the level's counter) bound the level, not their bytes: fewer, wider tiles
  // end it sooner. Measured on the H100 against one tile per SM (bench/RESULTS.md, 2026-11-24):
  // smollm2-135m -11.6 % (q/k/v and o_proj 15 rows instead of 8 and 5, down_proj 6 instead of
  // 5), qwen2.5-0.5b -4.7 %; 32 KiB gave -4.5 / -2.8 %. llama-3.2-1b's and qwen3-0.6b's tiles
  // already stream >= 32 KiB (unchanged).
  constexpr int64_t kMinTileBytes = 16 * 1024;
  // (At most the projection's rows: a wider tile is the same program.)
  const auto tile_rows = [&](int64_t level_rows, int64_t k, int64_t rows, int64_t over) {
    const int64_t min_rows = ceil_div(kMinTileBytes, 2 * std::max<int64_t>(k, 1));
    return std::min(granular(std::max(per_sm(level_rows, over), min_rows)),
                    std::max<int64_t>(rows, 1));
  };
  // The q/k/v tiles leave the attention level's block tasks SMs of their own where both fit
  // with q/k/v on at least half the SMs (round_robin deals the layer's list out in order: the
  // block tasks follow the q/k/v tiles). An attention task's work before its gate (RoPE's
  // angles, the head norm's weights, its first block's copies: ops/attention.cuh) then runs
  // while the q/k/v tiles stream, not after its SM's own tile, which made the attention's gate
  // the layer's slowest (3.6 µs on qwen3-0.6b against 0.4-1.3 for the GEMV levels). Measured on
  // the H100 (bench/RESULTS.md, thirtieth session, one round): qwen3-0.6b's 32-row q/k/v tiles
  // (128 tiles beside 64 block tasks) against 64-row ones (64 tiles) 1130.8 -> 1063.4 µs/token
  // (-6.0 %); smollm2-135m (24 block tasks) keeps its 16-row tiles, a 4,096 context (more
  // block tasks than half the SMs) every SM. There each block task's pre-gate work follows its
  // SM's q/k/v tile, on the chain: ~2.9 µs a layer on the 1B at ~3,928 (H200, forty-first
  // session); two KV heads a task with the split measured worse (+5.9 %).
  // Only where such a tile fits the weight ring: the ring then holds it before its gate (it
  // fills during the previous level's waits), so the wider tile does not stream after the gate
  // on half the SMs. A tile that does not fit (llama-3.1-8b: 96 rows of 8 KiB, 768 KiB against
  // a 227 KiB ring) keeps q/k/v on every SM; the simulator puts the split at +2.8 % there on the
  // H200 (a q/k/v level 20.5 µs instead of 14.8), and its measured configuration (80.7 % of the
  // floor on the H100, thirtieth session) is the unsplit one. Measured with the split on the
  // H200 (thirty-first session): qwen3-0.6b -6.2 % (3 rounds; 128 KiB tiles), llama-3.2-1b
  // -0.6 % (192 KiB tiles); and without it, llama-3.1-8b -1.7 % (thirty-second session, one
  // round: 4917.1 against 5000.9 µs).
  const int64_t attention_tasks = split_kv ? kv_heads * kv_blocks : 0;
  const int64_t qkv_rows = m.q_dim() + 2 * m.kv_dim();
  // Each projection's last tile may be ragged: widen until the tiles themselves fit.
  const auto qkv_tiles = [&](int64_t r) {
    return ceil_div(m.q_dim(), r) + 2 * ceil_div(m.kv_dim(), r);
  };
  const auto qkv_tile_over = [&](int64_t over) {
    int64_t tile = tile_rows(qkv_rows, m.hidden_size, qkv_rows, over);
    while (over < sms && tile < qkv_rows && qkv_tiles(tile) > over) tile += kOutputGranule;
    return tile;
  };
  int64_t qkv_tile = qkv_tile_over(sms);
  if (attention_tasks > 0 && attention_tasks <= sms / 2) {
    const int64_t split = qkv_tile_over(sms - attention_tasks);
    if (2 * split * m.hidden_size <= ring_bytes) qkv_tile = split;
  }
  const int64_t q = std::min(qkv_tile, std::max<int64_t>(m.q_dim(), 1));
  const int64_t kv = std::min(qkv_tile, std::max<int64_t>(m.kv_dim(), 1));
  // Gate and up share GLU tiles (the [gemv, silu_mul] group below), each reading its features'
  // gate rows and up rows: half the level's rows per SM, in features.
  const int64_t gate_up_rows =
      tile_rows(2 * m.intermediate_size, m.hidden_size, 2 * m.intermediate_size, sms);
  const int64_t gate_up =
      std::min(granular(ceil_div(gate_up_rows, 2)), std::max<int64_t>(m.intermediate_size, 1));
  const int64_t o_proj = tile_rows(m.hidden_size, m.q_dim(), m.hidden_size, sms);
  const int64_t down = tile_rows(m.hidden_size, m.intermediate_size, m.hidden_size, sms);
  c.tiling = {
      {"q_proj", {{"N_tile", q}}},           {"k_proj", {{"N_tile", kv}}},
      {"v_proj", {{"N_tile", kv}}},          {"o_proj", {{"N_tile", o_proj}}},
      {"gate_proj", {{"N_tile", gate_up}}},  {"down_proj", {{"N_tile", down}}},
      {"lm_head", {{"N_tile", lm_head_rows(m, sms)}}},
      {"sample_argmax", {{"N_tile", argmax_rows(m.vocab_size, sms)}}},
  };
  if (split_kv) c.tiling.push_back({"attention", {{"kv_block", kv_block}, {"kv_heads", 1}}});
  // [gemv, silu_mul] takes the SiLU out of down_proj's prologue (two vectors of intermediate
  // floats loaded after its wait) into the gate/up tiles' epilogue, so [silu_mul, gemv] has
  // nothing left to fuse and is not listed.
  c.fusion_grouping = {{"rmsnorm", "gemv"}, {"gemv", "silu_mul"}, {"gemv", "add"},
                       {"rope", "attention"}};
  // o_proj merging the split-KV partials itself (no combine level) wherever the KV is split. It
  // merges only the blocks the step's position reached (ops/gemv.cuh build_x_combine), so a long
  // context's tree (two more hops a layer at every position) costs more than the merge of up to
  // 16 (32 with 3 KV heads) partials. H200, 512 tokens, same binary (bench/RESULTS.md):
  // smollm2-135m -4.8 %, llama-3.2-1b -1.4 % (thirty-third session); with 128-wide heads, once
  // the loader checked the GEMV tiles, qwen3-0.6b -2.8 % (3 rounds) and llama-3.1-8b -0.9 %
  // (thirty-sixth). At a 4,096-token context, against the tree (thirty-ninth, H200): the 1B
  // -5.4 % at positions 64..320 and -1.9 % at ~3,928 (2 rounds), qwen3-0.6b -7.8 % and
  // smollm2-135m -14.7 % at 64..320 (1 round).
  if (split_kv)
    c.fusion_grouping.push_back({"attention_combine", "gemv"});
  // Round robin (task i on SM i mod SMs): each level's tiles, about one per SM, land one per SM
  // in list order. Chosen by measurement: three fresh A/B runs on the H100 against critical_path
  // (bench/RESULTS.md, ninth and eleventh sessions): smollm2-135m -1.2 / -2.2 / -1.7 %,
  // qwen3-0.6b -0.3 / -0.2 %, llama-3.2-1b +0.1 / +0.1 % (noise).
  c.sm_assignment = std::string("round_robin");
  c.pipelining_depth = 4;
  c.page_allocation = "graph_color";
  // Two 32 KiB copies in flight per SM while it runs a tile, one while the copies run ahead of a
  // tile it has not started (across a wait on the chain, when other SMs' round trips queue
  // behind them). Measured on the H100 against one and one (bench/RESULTS.md, thirteenth
  // session): llama-3.2-1b -1.6 % (default) / -1.1 % (its kept config, twice), qwen3-0.6b
  // -0.2 / -0.3 %, qwen2.5-0.5b -0.2 %, smollm2-135m +0.0 %. Deeper still gains less on the 1B
  // (96 KiB -0.4 %, 128 KiB -0.1 % against one).
  c.stream_bytes_in_flight = 65536;
  c.stream_prefetch_bytes_in_flight = 32768;
  // Consumer warps: 6 (192 threads, the 224-thread build) only where the chain, not the
  // streaming, bounds the step: a layer's BF16 weights per SM fit the ring's shared memory
  // (above: the ring holds them before their waits), and every GEMV row
  // (K = hidden, q_dim for o_proj, intermediate for down_proj) keeps its x slices in registers
  // with 6 warps (strip period 1-4, ops/gemv_strips.h). Else 8 (256 threads, the build whose consumers take the producer
  // warpgroup's registers: no spills either). Measured on the H100 (bench/RESULTS.md, twelfth
  // session, 256 against 192 on the same binary): smollm2-135m (54 KiB a layer a SM) +2.5 %,
  // qwen3-0.6b (238 KiB) -8.3 %; llama-3.2-1b's 8192-wide down_proj rows would read x from
  // shared memory with 6 warps (+8.3 % at 192, seventh session).
  const auto fast_with_6_warps = [](int64_t k) {
    return cuda::gemv_strip_period(int(cuda::gemv_strips_per_row(2 * k)), 6) > 0;  // BF16 rows
  };
  const bool chain_bound = layer_bytes_per_sm <= ring_bytes;
  c.threads_per_block = chain_bound && fast_with_6_warps(m.hidden_size) &&
                                fast_with_6_warps(m.q_dim()) &&
                                fast_with_6_warps(m.intermediate_size)
                            ? 192
                            : 256;
  // Blocks longer than one 64-key run stride over the context in runs of 64 (a strided
  // window, amk/kv_window.h), so a short position's keys take one block a task instead of
  // filling the first tasks' walks. Measured on the H200 (bench/RESULTS.md, fortieth
  // session) at a 4,096 context, positions 64..320, same binary: llama-3.2-1b -6.1 %,
  // qwen3-0.6b -11.0 %, smollm2-135m +0.1 % (its 128-key blocks walk two runs either way).
  // Only where the CUDA VM's 64-key block walk, the one path that takes a strided window, takes
  // a task of one KV head with these threads and the attention scratch the loader reserves, for
  // BF16 and F32 caches alike (head_dim 64 or 128, a GQA group of at most 2 x threads / head_dim).
  const int64_t rep = m.num_attention_heads / kv_heads;
  const auto block_walk_takes = [&](bool bf16) {
    const int threads = int(c.threads_per_block);
    return cuda::attention_block_fits(
        int(m.head_dim), int(rep), 1, bf16, threads,
        cuda::attention_split_scratch_bytes(int(m.head_dim), int(rep), 1, threads));
  };
  if (split_kv && kv_block > 64 && max_context % kv_block == 0 && block_walk_takes(true) &&
      block_walk_takes(false))
    for (auto& [archetype, sizes] : c.tiling)
      if (archetype == "attention") sizes.push_back({"kv_run", 64});
  // q/k/v's tiles per attention head group, each group's rows under its own counter, where the
  // tiles fall on the groups' boundaries anyway (the q and k/v widths divide a group's rows: the
  // same tiles, finer counters), so each KV head's attention waits for its own q/k/v alone.
  // Measured on the H200 (bench/RESULTS.md, forty-sixth session, 2 rounds, same binary):
  // qwen3-0.6b -0.6 %, smollm2-135m -0.3 %; llama-3.2-1b, whose 48-row tiles do not fall on its
  // 256 / 64-row groups, +1.4 % grouped (80 ragged tiles, or 64 with wider k/v tiles) and +0.5 %
  // at ~3,928 of 4,096 with 32-row tiles.
  const int64_t group_q_rows = rep * m.head_dim, group_kv_rows = m.head_dim;
  if (split_kv && group_q_rows % q == 0 && group_kv_rows % kv == 0)
    for (auto& [archetype, sizes] : c.tiling)
      if (archetype == "attention") sizes.push_back({"qkv_by_group", 1});
  return c;
}

ScheduleConfig tensor_parallel_schedule_config(const ModelConfig& m, const GpuTarget& target,
                                               int64_t max_context, int64_t clusters,
                                               int64_t size, int64_t attention) {
  if (clusters < 1 || size < 1 || attention < 1 || attention > clusters ||
      m.num_key_value_heads % attention != 0 || clusters * size > target.num_sms)
    throw LoweringError(fmt::format(
        "tensor-parallel shape {} clusters of {} SMs, attention on {}: it needs clusters x size "
        "<= {}'s {} SMs and the attention clusters dividing the model's {} KV heads",
        clusters, size, attention, target.name, target.num_sms, m.num_key_value_heads));
  ScheduleConfig c = default_schedule_config(m, target, max_context);
  const int64_t H = m.hidden_size, F = m.intermediate_size, HD = m.head_dim;
  const int64_t sms = clusters * size;
  // q/k/v: a cluster holds n_kv / attention KV heads (one group each, kv_heads 1); a width that
  // divides a KV head's rows keeps every tile inside one head group. The widest such width whose
  // tiles take at most one SM of the cluster each, else a head's rows.
  const int64_t kv_heads = m.num_key_value_heads / attention;
  const int64_t q_rows = m.num_attention_heads / m.num_key_value_heads * HD;
  int64_t qkv = HD;
  while (qkv % 2 == 0 && qkv / 2 >= kOutputGranule &&
         kv_heads * (ceil_div(q_rows, qkv) + 2 * ceil_div(HD, qkv)) < size &&
         kv_heads * (ceil_div(q_rows, qkv / 2) + 2 * ceil_div(HD, qkv / 2)) <= size)
    qkv /= 2;
  // Gate/up: the widest cluster's features (as the lowering splits them) over its SMs.
  int64_t widest = 0;
  for (int64_t p = 0; p < clusters; ++p)
    widest = std::max(widest, schedule::tp_feature_start(F, clusters, p + 1) -
                                  schedule::tp_feature_start(F, clusters, p));
  const int64_t gate_up = std::min(granular(ceil_div(widest, size)), std::max<int64_t>(F, 1));
  // o_proj, down_proj: one slice of the sums, a counter a tile.
  const int64_t slice = schedule::tp_slice_width(H, size);
  // The lm_head and argmax over the clusters' SMs only.
  const int64_t lm = lm_head_rows(m, sms), argmax = argmax_rows(m.vocab_size, sms);
  for (auto& [archetype, sizes] : c.tiling) {
    if (archetype == "q_proj" || archetype == "k_proj" || archetype == "v_proj")
      sizes = {{"N_tile", qkv}};
    else if (archetype == "gate_proj")
      sizes = {{"N_tile", gate_up}};
    else if (archetype == "o_proj" || archetype == "down_proj")
      sizes = {{"N_tile", slice}};
    else if (archetype == "lm_head")
      sizes = {{"N_tile", lm}};
    else if (archetype == "sample_argmax")
      sizes = {{"N_tile", argmax}};
    else if (archetype == "attention")
      // q/k/v are per head group already (tiling.tp refuses qkv_by_group as doing nothing).
      std::erase_if(sizes, [](const auto& kv) { return kv.first == "qkv_by_group"; });
  }
  c.tiling.push_back({"tp", {{"clusters", clusters}, {"size", size}, {"attention", attention}}});
  c.sm_assignment = std::string("round_robin");
  return c;
}

}  // namespace amk
