// IR_SPEC §8.1 wait / signal on the device, with epoch thresholds (docs/CUDA_VM.md).
//
// Counters are never reset between steps: in step e a wait on counter c is satisfied once
// counters[c] >= e * counter_step_increment[c] + wait_threshold (all uint32; the host zeroes the
// counters long before that product could pass 2^31). Only warp 0 polls counters (lane w a
// task's wait w; thread 0 the previous step's sink); the rest of the consumers learn the
// outcome through a consumer barrier.
//
// Every spin also polls the abort flag (watchdog or op error), and the decision "leave now" is
// made collectively (consumer_any), so all consumer threads take the same branch and no named
// barrier is ever left waiting for threads that went elsewhere.
#pragma once

#include <cstdint>

#include "amk/abi.h"
#include "vm/cuda/device_common.cuh"
#include "vm/cuda/primitives.cuh"

namespace amk::cuda {

// ld.acquire.gpu: the counter read that orders everything after it (in this thread, and through
// the following consumer barrier in the whole CTA) after the producers' releases.
__device__ __forceinline__ uint32_t load_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ bool abort_requested(const amk_program_t& prog) {
  return *prog.abort_flag != 0u;  // volatile: never cached in a register or L1
}

// The abort flag is a global word: reading it is an L2 round trip (0.5-1.5 us while the weight
// stream keeps the memory system busy), and a spin that read it on every round added that trip
// to the moment it noticed its own condition: the producer's reaction to a landed copy, a
// consumer's to a full stage, a counter wait's to its signal. A spin therefore reads it only
// every kAbortPollRounds rounds; a watchdog abort is seen within microseconds either way.
struct AbortPoll {
  static constexpr unsigned kAbortPollRounds = 64;
  unsigned rounds = 0;
  // True when the launch is aborting; reads the flag on one round in kAbortPollRounds.
  __device__ __forceinline__ bool aborting(const amk_program_t& prog) {
    return ++rounds % kAbortPollRounds == 0 && abort_requested(prog);
  }
};

// A consumer barrier that is also a vote: true on every consumer thread iff `pred` was true on
// any of them (bar.red.or on named barrier 1, the same barrier consumer_sync uses).
__device__ __forceinline__ bool consumer_any(bool pred, int n_threads) {
  uint32_t any;
  asm volatile(
      "{\n\t.reg .pred p, q;\n\t"
      "setp.ne.u32 p, %1, 0;\n\t"
      "bar.red.or.pred q, 1, %2, p;\n\t"
      "selp.u32 %0, 1, 0, q;\n\t}"
      : "=r"(any)
      : "r"(uint32_t(pred)), "r"(n_threads)
      : "memory");
  return any != 0u;
}

// The value counter c must reach in step `epoch` for a wait with `threshold`.
__device__ __forceinline__ uint32_t wait_target(const amk_program_t& prog, int counter,
                                                int32_t threshold, uint32_t epoch) {
  return epoch * prog.counter_step_increment[counter] + uint32_t(threshold);
}

// The pace of a counter spin. Each poll is one L2 round trip (0.3-1.5 us), which already paces
// it: the first kBusyPolls rounds follow each other without a sleep, since a sleep that the
// signal lands in is added whole to a hop of the layer's dependency chain (the 32-256 ns
// back-off cost ~0.1-0.2 us a hop). Past them (a task waiting out a whole level or step), an
// exponential back-off up to 256 ns.
struct PollBackoff {
  static constexpr unsigned kBusyPolls = 256;
  unsigned sleep_ns = 32;
  // After a round that did not see its target; `rounds` counts them (AbortPoll::rounds).
  __device__ __forceinline__ void after(unsigned rounds) {
    if (rounds < kBusyPolls) return;
    __nanosleep(sleep_ns);
    if (sleep_ns < 256) sleep_ns <<= 1;
  }
};

// Thread 0's spin on one counter, paced by PollBackoff. The abort flag is polled every
// AbortPoll::kAbortPollRounds rounds (so a round is one L2 read, not two in series). False when
// the launch is being aborted.
__device__ __forceinline__ bool spin_until_reached(const amk_program_t& prog, int counter,
                                                   uint32_t target) {
  const uint32_t* addr = prog.counters + counter;
  PollBackoff backoff;
  AbortPoll poll;
  while (load_acquire_gpu(addr) < target) {
    if (poll.aborting(prog)) return false;
    backoff.after(poll.rounds);
  }
  return true;
}

// The step position (-1 for programs without one). Read after the task's gate, or before it
// where OpContext::pos_visible says the CTA may: the sink of the previous step (another SM)
// advanced it. Volatile: never a stale L1 line.
__device__ __forceinline__ int32_t step_position(const amk_program_t& prog) {
  if (prog.pos_buffer < 0) return -1;
  return *static_cast<volatile const int32_t*>(prog.buffers[prog.pos_buffer].ptr);
}

// A poller's memory of the last counter it saw reach a value. Counters only grow, so a wait
// whose target is at most that value is already satisfied, and its acquire already happened:
// consecutive tiles that wait on the same projection skip the L2 round trip.
struct SeenCounter {
  int counter = -1;
  uint32_t value = 0;
};

// All waits of `inst` for step `epoch`, on every consumer thread. True: every input is ready
// and visible to the whole CTA. False (on every consumer thread): the launch is aborting.
//
// Lane w of warp 0 polls wait w (at most AMK_MAX_WAITS <= 32), all of them in the same round:
// a task with several waits (the attention: q, k and v; o_proj and down: their input and the
// residual) passes its gate one round trip after its last counter is reached, not one round
// trip per wait in turn (0.5-0.8 us each under the weight stream: the attention's gate took
// 1.7-2.6 us after q/k/v ended, a one-wait GEMV's 0.5-0.7). Each polling lane's ld.acquire and
// the consumer barrier after the loop order the whole CTA after every producer. The abort flag
// and the back-off (PollBackoff) are as spin_until_reached's, decided warp-wide.
static_assert(AMK_MAX_WAITS <= 32, "one lane of warp 0 a wait");
__device__ __forceinline__ bool wait_for_inputs(const amk_program_t& prog,
                                                const amk_instruction_t& inst, uint32_t epoch,
                                                int tid, int n_threads, SeenCounter& seen) {
  bool aborted = false;
  if (tid < 32) {
    int c = -1;
    uint32_t target = 0;
    if (tid < inst.n_waits) {
      c = inst.wait_counter[tid];
      target = wait_target(prog, c, inst.wait_threshold[tid], epoch);
      if (c == seen.counter && seen.value >= target) c = -1;
    }
    PollBackoff backoff;
    AbortPoll poll;
    const uint32_t* addr = prog.counters + (c >= 0 ? c : 0);
    while (!__all_sync(0xffffffffu, c < 0 || load_acquire_gpu(addr) >= target)) {
      if (__any_sync(0xffffffffu, poll.aborting(prog))) {
        aborted = true;
        break;
      }
      backoff.after(poll.rounds);
    }
    if (!aborted && c >= 0) seen = {c, target};
  }
  return !consumer_any(aborted, n_threads);
}

// Multi-step launches: wait until the sink of the step before `epoch` has signalled, i.e. its
// counter reached epoch * increment (docs/CUDA_VM.md). False when the launch is aborting.
__device__ __forceinline__ bool wait_for_previous_step(const amk_program_t& prog, uint32_t epoch,
                                                       int tid, int n_threads) {
  bool aborted = false;
  if (tid == 0 && prog.sink_instruction >= 0) {
    const int c = prog.instructions[prog.sink_instruction].out_counter;
    aborted = !spin_until_reached(prog, c, epoch * prog.counter_step_increment[c]);
  }
  return !consumer_any(aborted, n_threads);
}

// The generic proxy's shared-memory writes before it, ordered before the async proxy's (a bulk
// copy's) reads after it.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Thread 0's half of a signal, for callers that have just passed a consumer barrier after the
// instruction's last write: make every write of the CTA visible at gpu scope, then count.
//
// Every task writes its outputs with the threads' own stores. Until the thirty-seventh session
// a GEMV tile or attention block whose outputs were whole 16-byte words gathered them in shared
// memory and wrote them with one bulk copy (the TMA's store), waited for its completion and
// counted relaxed (Hazy Research's hand-off), to keep the release's fence from waiting for the
// weight ring's copies in flight (bench/hop_protocol.cu). That was a race: the wait makes the
// writes visible to the issuing thread only, and fresh qwen3-0.6b VMs on the H200 read
// NaN-poisoned or last-step activations through it (bench/RESULTS.md). Fenced and released
// (fence.proxy.async.global, then the release) the bulk store no longer saved anything, and the
// thirty-eighth session measured the plain stores faster: qwen3-0.6b -2.4 %, smollm2-135m
// -1.7 %, llama-3.2-1b -0.2 % (H200).
__device__ __forceinline__ void publish_completion(const amk_program_t& prog, int out_counter,
                                                   int tid) {
  if (tid != 0 || out_counter < 0) return;
  // A release RMW at gpu scope (IR_SPEC §8.1's fence + increment in one instruction): it orders
  // every write the consumer barrier ordered before it, and nothing waits for a result.
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(prog.counters + out_counter)
               : "memory");
}

}  // namespace amk::cuda
