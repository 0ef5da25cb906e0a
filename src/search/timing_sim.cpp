// The timing simulator's event engine (docs/SIMULATOR.md has the model and its equations).
//
// Time advances from event to event. Between two events every rate is constant: each SM's ring
// producer fetches weight bytes at its share of the HBM ceiling (max-min fair among the SMs
// fetching, each asking for its bytes in flight over the copy latency), and each consumer in a
// GEMV body consumes them at its own rate unless it has caught up with the producer. Events:
// a timed phase ends (a hop arrives, a prologue or epilogue ends), a producer finishes a tile or
// fills the ring, a consumer finishes a body or catches up with its producer. After each event
// the rates are computed again, so the bandwidth shares follow the set of SMs streaming.
#include "amk/timing_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "amk/abi.h"
#include "search/sim_program.h"

namespace amk::sim {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kTimeEps = 1e-9;   // µs
constexpr double kBytesEps = 1e-6;  // bytes

enum class Phase : uint8_t { Start, Blocked, Waiting, Pre, Body, Post, Done };

inline constexpr size_t kSeenSlots = AMK_MAX_WAITS;  // a task's waits, a lane each

struct SmState {
  // The consumer: its place in the queue over all steps, and the phase of that task.
  int64_t pos = 0;
  Phase phase = Phase::Start;
  double phase_end = 0;
  double consumed = 0;    // bytes of the current GEMV tile's rows consumed
  int64_t started = 0;    // GEMV-family tasks whose waits passed (the producer's pacing signal)
  int64_t x_key = -1;     // the GEMV x cache: (op, x, fused operand) and the step it holds
  int64_t x_step = -1;
  // Per wait slot w (lane w of the CUDA VM's warp 0, sync.cuh wait_for_inputs): the last wait
  // that lane saw satisfied, which a later wait in the same slot need not poll again.
  struct Seen {
    int32_t counter = -1;
    int64_t count = 0;
  };
  std::array<Seen, kSeenSlots> seen{};
  // The producer: the GEMV-family task it fetches (over all steps), the bytes of it fetched,
  // and the bytes in the ring (fetched, not yet consumed).
  int64_t fetch_task = 0;
  double fetched = 0;
  double ring = 0;
  // This instant's rates (bytes/µs) and the producer's state.
  double fetch_rate = 0, consume_rate = 0, demand = 0, inflight = 0;
  bool consuming = false, starved = false, ring_full = false, fetching = false;
  // A producer that restarts after it was idle (paced, or its ring full with no one eating)
  // receives nothing until its first copies land: until fill_until.
  bool was_fetching = false;
  double fill_until = 0;
};

class Engine {
 public:
  Engine(const PreparedProgram& p, const SimConstants& c) : p_(p), c_(c) {
    ceiling_ = (c.ceiling_gbs > 0 ? c.ceiling_gbs : p.target_gbs) * 1e3;  // bytes/µs
    // The consumer's rate over a chunk: the body's arithmetic plus the chunk's fixed cost.
    compute_gbs_ = c.per_sm_gbs * 1e3;
    act_rate_ = c.act_gbs * 1e3;
    attn_rate_ = c.attn_gbs * 1e3;
    slope_ = c.rtt_us_per_kib / 1024.0 / double(p.num_sms);  // µs per byte in flight (GPU)
    sms_.resize(p.sms.size());
    arrivals_.resize(p.counter_increment.size());
    counter_free_.assign(p.counter_increment.size(), 0.0);
    for (auto& a : arrivals_) a.reserve(size_t(p.steps) * 4);
    r_.stamps.assign(p.tasks.size(), {});
    sink_end_.assign(size_t(p.steps), -1);
    fetched_at_sink_.assign(size_t(p.steps), 0);
  }

  SimResult run() {
    validate_inputs();
    for (;;) {
      settle();
      if (done_ == sms_.size()) break;
      compute_rates();
      const double dt = next_event();
      if (!(dt < kInf)) throw_stuck();
      advance(dt);
    }
    return finish();
  }

 private:
  const PreparedProgram& p_;
  const SimConstants& c_;
  double ceiling_ = 0, compute_gbs_ = 0, act_rate_ = 0, attn_rate_ = 0, slope_ = 0;
  double now_ = 0, bytes_in_flight_ = 0, total_fetched_ = 0;
  std::vector<SmState> sms_;
  std::vector<std::vector<double>> arrivals_;  // per counter: when each signal is seen (+ hop)
  std::vector<double> counter_free_;           // per counter: when its last signal was served
  std::vector<double> sink_end_, fetched_at_sink_;
  std::vector<double> wait_begin_abs_, op_begin_abs_, op_end_abs_;
  std::vector<double> body_begin_abs_, body_end_abs_;
  size_t done_ = 0;
  int64_t events_ = 0;
  SimResult r_;

  // The consumer's rate over a chunk for tile t: the body's arithmetic (per_sm_gbs for 8 warps on
  // the register path, scaled by the block's warps, strip_slow_factor slower on the shared-memory
  // path) plus the chunk's fixed cost.
  double consumer_rate(const SimTask& t) const {
    const double compute = compute_gbs_ * t.warp_scale / (t.slow_strips ? c_.strip_slow_factor : 1.0);
    return 1.0 / (1.0 / compute + c_.chunk_us / (t.warp_scale * p_.chunk_bytes));
  }
  // The rate the SM's ring drains at: its consumer's current tile, else the next one it fetches.
  double drain_rate(size_t slot) const {
    const SmState& s = sms_[slot];
    if (s.consuming) return consumer_rate(gemv_at(slot, current_gemv(slot)));
    if (s.fetch_task < gemv_total(slot)) return consumer_rate(gemv_at(slot, s.fetch_task));
    return consumer_rate(SimTask{});
  }

  // ---- the model's latencies at this instant ----
  // A trip's loaded part: rtt_us_per_kib per KiB in flight per SM (GPU mean).
  double loaded() const { return slope_ * bytes_in_flight_; }
  // The loaded part of a trip of one SM's own task (its prologue's reads, its epilogue's
  // release): rtt_us_per_kib per KiB its own producer has in flight. The profiles measured a
  // GEMV epilogue at ~1.3 µs wherever the SM's ring was full (every smollm2-135m level, the 1B's
  // q/k/v) and 2.0-2.4 µs where its producer streamed the next level behind it (the 1B's
  // o_proj, gate/up, down), whatever the GPU's total traffic (bench/RESULTS.md, twenty-first
  // session); the GPU mean charged smollm2's tasks the loaded cost of the SMs still streaming.
  double loaded_sm(size_t slot) const { return c_.rtt_us_per_kib / 1024.0 * sms_[slot].inflight; }
  // A poll's round trip (the GPU mean: the counter's L2 slice is shared).
  double rtt() const { return c_.rtt_us + loaded(); }
  double hop() const { return c_.hop_us + c_.hop_trips * loaded(); }
  double copy_latency() const { return c_.copy_latency_us + slope_ * bytes_in_flight_; }
  // Its copies are in flight (they count as bytes in flight) but none has landed yet.
  bool filling(const SmState& s) const { return s.fill_until > now_ + kTimeEps; }

  void validate_inputs() {
    for (const char* name : {"per_sm_gbs", "act_gbs", "attn_gbs", "strip_slow_factor"}) {
      const double v = *constant_field(c_, name);
      if (!(v > 0) || !std::isfinite(v))
        throw std::invalid_argument(fmt::format("simulate_step: {} must be > 0, got {}", name, v));
    }
    for (const std::string& name : fitted_constant_names()) {
      const double v = *constant_field(c_, name);
      if (!(v >= 0) || !std::isfinite(v))
        throw std::invalid_argument(
            fmt::format("simulate_step: constant {} must be finite and >= 0, got {}", name, v));
    }
    if (!(ceiling_ > 0)) throw std::invalid_argument("simulate_step: no HBM ceiling");
    for (auto* v : {&wait_begin_abs_, &op_begin_abs_, &op_end_abs_, &body_begin_abs_, &body_end_abs_})
      v->assign(p_.tasks.size(), 0);
  }

  // ---- queue positions ----
  size_t queue_size(size_t slot) const { return p_.queues[slot].size(); }
  int64_t total_tasks(size_t slot) const { return int64_t(queue_size(slot)) * p_.steps; }
  int32_t task_at(size_t slot, int64_t pos) const {
    return p_.queues[slot][size_t(pos % int64_t(queue_size(slot)))];
  }
  int64_t step_of(size_t slot, int64_t pos) const { return pos / int64_t(queue_size(slot)); }
  int64_t gemv_total(size_t slot) const { return int64_t(p_.gemvs[slot].size()) * p_.steps; }
  const SimTask& gemv_at(size_t slot, int64_t g) const {
    return p_.tasks[size_t(p_.gemvs[slot][size_t(g % int64_t(p_.gemvs[slot].size()))])];
  }
  // The global GEMV index of the consumer's current task (a Stream task).
  int64_t current_gemv(size_t slot) const {
    const SmState& s = sms_[slot];
    return step_of(slot, s.pos) * int64_t(p_.gemvs[slot].size()) +
           p_.tasks[size_t(task_at(slot, s.pos))].gemv_index;
  }
  // Rows of the consumer's current tile the ring has received.
  double available(size_t slot, int64_t g) const {
    const SmState& s = sms_[slot];
    if (s.fetch_task > g) return gemv_at(slot, g).weight_bytes;
    return s.fetch_task == g ? s.fetched : 0.0;
  }

  // ---- the instant: every transition due now, until none is ----
  void settle() {
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t slot = 0; slot < sms_.size(); ++slot) changed |= step_sm(slot);
    }
  }

  bool step_sm(size_t slot) {
    SmState& s = sms_[slot];
    bool changed = false;
    // The producer moves past a tile it has fetched (and past tiles with no rows).
    while (s.fetch_task < gemv_total(slot) &&
           s.fetched >= gemv_at(slot, s.fetch_task).weight_bytes - kBytesEps) {
      ++s.fetch_task;
      s.fetched = 0;
      changed = true;
    }
    switch (s.phase) {
      case Phase::Done:
      case Phase::Blocked:
        return changed;
      case Phase::Start:
        begin_task(slot);
        return true;
      case Phase::Waiting:
        if (s.phase_end > now_ + kTimeEps) return changed;
        begin_op(slot);
        return true;
      case Phase::Pre:
        if (s.phase_end > now_ + kTimeEps) return changed;
        begin_body(slot);
        return true;
      case Phase::Body: {
        const SimTask& t = p_.tasks[size_t(task_at(slot, s.pos))];
        if (t.kind == TaskKind::Stream) {
          if (s.consumed < t.weight_bytes - kBytesEps || s.phase_end > now_ + kTimeEps)
            return changed;
        } else if (s.phase_end > now_ + kTimeEps) {
          return changed;
        }
        end_body(slot);
        return true;
      }
      case Phase::Post:
        if (s.phase_end > now_ + kTimeEps) return changed;
        end_task(slot);
        return true;
    }
    return changed;
  }

  // The SM takes its next task: it begins waiting for the task's counters.
  void begin_task(size_t slot) {
    SmState& s = sms_[slot];
    if (s.pos >= total_tasks(slot)) {
      s.phase = Phase::Done;
      ++done_;
      return;
    }
    wait_begin_abs_[size_t(task_at(slot, s.pos))] = now_;
    try_release(slot);
  }

  // The absolute signal count a wait of this step needs: counters are never reset between the
  // steps of a launch (docs/CUDA_VM.md, epoch thresholds).
  int64_t needed(int32_t counter, int32_t need, int64_t step) const {
    return step * p_.counter_increment[size_t(counter)] + need;
  }

  // Whether the waits of the SM's task are met; if so it waits until the last signal reached it
  // (a hop after the signal) or, when they were met before it looked, one poll round trip: all
  // its waits are polled in the same round (none when every one's lane already saw its
  // counter there).
  void try_release(size_t slot) {
    SmState& s = sms_[slot];
    const int32_t ti = task_at(slot, s.pos);
    const SimTask& t = p_.tasks[size_t(ti)];
    const int64_t step = step_of(slot, s.pos);
    double ready = now_;
    bool covered = true, polled = false;
    auto check = [&](int32_t counter, int64_t count) {
      const auto& a = arrivals_[size_t(counter)];
      if (int64_t(a.size()) < count) return false;
      ready = std::max(ready, a[size_t(count - 1)]);
      polled = true;
      return true;
    };
    if (t.waits.empty() && step > 0 && p_.sink >= 0) {
      // Step s > 0 of a launch: a root first waits for the previous step's sink (thread 0's
      // poll, which no lane's memory covers).
      const int32_t sc = p_.tasks[size_t(p_.sink)].out_counter;
      if (!check(sc, step * p_.counter_increment[size_t(sc)])) {
        s.phase = Phase::Blocked;
        return;
      }
      covered = false;
    }
    for (size_t w = 0; w < t.waits.size(); ++w) {
      const auto& [counter, need] = t.waits[w];
      const int64_t count = needed(counter, need, step);
      if (!check(counter, count)) {
        s.phase = Phase::Blocked;
        return;
      }
      if (!(w < kSeenSlots && s.seen[w].counter == counter && s.seen[w].count >= count))
        covered = false;
    }
    if (polled && !covered) {
      ready = std::max(ready, now_ + rtt());
      // The lanes that polled remember what they saw (a covered lane keeps its own).
      for (size_t w = 0; w < t.waits.size() && w < kSeenSlots; ++w) {
        const int32_t counter = t.waits[w].first;
        const int64_t count = needed(counter, t.waits[w].second, step);
        if (!(s.seen[w].counter == counter && s.seen[w].count >= count)) s.seen[w] = {counter, count};
      }
    }
    // The work before the gate overlaps the waits; met waits do not hide it.
    if (t.kind == TaskKind::Stream || t.kind == TaskKind::Attention)
      ready = std::max(ready, wait_begin_abs_[size_t(ti)] + c_.gate_us);
    s.phase = Phase::Waiting;
    s.phase_end = ready;
  }

  // The waits passed: the op begins with its prologue.
  void begin_op(size_t slot) {
    SmState& s = sms_[slot];
    const int32_t ti = task_at(slot, s.pos);
    const SimTask& t = p_.tasks[size_t(ti)];
    op_begin_abs_[size_t(ti)] = now_;
    double act = t.act_bytes, trips = c_.prologue_trips + t.extra_trips;
    if (t.kind == TaskKind::Stream) {
      ++s.started;
      const int64_t step = step_of(slot, s.pos);
      if (s.x_key == t.x_key && s.x_step == step) {  // x is still in the op scratch
        act = 0;
        trips = c_.prologue_trips;
      }
      s.x_key = t.x_key;
      s.x_step = step;
    } else {
      s.x_key = -1;  // any other op may have used the op scratch
    }
    s.phase = Phase::Pre;
    s.phase_end = now_ + trips * (c_.rtt_us + loaded_sm(slot)) + act / (act_rate_ * t.warp_scale);
  }

  void begin_body(size_t slot) {
    SmState& s = sms_[slot];
    const int32_t ti = task_at(slot, s.pos);
    const SimTask& t = p_.tasks[size_t(ti)];
    body_begin_abs_[size_t(ti)] = now_;
    s.phase = Phase::Body;
    s.consumed = 0;
    if (t.kind == TaskKind::Attention)
      s.phase_end = now_ + c_.attn_fixed_us / t.warp_scale + t.kv_bytes / attn_rate_;
    else if (t.kind == TaskKind::Stream)
      s.phase_end = now_ + c_.body_fixed_us;  // rows flow after it; the body ends on its bytes
    else
      s.phase_end = now_;  // Other: the prologue was the work
  }

  void end_body(size_t slot) {
    SmState& s = sms_[slot];
    const int32_t ti = task_at(slot, s.pos);
    body_end_abs_[size_t(ti)] = now_;
    s.phase = Phase::Post;
    const SimTask& t = p_.tasks[size_t(ti)];
    // An in-cluster hand-off's epilogue forwards into shared memory: no release queued behind
    // its SM's copies.
    s.phase_end = now_ + c_.task_fixed_us + c_.epilogue_us_per_row * t.out_rows +
                  (t.in_cluster ? 0.0 : c_.epilogue_trips * loaded_sm(slot));
  }

  // The epilogue's release: the counter's signal, seen by its waiters one hop later.
  void end_task(size_t slot) {
    SmState& s = sms_[slot];
    const int32_t ti = task_at(slot, s.pos);
    const SimTask& t = p_.tasks[size_t(ti)];
    op_end_abs_[size_t(ti)] = now_;
    // The signal is served after the counter's previous one (arrive_us each), then seen a hop
    // later; served in order, so each counter's arrivals stay sorted.
    double& served = counter_free_[size_t(t.out_counter)];
    served = std::max(now_, served) + c_.arrive_us;
    arrivals_[size_t(t.out_counter)].push_back(served +
                                               (t.in_cluster ? p_.cluster_hop_us : hop()));
    if (ti == p_.sink) {
      const int64_t step = step_of(slot, s.pos);
      sink_end_[size_t(step)] = now_;
      fetched_at_sink_[size_t(step)] = total_fetched_;
    }
    ++s.pos;
    s.phase = Phase::Start;
    for (size_t other = 0; other < sms_.size(); ++other)
      if (sms_[other].phase == Phase::Blocked) try_release(other);
  }

  // ---- rates between events ----
  void compute_rates() {
    ++events_;
    // Bytes in flight: each fetching producer keeps its bound of copies outstanding, or, held
    // back by a full ring, what its consumer frees in one copy latency.
    double inflight = 0;
    for (size_t slot = 0; slot < sms_.size(); ++slot) {
      SmState& s = sms_[slot];
      s.consuming = false;
      s.starved = false;
      if (s.phase == Phase::Body && p_.tasks[size_t(task_at(slot, s.pos))].kind == TaskKind::Stream &&
          s.phase_end <= now_ + kTimeEps) {
        s.consuming = true;
        s.starved = s.consumed >= available(slot, current_gemv(slot)) - kBytesEps;
      }
      s.fetching = false;
      s.ring_full = s.ring >= p_.ring_bytes - kBytesEps;
      s.inflight = 0;
      if (s.fetch_task < gemv_total(slot)) {
        const SimTask& next = gemv_at(slot, s.fetch_task);
        // Pipelining depth d: tile j is fetched once the consumers started tile j - d.
        const bool paced = s.started >= s.fetch_task - next.depth + 1;
        const bool drains = !s.ring_full || (s.consuming && !s.starved);
        if (paced && drains) {
          s.fetching = true;
          const int chunks = s.started > s.fetch_task ? p_.inflight_chunks : p_.prefetch_chunks;
          s.inflight = double(chunks) * p_.chunk_bytes;
          if (s.ring_full) s.inflight = std::min(s.inflight, drain_rate(slot) * c_.copy_latency_us);
        }
      }
      if (s.fetching && !s.was_fetching)
        s.fill_until = now_ + c_.stream_start_latencies * copy_latency();
      s.was_fetching = s.fetching;
      inflight += s.inflight;
    }
    bytes_in_flight_ = inflight;
    const double latency = std::max(copy_latency(), 1e-6);
    // Each producer asks for its bytes in flight per copy latency (a full ring: no more than
    // its consumer frees); HBM is shared max-min fairly when the asks exceed the ceiling.
    double asked = 0;
    std::vector<size_t>& askers = askers_;
    askers.clear();
    for (size_t slot = 0; slot < sms_.size(); ++slot) {
      SmState& s = sms_[slot];
      s.demand = 0;
      if (!s.fetching || filling(s)) continue;
      double d = s.inflight / latency;
      if (s.ring_full) d = std::min(d, drain_rate(slot));
      s.demand = d;
      asked += d;
      askers.push_back(slot);
    }
    if (asked <= ceiling_) {
      for (size_t slot : askers) sms_[slot].fetch_rate = sms_[slot].demand;
    } else {
      std::sort(askers.begin(), askers.end(),
                [&](size_t a, size_t b) { return sms_[a].demand < sms_[b].demand; });
      double left = ceiling_;
      size_t n = askers.size();
      for (size_t slot : askers) {
        const double share = left / double(n);
        const double give = std::min(sms_[slot].demand, share);
        sms_[slot].fetch_rate = give;
        left -= give;
        --n;
      }
    }
    for (size_t slot = 0; slot < sms_.size(); ++slot) {
      SmState& s = sms_[slot];
      if (!s.fetching || filling(s)) s.fetch_rate = 0;
      s.consume_rate = 0;
      if (!s.consuming) continue;
      const double rate = drain_rate(slot);
      if (!s.starved) {
        s.consume_rate = rate;
      } else if (s.fetch_task == current_gemv(slot)) {
        s.consume_rate = std::min(rate, s.fetch_rate);
      }
    }
  }
  std::vector<size_t> askers_;

  double next_event() const {
    double dt = kInf;
    for (size_t slot = 0; slot < sms_.size(); ++slot) {
      const SmState& s = sms_[slot];
      switch (s.phase) {
        case Phase::Waiting:
        case Phase::Pre:
        case Phase::Post:
          dt = std::min(dt, s.phase_end - now_);
          break;
        case Phase::Body:
          if (!s.consuming) {  // a timed body, or a GEMV body's fixed part
            dt = std::min(dt, s.phase_end - now_);
          } else if (s.consume_rate > 0) {
            const int64_t g = current_gemv(slot);
            dt = std::min(dt, (gemv_at(slot, g).weight_bytes - s.consumed) / s.consume_rate);
            if (!s.starved && s.fetch_task == g && s.consume_rate > s.fetch_rate)
              dt = std::min(dt, (s.fetched - s.consumed) / (s.consume_rate - s.fetch_rate));
          }
          break;
        default:
          break;
      }
      if (s.fetching && filling(s)) dt = std::min(dt, s.fill_until - now_);
      if (s.fetch_rate > 0) {
        dt = std::min(dt, (gemv_at(slot, s.fetch_task).weight_bytes - s.fetched) / s.fetch_rate);
        const double net = s.fetch_rate - s.consume_rate;
        if (!s.ring_full && net > 0) dt = std::min(dt, (p_.ring_bytes - s.ring) / net);
      }
    }
    return std::max(dt, 0.0);
  }

  void advance(double dt) {
    now_ += dt;
    for (SmState& s : sms_) {
      if (s.fetch_rate > 0) {
        s.fetched += s.fetch_rate * dt;
        total_fetched_ += s.fetch_rate * dt;
      }
      if (s.consume_rate > 0) s.consumed += s.consume_rate * dt;
      s.ring = std::clamp(s.ring + (s.fetch_rate - s.consume_rate) * dt, 0.0, p_.ring_bytes);
    }
  }

  [[noreturn]] void throw_stuck() const {
    for (size_t slot = 0; slot < sms_.size(); ++slot)
      if (sms_[slot].phase == Phase::Blocked)
        throw std::invalid_argument(fmt::format(
            "simulate_step: the waits cannot all be met (SM {} is blocked at task {})",
            p_.sms[slot], task_at(slot, sms_[slot].pos)));
    throw std::invalid_argument("simulate_step: no event can happen (a rate is zero)");
  }

  SimResult finish() {
    const size_t n = p_.tasks.size();
    // The last step's stamps, from its earliest wait begin (what --profile-tsv writes).
    double origin = kInf, last = 0;
    for (size_t i = 0; i < n; ++i) origin = std::min(origin, wait_begin_abs_[i]);
    if (!(origin < kInf)) origin = 0;
    auto ns = [&](double us) { return uint64_t(std::llround(std::max(0.0, us - origin) * 1e3)); };
    for (size_t i = 0; i < n; ++i) {
      r_.stamps[i] = {ns(wait_begin_abs_[i]), ns(op_begin_abs_[i]),
                      std::max<uint64_t>(ns(op_end_abs_[i]), 1), ns(body_begin_abs_[i]),
                      ns(body_end_abs_[i])};
      last = std::max(last, op_end_abs_[i]);
    }
    const size_t steps = size_t(p_.steps);
    if (p_.sink >= 0 && steps >= 2 && sink_end_[steps - 2] >= 0) {
      r_.step_us = sink_end_[steps - 1] - sink_end_[steps - 2];
      const double bytes = fetched_at_sink_[steps - 1] - fetched_at_sink_[steps - 2];
      r_.hbm_busy_fraction = r_.step_us > 0 ? bytes / (ceiling_ * r_.step_us) : 0;
    } else {
      r_.step_us = steps == 1 ? last : last - origin;
      r_.hbm_busy_fraction = r_.step_us > 0 ? total_fetched_ / double(steps) /
                                                  (ceiling_ * r_.step_us)
                                            : 0;
    }
    r_.events = events_;
    return std::move(r_);
  }
};

}  // namespace

SimResult simulate(const PreparedProgram& prepared, const SimConstants& c) {
  Engine engine(prepared, c);
  return engine.run();
}

SimResult simulate_step(const Program& program, const GpuTarget& target, const SimConstants& c,
                        const SimOptions& options) {
  const Prepared p = prepare(program, target, options);
  return simulate(*p, c);
}

SimResult simulate_step(const Program& program, const GpuTarget& target, const SimConstants& c) {
  return simulate_step(program, target, c, SimOptions{});
}

double cluster_hop_us(int64_t cluster_size) {
  if (cluster_size <= 2) return 0.36;
  if (cluster_size <= 4) return 0.41;
  if (cluster_size <= 8) return 0.49;
  return 0.77;
}

}  // namespace amk::sim
