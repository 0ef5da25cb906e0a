#include "schedule/launch_config.h"

#include <fmt/format.h>

#include "amk/lowering.h"

namespace amk::schedule {

void check_launch_config(const ScheduleConfig& c, const GpuTarget& target) {
  // A warp is 32 threads and a CUDA block holds at most 1024.
  if (c.threads_per_block < 32 || c.threads_per_block > 1024 || c.threads_per_block % 32 != 0)
    throw LoweringError(fmt::format("threads_per_block {} must be a multiple of 32 in [32, 1024]",
                                    c.threads_per_block));
  if (target.max_threads_per_sm > 0 && c.threads_per_block > target.max_threads_per_sm)
    throw LoweringError(fmt::format("threads_per_block {} exceeds {}'s max_threads_per_sm {}",
                                    c.threads_per_block, target.name, target.max_threads_per_sm));
  if (c.smem_bytes_per_block < 0)
    throw LoweringError(
        fmt::format("smem_bytes_per_block must be >= 0, got {}", c.smem_bytes_per_block));
  // The loader asks for this much dynamic SMEM per block; the opt-in cap, not the per-SM
  // figure, is what cudaFuncSetAttribute accepts (IR_SPEC §8.1).
  if (c.smem_bytes_per_block > target.smem_bytes_per_block_optin)
    throw LoweringError(
        fmt::format("smem_bytes_per_block {} exceeds {}'s smem_bytes_per_block_optin {}",
                    c.smem_bytes_per_block, target.name, target.smem_bytes_per_block_optin));
  if (c.pipelining_depth < 0)
    throw LoweringError(fmt::format("pipelining_depth must be >= 0, got {}", c.pipelining_depth));
  // The weight stream: a stage is one cp.async.bulk (multiple of 16 bytes, its mbarrier's
  // tx-count is 20 bits); the in-flight bound is in bytes, at least one stage's worth is kept.
  if (c.stream_chunk_bytes != 0 &&
      (c.stream_chunk_bytes < 1024 || c.stream_chunk_bytes > (1 << 20) - 16 ||
       c.stream_chunk_bytes % 16 != 0))
    throw LoweringError(fmt::format("stream_chunk_bytes {} must be 0 (auto) or a multiple of 16 "
                                    "in [1024, 1048560]",
                                    c.stream_chunk_bytes));
  if (c.stream_bytes_in_flight < 0 || c.stream_bytes_in_flight > (int64_t(1) << 24))
    throw LoweringError(fmt::format("stream_bytes_in_flight {} must be 0 (the whole ring) or in "
                                    "[1, 16777216]",
                                    c.stream_bytes_in_flight));
  if (c.stream_prefetch_bytes_in_flight < 0 || c.stream_prefetch_bytes_in_flight > (int64_t(1) << 24))
    throw LoweringError(fmt::format("stream_prefetch_bytes_in_flight {} must be 0 (as "
                                    "stream_bytes_in_flight) or in [1, 16777216]",
                                    c.stream_prefetch_bytes_in_flight));
  if (c.page_allocation != "graph_color" && c.page_allocation != "linear" &&
      c.page_allocation != "none")
    throw LoweringError(fmt::format("page_allocation '{}' is unknown (graph_color, linear or none)",
                                    c.page_allocation));
}

}  // namespace amk::schedule
