#include "amk/kv_row_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>

#include "amk/logit_check.h"
#include "amk/lowering.h"

namespace amk::eval {
namespace {

// Layer `layer`'s K or V cache; nullptr when the program has no buffer of its name.
const Buffer* find_cache(const Program& program, int64_t layer, char k_or_v) {
  const std::string name = kv_cache_name(layer, k_or_v);
  for (const Buffer& b : program.buffers) {
    if (b.name != name) continue;
    if (b.kind != BufferKind::KV_CACHE)
      throw std::invalid_argument(fmt::format("the program has no KV cache '{}'", name));
    return &b;
  }
  return nullptr;
}

// The logit check's relative error (compare_logits) over the rows at `position` of every head
// of a [heads, context, head_dim] cache.
double row_error(const Buffer& cache, const Tensor& ours, const Tensor& ref, int64_t position) {
  if (cache.shape.size() != 3)
    throw std::invalid_argument(fmt::format("KV cache '{}' has rank {}, not 3 [heads, context, "
                                            "head_dim]", cache.name, cache.shape.size()));
  const int64_t heads = cache.shape[0], context = cache.shape[1], dim = cache.shape[2];
  if (position < 0 || position >= context)
    throw std::invalid_argument(fmt::format("position {} is outside KV cache '{}' ({} rows)",
                                            position, cache.name, context));
  const std::vector<float> a = ours.to_floats(), b = ref.to_floats();
  const size_t n = size_t(heads * context * dim);
  if (a.size() != n || b.size() != n)
    throw std::invalid_argument(fmt::format("KV cache '{}': {} and {} values read, {} expected",
                                            cache.name, a.size(), b.size(), n));
  std::vector<float> our_rows, ref_rows;
  for (int64_t g = 0; g < heads; ++g) {
    const auto row = ptrdiff_t((g * context + position) * dim);
    our_rows.insert(our_rows.end(), a.begin() + row, a.begin() + row + dim);
    ref_rows.insert(ref_rows.end(), b.begin() + row, b.begin() + row + dim);
  }
  return compare_logits(ref_rows, our_rows, 0.0).relative_error;
}

}  // namespace

std::vector<KvRowError> kv_row_errors(const Program& program, const BufferReader& ours,
                                      const BufferReader& reference, int64_t position) {
  std::vector<KvRowError> out;
  // Layers 0, 1, ... for as long as the program has their K cache.
  for (int64_t l = 0;; ++l) {
    const Buffer* k = find_cache(program, l, 'k');
    if (k == nullptr) break;
    const Buffer* v = find_cache(program, l, 'v');
    if (v == nullptr)
      throw std::invalid_argument(
          fmt::format("the program has no KV cache '{}'", kv_cache_name(l, 'v')));
    KvRowError e;
    e.layer = l;
    e.k_error = row_error(*k, ours(k->id), reference(k->id), position);
    e.v_error = row_error(*v, ours(v->id), reference(v->id), position);
    out.push_back(e);
  }
  if (out.empty()) throw std::invalid_argument("the program has no KV caches");
  return out;
}

int64_t first_diverging_layer(std::span<const KvRowError> errors, double tolerance) {
  for (const KvRowError& e : errors)
    if (!(e.k_error <= tolerance) || !(e.v_error <= tolerance)) return e.layer;
  return -1;
}

std::string kv_row_report(std::span<const KvRowError> errors, double tolerance) {
  const int64_t first = first_diverging_layer(errors, tolerance);
  std::string out =
      first < 0 ? fmt::format("every layer's K and V rows agree within {:g}\n", tolerance)
                : fmt::format("first layer whose K or V row differs beyond {:g}: {}\n", tolerance,
                              first);
  out += "layer  K row error  V row error\n";
  for (const KvRowError& e : errors)
    out += fmt::format("{:5d}  {:11.2e}  {:11.2e}\n", e.layer, e.k_error, e.v_error);
  return out;
}

}  // namespace amk::eval
