// libFuzzer target for the GGUF reader: any byte string is a candidate file. A GgufError is the
// correct answer to garbage; any other exception, crash, sanitizer report or read outside the
// input through a returned view is a bug. Accepted files are walked in full: every metadata value
// read through the typed API, every tensor's bytes touched and, for the types AMK converts,
// dequantised (bounded, so that one input cannot take the fuzzer's memory).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "amk/gguf.h"
#include "amk/gguf_dequant.h"
#include "amk/gguf_model.h"
#include "amk/model_config.h"

namespace {

volatile double sink = 0;

void walk(const amk::GgufValue& v) {
  (void)v.type_text();
  if (const auto i = v.as_int()) sink = sink + double(*i);
  if (const auto f = v.as_float()) sink = sink + *f;
  if (const auto b = v.as_bool()) sink = sink + *b;
  if (const auto s = v.as_string()) sink = sink + double(s->size()) + (s->empty() ? 0 : (*s)[0]);
  for (const amk::GgufValue& e : v.elements()) walk(e);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  amk::GgufContents c;
  try {
    c = amk::parse_gguf(std::as_bytes(std::span(data, size)), "fuzz.gguf");
  } catch (const amk::GgufError&) {
    return 0;
  }
  for (const amk::GgufKv& kv : c.metadata) {
    if (c.find(kv.key) == nullptr) __builtin_trap();
    walk(kv.value);
    // The typed reads either succeed or refuse with a GgufError.
    try { (void)c.get_strings(kv.key); } catch (const amk::GgufError&) {}
    try { (void)c.get_ints(kv.key); } catch (const amk::GgufError&) {}
    try { (void)c.get_floats(kv.key); } catch (const amk::GgufError&) {}
    try { (void)c.get_int(kv.key); } catch (const amk::GgufError&) {}
  }
  for (const amk::GgufTensor& t : c.tensors) {
    if (c.find_tensor(t.name) != &t) __builtin_trap();
    const int64_t n = t.numel();
    if (uint64_t(n / amk::ggml_block_elements(t.type) * amk::ggml_block_bytes(t.type)) != t.data.size())
      __builtin_trap();
    for (const std::byte b : t.data) sink = sink + double(b);
    if (amk::can_dequantize(t.type) && n <= (1 << 20)) {
      const std::vector<float> v = amk::dequantize(t, "fuzz.gguf");
      if (int64_t(v.size()) != n) __builtin_trap();
      for (const float x : v) sink = sink + x;
    }
    (void)amk::gguf_to_hf_name(t.name);
  }
  // The metadata -> config mapping refuses with its own errors.
  try {
    (void)amk::gguf_model_config(c);
  } catch (const amk::GgufError&) {
  } catch (const amk::ModelConfigError&) {
  }
  return 0;
}
