// libFuzzer target for the safetensors header parser: any byte string is a candidate file.
// A SafetensorsError is the correct answer to garbage; any other exception, crash, sanitizer
// report or out-of-bounds read through a returned view is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "amk/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const amk::SafetensorsContents c =
        amk::parse_safetensors(std::as_bytes(std::span(data, size)), "fuzz.safetensors");
    // Read every element of every view: a view that strays outside the input is caught by ASan.
    volatile double sink = 0;
    for (const amk::TensorView& t : c.tensors) {
      if (c.find(t.name) != &t) __builtin_trap();
      if (static_cast<uint64_t>(t.numel() * amk::itemsize(t.dtype)) != t.bytes.size()) __builtin_trap();
      switch (t.dtype) {
        case amk::StDType::F64:
        case amk::StDType::F32:
        case amk::StDType::F16:
        case amk::StDType::BF16:
          for (const float v : t.to_floats()) sink = sink + v;
          break;
        case amk::StDType::I64:
        case amk::StDType::I32:
        case amk::StDType::I16:
        case amk::StDType::I8:
        case amk::StDType::U8:
        case amk::StDType::BOOL:
          for (const int64_t v : t.to_ints()) sink = sink + static_cast<double>(v);
          break;
        default:
          for (const std::byte b : t.bytes) sink = sink + static_cast<double>(b);
          break;
      }
    }
  } catch (const amk::SafetensorsError&) {
  }
  return 0;
}
