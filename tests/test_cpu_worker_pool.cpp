// CpuWorkerPool (src/runtime/cpu_worker_pool.h): every item of every job runs exactly once, on a
// member whose scratch index is in range, however the jobs' sizes and chunkings alternate.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <vector>

#include "runtime/cpu_worker_pool.h"

namespace amk {
namespace {

// Jobs of alternating shapes: a worker that read one job's claim counter and the next job's size
// (the counter says "all claimed" for the small job, the size says "not yet" for the large one)
// would run a chunk of the large job before it was published, and then again. More members than
// this machine has cores, so members are preempted between their reads.
TEST(CpuWorkerPool, EveryItemOfEveryJobRunsExactlyOnce) {
  constexpr int kMembers = 8;
  CpuWorkerPool pool(kMembers);
  ASSERT_EQ(pool.size(), kMembers);
  struct Shape {
    int64_t count, chunk;
  };
  const Shape shapes[] = {{4, 1}, {640, 1}, {3, 2}, {500, 16}, {97, 7}, {1, 1}};
  std::vector<std::atomic<int>> runs(640);
  int64_t bad_members = 0, wrong = 0;
  for (int job = 0; job < 300000 && wrong == 0; ++job) {
    const Shape s = shapes[job % std::size(shapes)];
    for (std::atomic<int>& r : runs) r.store(0, std::memory_order_relaxed);
    std::atomic<int64_t> outside{0};
    pool.parallel_for(s.count, s.chunk, [&](int64_t b, int64_t e, int member) {
      if (member < 0 || member >= kMembers || b < 0 || e > s.count || e - b > s.chunk)
        outside.fetch_add(1, std::memory_order_relaxed);
      for (int64_t i = b; i < std::min(e, int64_t(runs.size())); ++i)
        runs[size_t(i)].fetch_add(1, std::memory_order_relaxed);
    });
    bad_members += outside.load();
    // parallel_for has returned: no chunk of this job may still be running or run later.
    for (int64_t i = 0; i < s.count; ++i)
      if (runs[size_t(i)].load(std::memory_order_relaxed) != 1) ++wrong;
    for (int64_t i = s.count; i < int64_t(runs.size()); ++i)
      if (runs[size_t(i)].load(std::memory_order_relaxed) != 0) ++wrong;
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(bad_members, 0);
}

}  // namespace
}  // namespace amk
