#include "runtime/cpu_worker_pool.h"

#include <algorithm>

namespace amk {

namespace {

// How many times an idle worker polls for a new job before it sleeps: about the gap between two
// forks of one decode step, so a worker stays awake through a step and stops burning a (shared)
// core soon after decoding stops.
constexpr int kIdlePolls = 4000;

// The chunk index of a closed counter: past the end of any job, so no claim succeeds.
constexpr uint64_t kClosed = 0xffffffffu;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

CpuWorkerPool::CpuWorkerPool(int threads) {
  for (int member = 1; member < std::max(threads, 1); ++member)
    workers_.emplace_back([this, member] { worker_loop(member); });
}

CpuWorkerPool::~CpuWorkerPool() {
  stopping_.store(true, std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_acq_rel);
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void CpuWorkerPool::work_on(uint32_t generation, int member) {
  for (;;) {
    uint64_t state = claim_.load(std::memory_order_acquire);
    if (uint32_t(state >> 32) != generation) return;
    // Acquire loads of dispatch's release stores: if any of the four reads the next job's value,
    // the counter was closed before it was written, so the claim below reads the closed counter
    // (or later) and fails. A successful claim therefore proves all four are this job's.
    const Task task = task_.load(std::memory_order_acquire);
    void* const context = context_.load(std::memory_order_acquire);
    const int64_t count = count_.load(std::memory_order_acquire);
    const int64_t chunk = chunk_.load(std::memory_order_acquire);
    const auto index = int64_t(state & 0xffffffffu);
    if (index >= (count + chunk - 1) / chunk) return;
    if (!claim_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel)) continue;
    const int64_t begin = index * chunk, end = std::min(count, begin + chunk);
    task(context, begin, end, member);
    done_.fetch_add(end - begin, std::memory_order_release);
  }
}

void CpuWorkerPool::dispatch(int64_t count, int64_t chunk, Task task, void* context) {
  if (count <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  if (workers_.empty() || count <= chunk) {  // one chunk: nothing to share
    task(context, 0, count, 0);
    return;
  }
  const uint32_t generation = uint32_t(claim_.load(std::memory_order_relaxed) >> 32) + 1;
  // Close the finished job's counter before writing the new job. A member that read the old
  // counter (every chunk claimed) and then this job's larger size would otherwise claim "the
  // next chunk" of a job not yet published, and run it twice: measured, an accumulating GEMV
  // counted twice (tests/test_cpu_worker_pool.cpp).
  claim_.store(uint64_t(generation) << 32 | kClosed, std::memory_order_relaxed);
  task_.store(task, std::memory_order_release);
  context_.store(context, std::memory_order_release);
  count_.store(count, std::memory_order_release);
  chunk_.store(chunk, std::memory_order_release);
  done_.store(0, std::memory_order_relaxed);
  // The release publishes the job to every member whose claim acquires the new state.
  claim_.store(uint64_t(generation) << 32, std::memory_order_release);
  wake_.store(generation, std::memory_order_release);
  wake_.notify_all();
  work_on(generation, 0);
  // Only chunks a worker holds are left; it is running them (or was preempted inside one).
  for (int polls = 0; done_.load(std::memory_order_acquire) < count; ++polls)
    if (polls < kIdlePolls)
      cpu_relax();
    else
      std::this_thread::yield();
}

void CpuWorkerPool::worker_loop(int member) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t now = wake_.load(std::memory_order_acquire);
    for (int polls = 0; now == seen && polls < kIdlePolls; ++polls) {
      cpu_relax();
      now = wake_.load(std::memory_order_acquire);
    }
    if (now == seen) {
      wake_.wait(seen, std::memory_order_acquire);
      continue;
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    seen = now;
    work_on(now, member);
  }
}

}  // namespace amk
