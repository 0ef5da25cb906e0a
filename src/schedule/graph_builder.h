// GraphBuilder: how lower() adds tasks, buffers and counters to a Program, and which wait makes
// each buffer readable. Internal to the lowering (src/schedule/lower.cpp).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "amk/ir.h"

namespace amk::schedule {

inline Params ints(std::initializer_list<std::pair<const char*, int64_t>> kv) {
  Params p;
  for (const auto& [k, v] : kv) p.set_int(k, v);
  return p;
}

class GraphBuilder {
 public:
  GraphBuilder(Program& p, DType weight_dtype, int64_t pipelining_depth)
      : p_(p), wdt_(weight_dtype), depth_(pipelining_depth) {}

  int64_t weight(const std::string& source, std::vector<int64_t> shape) {
    return p_.new_buffer(source, BufferKind::WEIGHT, wdt_, std::move(shape), MemSpace::HBM, source);
  }
  // A box of a rank-2 checkpoint tensor as a WEIGHT of its own (a tensor-parallel cluster's
  // rows or columns), named `source` + `tag`.
  int64_t weight_box(const std::string& source, SourceBox box, const std::string& tag) {
    const int64_t id = p_.new_buffer(source + tag, BufferKind::WEIGHT, wdt_, {box.rows, box.cols},
                                     MemSpace::HBM, source);
    p_.buffers[size_t(id)].source_box = box;
    return id;
  }
  int64_t act(std::string name, std::vector<int64_t> shape) {
    return p_.new_buffer(std::move(name), BufferKind::ACTIVATION, kActDtype, std::move(shape),
                         MemSpace::GLOBAL_SCRATCH);
  }
  int64_t wbytes(int64_t n) const { return dtype_nbytes(wdt_, n); }
  int64_t abytes(int64_t n) const { return dtype_nbytes(kActDtype, n); }

  // One task writing `out`; its consumers wait for its counter.
  void task(Op op, std::vector<int64_t> inputs, int64_t out, Params params, std::string label,
            int64_t est_bytes, int64_t est_flops) {
    const int64_t counter = p_.new_counter(label);
    std::vector<Wait> waits = waits_for(inputs);
    Task& t = add_task(op, std::move(inputs), {out}, counter, std::move(waits),
                          std::move(params), std::move(label));
    t.est_bytes = est_bytes;
    t.est_flops = est_flops;
    ready_[out] = Wait{counter, 1};
  }

  // out[:, n_off:n_off+N_tile] = x @ W[n_off:n_off+N_tile].T (+ bias) for every tile.
  void gemv(int64_t x, int64_t w, std::optional<int64_t> bias, int64_t out, int64_t K, int64_t N,
            int64_t tile, const std::string& label) {
    std::vector<int64_t> inputs{x, w};
    if (bias) inputs.push_back(*bias);
    tiles(Op::GEMV_TILE, std::move(inputs), {}, 0, bias.has_value(), out, K, N, tile, label);
  }

  // The tiles of any GEMV-shaped op (GEMV_TILE or a fused tile, docs/OPCODES.md): `inputs` in
  // the op's order, `extra` params beside K / N_tile / n_off, `extra_bytes` read by every tile
  // besides its weight rows (a norm weight, say). A GLU tile reads `n_weights` = 2 weights' rows
  // (and biases).
  // `out2` >= 0: a second output that every tile writes too (GEMV_ADD_TILE's copy).
  void tiles(Op op, std::vector<int64_t> inputs, const Params& extra, int64_t extra_bytes,
             bool has_bias, int64_t out, int64_t K, int64_t N, int64_t tile,
             const std::string& label, int64_t n_weights = 1, int64_t out2 = -1) {
    const int64_t counter = p_.new_counter(label + " tiles");
    const int64_t tiles = range_tiles(op, std::move(inputs), extra, extra_bytes, has_bias, out, K,
                                      0, N, tile, label, counter, n_weights, out2);
    ready_[out] = Wait{counter, tiles};
    if (out2 >= 0) ready_[out2] = Wait{counter, tiles};
  }

  // The tiles of rows [n_begin, n_end) of a GEMV-shaped op (as tiles()) under `counter`, which
  // other tasks may share; returns how many. The caller marks `out` ready.
  int64_t range_tiles(Op op, std::vector<int64_t> inputs, const Params& extra,
                      int64_t extra_bytes, bool has_bias, int64_t out, int64_t K,
                      int64_t n_begin, int64_t n_end, int64_t tile, const std::string& label,
                      int64_t counter, int64_t n_weights = 1, int64_t out2 = -1) {
    const std::vector<Wait> waits = waits_for(inputs);
    int64_t tiles = 0;
    for (int64_t off = n_begin; off < n_end; off += tile, ++tiles) {
      const int64_t width = std::min(tile, n_end - off);
      Params params = extra;
      params.set_int("K", K);
      params.set_int("N_tile", width);
      params.set_int("n_off", off);
      // The prefetch distance, in GEMV_TILE's M_tile slot as the reference design's loader
      // marshals it (GEMV ignores M_tile as a tile extent).
      if (depth_ > 0) params.set_int("M_tile", depth_);
      std::vector<int64_t> outputs{out};
      if (out2 >= 0) outputs.push_back(out2);
      Task& t = add_task(op, inputs, std::move(outputs), counter, waits, std::move(params),
                            fmt::format("{}[t{}]", label, tiles));
      t.est_bytes = wbytes(n_weights * (K * width + (has_bias ? width : 0))) + extra_bytes;
      t.est_flops = 2 * K * width * n_weights;
    }
    return tiles;
  }

  // Several tasks writing one buffer each under one shared counter: consumers all-join.
  int64_t shared_counter(const std::string& note) { return p_.new_counter(note); }
  void shared_task(Op op, std::vector<int64_t> inputs, int64_t out, int64_t counter, Params params,
                   std::string label, int64_t est_bytes, int64_t est_flops) {
    std::vector<Wait> waits = waits_for(inputs);
    Task& t = add_task(op, std::move(inputs), {out}, counter, std::move(waits),
                          std::move(params), std::move(label));
    t.est_bytes = est_bytes;
    t.est_flops = est_flops;
  }
  // A task with several outputs (the fused attention also writes the KV caches) under `counter`;
  // counter < 0: a counter of its own. Returns the counter.
  int64_t multi_task(Op op, std::vector<int64_t> inputs, std::vector<int64_t> outputs,
                     int64_t counter, Params params, std::string label, int64_t est_bytes,
                     int64_t est_flops) {
    if (counter < 0) counter = p_.new_counter(label);
    std::vector<Wait> waits = waits_for(inputs);
    Task& t = add_task(op, std::move(inputs), std::move(outputs), counter, std::move(waits),
                          std::move(params), std::move(label));
    t.est_bytes = est_bytes;
    t.est_flops = est_flops;
    return counter;
  }
  void mark_ready(int64_t buffer, Wait w) { ready_[buffer] = w; }

  // Where the tasks added from now on run in a tensor-parallel step: on cluster `cluster`'s SMs
  // (-1: anywhere), at its rank `rank` (-1: dealt round robin over the cluster's SMs).
  struct Place {
    int64_t cluster = -1, rank = -1;
  };
  void place(int64_t cluster, int64_t rank = -1) { place_ = Place{cluster, rank}; }
  const std::vector<Place>& placements() const { return placements_; }

  static constexpr DType kActDtype = DType::F32;

 private:
  // The waits that make `inputs` readable: one per producing counter (read-only buffers and a
  // KV cache not yet appended this step need none).
  std::vector<Wait> waits_for(const std::vector<int64_t>& inputs) const {
    std::vector<Wait> waits;
    for (int64_t id : inputs) {
      const auto it = ready_.find(id);
      if (it == ready_.end()) continue;
      if (std::none_of(waits.begin(), waits.end(),
                       [&](const Wait& w) { return w.counter == it->second.counter; }))
        waits.push_back(it->second);
    }
    return waits;
  }

  Task& add_task(Op op, std::vector<int64_t> inputs, std::vector<int64_t> outputs,
                 int64_t counter, std::vector<Wait> waits, Params params, std::string label) {
    Task& t = p_.add_task(op, std::move(inputs), std::move(outputs), counter, std::move(waits),
                          std::move(params), std::move(label));
    placements_.resize(p_.tasks.size());
    placements_.back() = place_;
    return t;
  }

  Program& p_;
  DType wdt_;
  int64_t depth_;
  std::unordered_map<int64_t, Wait> ready_;
  Place place_;
  std::vector<Place> placements_;  // by task id
};

}  // namespace amk::schedule
