// Shared pieces of the GPU tests (amk_gpu_tests): the skip guard, where the test data lives on
// the machine that runs the binary, a target shaped like the device, and the teacher-forced
// comparison of two decoders.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "amk/cuda_vm.h"
#include "amk/decoder.h"
#include "amk/ir.h"
#include "support/temp_dir.h"

namespace amk::gpu_testing {

// cuda_availability(), asked once per process.
const CudaAvailability& availability();

// tests/data of the checkout: $AMK_SOURCE_DIR/tests/data when set (the binary is built on one
// machine and run on the GPU machine, where the checkout lives at another path), else the path
// compiled in.
std::filesystem::path testdata_dir();
std::filesystem::path fixture_dir(std::string_view name);

// The built-in target of this device's family (h200 for an H200, else h100) with num_sms set to
// the device's SM count: a program lowered for it never has more SM queues than the device has
// SMs, whatever the part (H100 SXM 132, PCIe 114).
GpuTarget device_target();

// Teacher-forced comparison of `cuda` against `reference` over `tokens` (both are reset first).
// Per position: error = max_j |cuda_j - ref_j| / max_j |ref_j| (a non-finite logit counts as an
// infinite error); the top-1 tokens must agree wherever the reference's top-1/top-2 gap,
// divided by max_j |ref_j|, exceeds `decisive_gap`; the device's SAMPLE_ARGMAX must be the argmax
// of its own logits.
struct DecoderComparison {
  double worst_error = 0.0;
  int64_t worst_position = -1;
  int64_t decisive_positions = 0;  // positions whose top-1 was checked
  std::vector<std::string> failures;  // one line per violated rule (empty: all held)
};
DecoderComparison compare_teacher_forced(Decoder& reference, Decoder& cuda,
                                         std::span<const int64_t> tokens,
                                         double tolerance = 1e-2, double decisive_gap = 2e-2);

// Index of the first maximum (torch.argmax's tie rule, the reference SAMPLE_ARGMAX's).
int64_t argmax(std::span<const float> v);

// A fresh temporary directory (removed by the destructor).
using TempDir = amk::testing::TempDir;  // tests/support/temp_dir.h

}  // namespace amk::gpu_testing

// First line of every GPU test: skips (not fails) with the reason where no usable GPU exists,
// which is what CI without a GPU sees.
#define AMK_REQUIRE_GPU()                                                           \
  do {                                                                              \
    const ::amk::CudaAvailability& amk_gpu_ = ::amk::gpu_testing::availability();   \
    if (!amk_gpu_.usable) GTEST_SKIP() << "no usable GPU: " << amk_gpu_.message;    \
  } while (0)
