// The timing mode of AMK's two-mode emulator (issue 13; the data mode is the reference VM): a
// prediction of one decode step's per-task stamps on a GpuTarget, from the lowered program alone.
// Its output has the GPU profile's shape (one eval::TaskStamps per task), so the same per-level
// table (eval::layer_table) prints for a simulated step and a measured one, side by side.
//
// The model (docs/SIMULATOR.md has the equations): a discrete-event run of every SM's queue in
// list order, as the CUDA VM runs it. A task waits for its counters (the signal reaches it one
// counter hop later), runs a prologue of L2 round trips and activation reads, a body, and an
// epilogue, then signals. A GEMV-family body consumes its weight rows from the SM's ring; the
// ring's producer fetches them ahead (pipelining_depth tasks, the ring's capacity) at a rate set
// by its bytes in flight over the copy latency and by a max-min fair share of the HBM ceiling
// among the SMs fetching at that instant. Bytes in flight over the whole GPU lengthen every L2
// round trip, counter hop and copy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "amk/ir.h"
#include "amk/step_trace.h"

namespace amk::sim {

// Constants of the timing model, fitted per GpuTarget from GPU profiles (amk sim-fit) and stored
// as data next to the target (data/targets/<name>.sim.json, compiled into the binary).
// Times in µs, rates in GB/s (= bytes per ns = KB per µs).
struct SimConstants {
  std::string target;            // the GpuTarget name these were fitted on
  double ceiling_gbs = 0;        // aggregate HBM read ceiling (0: the target's measured/spec bw)
  double per_sm_gbs = 26.0;      // a GEMV body's consumer rate: weight bytes one SM computes/µs
  double task_fixed_us = 2.0;    // every task's epilogue: last barrier, release, signal
  double hop_us = 1.0;           // a counter's signal seen by a waiter (idle L2 round trips)
  double chunk_us = 0.25;        // consumer cost per ring chunk (mbarrier wait and release)
  double copy_latency_us = 1.0;  // one bulk copy's latency on an idle GPU
  double rtt_us = 0.2;           // one L2 round trip on an idle GPU
  // Added to a round trip per KiB in flight per SM: the GPU mean for polls, hops and copies, the
  // task's own SM's for its prologue and epilogue.
  double rtt_us_per_kib = 0.008;
  double hop_trips = 4.0;        // round trips of a hop that queue behind the weight traffic
  double prologue_trips = 2.0;   // round trips of a task's prologue (operands, partial sums)
  double act_gbs = 8.0;          // activation bytes one SM reads per µs (x rebuild, norms, argmax)
  double attn_fixed_us = 2.0;    // an attention task's fixed compute
  double attn_gbs = 8.0;         // KV-cache bytes one attention task reads per µs
  // A BF16 GEMV tile whose strips per row and warp count leave no short period (gemv.cuh's
  // strip_period == 0: x from shared memory, not registers) computes this many times slower.
  // The prior, 3: that path reads two float4 of x from shared memory per 16-byte weight vector,
  // three times the shared-memory bytes per weight byte of the register path.
  double strip_slow_factor = 3.0;
  // Round trips of a task's epilogue (the release of its stores before the signal) that queue
  // behind its SM's own weight copies: task_fixed_us + epilogue_trips x (the loaded part of a
  // trip at that SM's bytes in flight).
  double epilogue_trips = 1.0;
  // A GEMV body's fixed cost before its rows flow (the first chunk's wait, the strip set-up):
  // the profiles' body time is ~1.3 µs plus the bytes at a rate far above per_sm_gbs' old fits.
  double body_fixed_us = 1.0;
  // Signals on one counter are served one after another (same-address atomics serialise at the
  // counter's L2 slice, behind the polls of its waiters): a level of n tasks lands its last
  // signal at least n x arrive_us after its first. Added to explain why fewer, wider tiles end a
  // small model's level sooner (smollm2-135m: q/k/v tiles twice as wide -6.6 %, o_proj -4 %,
  // bench/RESULTS.md 2026-11-24); the H100 fit put it at ~0.012 µs, too small to be the reason.
  double arrive_us = 0.0;
  // A GEMV-family tile's epilogue per output row it writes (one consumer thread a row: the
  // bias / residual load, the store, the release that waits for the stores), on top of
  // task_fixed_us: a 6-15-row tile of smollm2-135m measured ~1.3 µs of epilogue where the 1B's
  // 16-124-row tiles took ~2.1-2.3 (bench/RESULTS.md, eighteenth session). 0: no such term.
  double epilogue_us_per_row = 0.0;
  // The work a GEMV-family or attention task does before its gate (operand checks, the strip
  // plan, RoPE's frequencies: megakernel.cu runs it ahead of the waits so that it overlaps
  // them): its op begins no sooner than this after its wait began, even where the waits were
  // met before it looked. The 1B's profiles put a second q/k/v, gate/up or down tile on an SM
  // at ~1.9-2.4 µs from its wait's begin to its op's with its inputs long there (bench/RESULTS.md,
  // twenty-sixth session). 0: no such floor.
  double gate_us = 0.0;
  // A producer that starts fetching after it was idle (held by the pipelining depth, or by a
  // full ring while its consumer waits) receives its first bytes this many copy latencies
  // later: the stream is a fluid whose rate is bytes in flight over the latency, which alone
  // lands the first bytes at once, so a depth of 0 (the copies of a tile issued only when its
  // gate passes) cost ~nothing where the GPU measured +12 % (smollm2-135m), +16 % (qwen3-0.6b),
  // +18 % (llama-3.2-1b). 0: no such delay.
  double stream_start_latencies = 0.0;
};

// The fitted constants' names, in a fixed order (the fit's coordinates, the JSON's keys).
const std::vector<std::string>& fitted_constant_names();
// The field of `c` named `name` (one of fitted_constant_names()); nullptr for an unknown name.
double* constant_field(SimConstants& c, const std::string& name);
const double* constant_field(const SimConstants& c, const std::string& name);

// The constants for `target`: the stored fit when there is one (data/targets/<name>.sim.json, as
// compiled in), else defaults with the target's bandwidth (per-SM rates scaled from the H100's
// by the target's bandwidth per SM).
SimConstants constants_for(const GpuTarget& target);

// What a step is simulated at, beside the program.
struct SimOptions {
  // The step's position (keys an attention task reads: position + 1 over the whole window). -1:
  // the bench's mean position, 192, clamped to the program's context.
  int64_t position = -1;
  // Steps run back to back (a multi-step launch); the last one is reported. With 2 or more the
  // ring starts the step warm, as on the GPU, where the producer prefetches the next step's
  // weights during the previous step's tail. 1: from an idle GPU.
  int steps = 2;
  // Clusters of this many consecutive SMs whose in-cluster hand-offs (find_cluster_handoffs,
  // src/ir/cluster_handoffs.h) go through shared memory, as docs/CLUSTER_TP.md's stage 3 would
  // run them: the signaller's epilogue has no release queued behind its copies, and its waiters
  // see the signal cluster_hop_us(cluster_size) later instead of a loaded L2 hop. 0: none (the
  // CUDA VM today).
  int64_t cluster_size = 0;
};

// An in-cluster hand-off on the H200, measured (bench/cluster_stream.cu, forty-fifth session):
// every CTA's outputs st.async'd into every CTA's shared memory, completing on its mbarrier, the
// same with the weight stream running: 0.36 / 0.41 / 0.49 / 0.77 µs for clusters of 2 / 4 / 8 / 16.
// A prior, not fitted (no megakernel runs it yet); other sizes take the next larger's.
double cluster_hop_us(int64_t cluster_size);

struct SimResult {
  // One per task, list order, ns from the step's start (with the body's begin and end: the
  // --profile-tsv body stamps).
  std::vector<eval::TaskStamps> stamps;
  double step_us = 0;  // predicted step latency (sink to sink; one step: span)
  double hbm_busy_fraction = 0;  // of the step, the time some SM's copies were in flight
  int64_t events = 0;            // events the run processed (a size for the tests)
};

// The discrete-event prediction of one step of `program` (which must have every task's sm set,
// as the lowering leaves it). Throws std::invalid_argument on a program it cannot simulate.
SimResult simulate_step(const Program& program, const GpuTarget& target, const SimConstants& c);
SimResult simulate_step(const Program& program, const GpuTarget& target, const SimConstants& c,
                        const SimOptions& options);

// A program prepared once for many simulations (the fit runs each case hundreds of times).
class PreparedProgram;
struct PreparedDeleter {
  void operator()(PreparedProgram* p) const;
};
using Prepared = std::unique_ptr<PreparedProgram, PreparedDeleter>;
Prepared prepare(const Program& program, const GpuTarget& target, const SimOptions& options = {});
SimResult simulate(const PreparedProgram& prepared, const SimConstants& c);

}  // namespace amk::sim
