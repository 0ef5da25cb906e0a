#include "amk/weight_traffic.h"

#include <algorithm>
#include <vector>

namespace amk::eval {

TrafficEstimate estimate_traffic(const Program& p, int64_t mean_position) {
  std::vector<bool> read_by_other(p.buffers.size(), false), read_by_embed(p.buffers.size(), false);
  for (const Task& t : p.tasks)
    for (int64_t in : t.inputs) {
      if (in < 0 || size_t(in) >= p.buffers.size()) continue;
      (t.op == Op::EMBED ? read_by_embed : read_by_other)[size_t(in)] = true;
    }
  TrafficEstimate e;
  for (const Buffer& b : p.buffers) {
    if (b.kind == BufferKind::WEIGHT) {
      const bool embed_only = read_by_embed[size_t(b.id)] && !read_by_other[size_t(b.id)];
      e.weight_bytes += embed_only && b.shape.size() == 2 ? dtype_nbytes(b.dtype, b.shape[1])
                                                           : b.nbytes();
    } else if (b.kind == BufferKind::KV_CACHE && kv_cache_positions(b) > 0) {
      const int64_t row = b.numel() / kv_cache_positions(b);
      const int64_t rows = std::min(mean_position + 1, kv_cache_positions(b));
      e.kv_bytes += dtype_nbytes(b.dtype, row * rows);
    }
  }
  return e;
}

}  // namespace amk::eval
