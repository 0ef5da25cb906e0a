// KV_APPEND: write n new rows of k (or v) into the cache [n_kv_heads, max_seq, head_dim] at
// positions [pos, pos + n): new row i's head g goes to (g, pos + i) (amk/ir.h kv_cache_offset).
// `new` is any tensor of n * n_kv_heads * head_dim elements, row-major [n, n_kv_heads, head_dim]
// (the Python lowerer passes roped k as [1, n_kv, d] and v as the flat [1, n_kv * d] projection).
//
// In a program the output is the cache itself (input 1). Should a caller pass a distinct output
// tensor, it receives the whole updated cache, so the result never depends on what that tensor
// held before.
#include <string>
#include <vector>

#include "amk/op_flags.h"
#include "vm/reference/ops/numeric.h"
#include "vm/reference/ops/ops.h"

namespace amk::ref {

void op_kv_append(const OpContext& c) {
  c.check_registry();
  const Tensor& fresh = c.input(0);
  const Tensor& cache = c.input(1);
  Tensor& out = c.output(0);
  require_rank(c, cache, "input 1 (cache)", 3);
  if (out.dtype != cache.dtype || out.shape != cache.shape)
    c.fail("output 0 (" + std::string(name_of(out.dtype)) + " " + shape_str(out.shape) +
           ") must be the cache, input 1 (" + std::string(name_of(cache.dtype)) + " " +
           shape_str(cache.shape) + ")");
  const int64_t n_kv = cache.shape[0], max_seq = cache.shape[1], head_dim = cache.shape[2];
  const int64_t row = n_kv * head_dim;
  if (row < 1) c.fail("input 1 (cache) has empty rows, shape " + shape_str(cache.shape));
  const int64_t flags = c.int_param_or("flags", 0);
  if ((flags & ~kv_append_flags::kRuntimePos) != 0)
    c.fail("param flags " + std::to_string(flags) + " has unknown bits (bit 0 runtime position)");
  // Runtime position: param pos is an offset from the step's position (docs/RUNTIME_POSITION.md).
  int64_t pos = c.int_param("pos");
  if ((flags & kv_append_flags::kRuntimePos) != 0)
    pos += c.step_position("flags bit 0 (runtime position)");
  if (fresh.numel() < 1 || fresh.numel() % row != 0)
    c.fail("input 0 (new) has " + std::to_string(fresh.numel()) + " elements (shape " +
           shape_str(fresh.shape) + "), expected a positive multiple of n_kv_heads * head_dim = " +
           std::to_string(row));
  const int64_t n = fresh.numel() / row;
  if (pos < 0 || pos + n > max_seq)
    c.fail("pos " + std::to_string(pos) + " + " + std::to_string(n) + " new rows exceeds the "
           "cache's max_seq " + std::to_string(max_seq) + " (input 1 shape " +
           shape_str(cache.shape) + ")");

  const std::vector<double> rows = load_all(fresh);
  if (&out != &cache) out.bytes = cache.bytes;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < n_kv; ++g)
      for (int64_t d = 0; d < head_dim; ++d)
        store(out, kv_cache_offset(max_seq, head_dim, g, pos + i, d),
              rows[size_t((i * n_kv + g) * head_dim + d)]);
}

}  // namespace amk::ref
