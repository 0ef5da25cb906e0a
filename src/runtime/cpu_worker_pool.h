// A fixed team of threads for the fork-joins of a decode step (each GEMV's rows, attention's
// heads): ~150 per token, so a fork must cost microseconds.
//
// Work is claimed, not assigned: the items of a parallel_for are cut into chunks that every
// member (the caller is member 0) takes from a shared counter until none are left. On a machine
// whose cores are shared with other processes a worker may wake late or be preempted; the caller
// then simply takes the chunks it would have taken, and waits only for chunks already in hand.
// A static split would wait for the slowest thread at every fork (measured on this 2-core
// machine under load: 8x slower than one thread). Idle workers poll briefly, then sleep on a
// futex (std::atomic::wait).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace amk {

class CpuWorkerPool {
 public:
  // `threads` members including the caller (>= 1).
  explicit CpuWorkerPool(int threads);
  ~CpuWorkerPool();
  CpuWorkerPool(const CpuWorkerPool&) = delete;
  CpuWorkerPool& operator=(const CpuWorkerPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Calls fn(begin, end, member) over disjoint chunks [begin, end) of [0, count), each `chunk`
  // items long (the last one shorter), on whichever members claim them; `member` in [0, size())
  // says whose scratch memory to use. Returns when every chunk is done. `fn` must not throw (a
  // worker has nowhere to send an exception) and must not call parallel_for.
  template <class Fn>
  void parallel_for(int64_t count, int64_t chunk, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    dispatch(count, chunk,
             [](void* f, int64_t b, int64_t e, int member) { (*static_cast<F*>(f))(b, e, member); },
             &fn);
  }

 private:
  using Task = void (*)(void*, int64_t, int64_t, int);
  void dispatch(int64_t count, int64_t chunk, Task task, void* context);
  // Claims and runs chunks of the job of generation `generation` until none are left.
  void work_on(uint32_t generation, int member);
  void worker_loop(int member);

  std::vector<std::thread> workers_;
  // The job. Written by the caller only after closing the counter (no chunk of any job
  // claimable), read by workers before a claim that then proves them current; atomic so that a
  // stale read is no data race.
  std::atomic<Task> task_{nullptr};
  std::atomic<void*> context_{nullptr};
  std::atomic<int64_t> count_{0}, chunk_{1};
  // (generation << 32) | next unclaimed chunk: a claim is a compare-exchange that fails once the
  // generation has moved on, so a late worker never runs an old job's chunk.
  alignas(64) std::atomic<uint64_t> claim_{0};
  // Items finished in the current job; the caller returns when it reaches count_.
  alignas(64) std::atomic<int64_t> done_{0};
  // The generation workers sleep on (a 32-bit futex word).
  alignas(64) std::atomic<uint32_t> wake_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace amk
