// libFuzzer target for the config.json parser (amk/model_config.h) and the facts derived from a
// parsed config.
//
// Properties, for any bytes: parse_model_config() returns or throws ModelConfigError (its
// UnsupportedModelError included) with a message, nothing else; a config it returns keeps the
// invariants everything downstream relies on (every size in [1, 2^31), heads divisible by KV
// heads, an even head_dim, num_hidden_layers layer types, finite positive reals); and
// expected_weights(), parameter_count(), weight_bytes(), rope_inv_freq() and check_max_context()
// take it without crashing (an overflow is a ModelConfigError).
//
// Build and run: README "Benchmarks and fuzzing"; results in docs/FUZZING.md.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "amk/model_config.h"

namespace {

[[noreturn]] void die(const char* what, std::string_view input) {
  std::fprintf(stderr, "fuzz_model_config: %s\n%.*s\n", what,
               static_cast<int>(std::min<size_t>(input.size(), 4000)), input.data());
  std::abort();
}

bool size_ok(int64_t v) { return v >= 1 && v <= std::numeric_limits<int32_t>::max(); }
bool real_ok(double v) { return std::isfinite(v) && v > 0; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  amk::ModelConfig c;
  try {
    c = amk::parse_model_config(text, "config.json");
  } catch (const amk::ModelConfigError& e) {
    if (std::string_view(e.what()).empty()) die("refused without a message", text);
    return 0;
  } catch (const std::exception& e) {
    die(e.what(), text);  // anything but ModelConfigError is a bug
  }

  if (!size_ok(c.vocab_size) || !size_ok(c.hidden_size) || !size_ok(c.intermediate_size) ||
      !size_ok(c.num_hidden_layers) || !size_ok(c.num_attention_heads) ||
      !size_ok(c.num_key_value_heads) || !size_ok(c.head_dim) ||
      !size_ok(c.max_position_embeddings))
    die("a size outside [1, 2^31) was accepted", text);
  if (c.num_attention_heads % c.num_key_value_heads != 0) die("heads % kv heads != 0", text);
  if (c.head_dim % 2 != 0) die("odd head_dim accepted", text);
  if (!size_ok(c.q_dim()) || !size_ok(c.kv_dim())) die("q_dim or kv_dim out of range", text);
  if (int64_t(c.layer_types.size()) != c.num_hidden_layers) die("layer_types size", text);
  if (!real_ok(c.rms_norm_eps) || !real_ok(c.rope.theta) || !real_ok(c.rope.factor))
    die("a non-finite or non-positive real accepted", text);
  if (c.sliding_window && *c.sliding_window < 1) die("sliding_window < 1 accepted", text);

  try {
    int64_t n = 0;
    for (const amk::WeightSpec& w : amk::expected_weights(c)) {
      if (w.name.empty() || w.shape.empty()) die("an empty weight spec", text);
      for (const int64_t d : w.shape)
        if (d < 1) die("a weight dimension < 1", text);
      ++n;
    }
    if (n < 2) die("fewer than two weights", text);
    (void)amk::parameter_count(c);
    (void)amk::weight_bytes(c, amk::DType::BF16);
  } catch (const amk::ModelConfigError&) {
    // an element or byte count that overflows int64: refused with a message, not wrapped
  }
  const std::vector<double> inv_freq = amk::rope_inv_freq(c);
  if (int64_t(inv_freq.size()) != c.head_dim / 2) die("rope table size", text);
  for (const int64_t context : {int64_t{1}, c.max_position_embeddings}) {
    try {
      amk::check_max_context(c, context);
    } catch (const amk::ModelConfigError&) {
    }
  }
  return 0;
}
