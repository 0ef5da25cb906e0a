// Where a decode step that failed its logit check first went wrong. A step's activations do not
// survive it (their pages are reused within the step), but the KV cache keeps the step's own
// rows: layer l's K and V rows at the step's position are functions of layers 0..l only. So the
// first layer whose rows differ between two decoders that ran the same steps is where the
// failing one's error entered (at or before that layer's k/v projections; a layer whose rows
// agree was computed right up to them).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "amk/ir.h"
#include "amk/tensor.h"

namespace amk::eval {

// One layer's rows at the position: the logit check's relative error (compare_logits: max|ours -
// ref| / max|ref|, infinity when either holds a non-finite value) over every KV head's row of its
// K cache and of its V cache.
struct KvRowError {
  int64_t layer = 0;
  double k_error = 0, v_error = 0;
};

// A decoder's buffer by IR id (ReferenceVM::buffer, CudaVM::read_buffer).
using BufferReader = std::function<Tensor(int64_t id)>;

// Every layer's row errors at `position`, layer by layer, for the KV caches `program` names
// (kv_cache_name(), [n_kv_heads, max_context, head_dim]). Throws std::invalid_argument when the
// program has no KV cache of a layer, when a cache is not that shape, or for a position outside
// it.
std::vector<KvRowError> kv_row_errors(const Program& program, const BufferReader& ours,
                                      const BufferReader& reference, int64_t position);

// The first layer whose K or V row error exceeds `tolerance`, or -1.
int64_t first_diverging_layer(std::span<const KvRowError> errors, double tolerance);

// The errors as a few lines of text: the first diverging layer (or none) and each layer's pair.
std::string kv_row_report(std::span<const KvRowError> errors, double tolerance);

}  // namespace amk::eval
