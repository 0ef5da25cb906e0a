// The CUDA VM: the validated program run by one persistent megakernel launch on the GPU
// (docs/CUDA_VM.md). Plain C++: nothing here needs CUDA headers, so the command and the tests
// build the same with or without a CUDA toolkit; without one, or without a GPU, every entry point
// says so (cuda_availability(), CudaVmError) instead of pretending.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/decoder.h"
#include "amk/ir.h"
#include "amk/tensor.h"

namespace amk {

struct CudaAvailability {
  bool built = false;   // this binary contains the CUDA VM
  bool usable = false;  // ... and a GPU it can run on is present
  std::string message;  // why not, or the device ("NVIDIA H100 80GB HBM3, 132 SMs, sm_90")
  std::string device_name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int64_t global_mem_bytes = 0;
};
CudaAvailability cuda_availability();

// The device's streaming-read ceiling in GB/s: a built-in kernel sums `bytes` of device memory
// with 16-byte loads; the median of `repeats` timed passes (after one warm-up). Throws
// CudaVmError (LaunchError) without a usable GPU.
// `method`: 16-byte loads from every thread (ring_chunk_bytes 0, the ceiling), or the
// megakernel's weight-stream mechanism alone, one CTA per SM pulling its share through a
// cp.async.bulk ring of ring_stages x ring_chunk_bytes (what the ring can deliver at best).
struct StreamReadMethod {
  int ring_chunk_bytes = 0;
  int ring_stages = 0;
};
double cuda_stream_read_gbs(int64_t bytes = int64_t{4} << 30, int repeats = 20,
                            StreamReadMethod method = {});

// Status of one launch, as IR_SPEC §8.1 distinguishes them.
enum class CudaStatus {
  Ok,
  Rejected,     // validate() or the loader refused the program; nothing was launched
  Timeout,      // the watchdog fired: the abort flag made every CTA exit; the VM stays usable
  OpError,      // an instruction found its operands inconsistent (abort flag error code)
  LaunchError,  // CUDA refused the launch or reported a fault (message has cudaGetErrorString)
};
std::string_view name_of(CudaStatus status);

class CudaVmError : public std::runtime_error {
 public:
  CudaVmError(CudaStatus status, const std::string& what)
      : std::runtime_error(what), status_(status) {}
  CudaStatus status() const { return status_; }

 private:
  CudaStatus status_;
};

struct CudaVmOptions {
  double timeout_s = 10.0;  // host watchdog per launch
  int device = 0;
  // Stream GEMV weights through the producer warp's shared-memory ring (the fast path). Off:
  // consumers read weights from global memory themselves. compute-sanitizer's racecheck does
  // not model the bulk-copy/mbarrier ordering of the ring, so its runs turn it off.
  bool weight_ring = true;
  // > 1: launch the CTAs in thread-block clusters of this many (docs/CLUSTER_TP.md stage 3; a
  // tensor-parallel program's tiling.tp.size), so a later version can hand off inside them. The
  // program must fill whole clusters, and they must all stay resident
  // (cudaOccupancyMaxActiveClusters), else the VM refuses it by name. Nothing in the kernel
  // uses the clusters yet. 0 or 1: the plain cooperative launch.
  int cluster_size = 0;
  // TEST-ONLY: load a program validate() rejects (to trip the watchdog on purpose).
  bool testing_skip_validation = false;
  // TEST-ONLY: refill the activation arena with NaN (0xFF bytes) before every launch, not only
  // at load. Activations live within a step (IR_SPEC), so results must not change; a task that
  // reads before its producer's writes have reached it then sees NaN, where it would otherwise
  // see the previous launch's value: the right one whenever a test repeats its tokens.
  bool testing_poison_each_launch = false;
};

struct CudaRunResult {
  CudaStatus status = CudaStatus::Ok;
  std::string message;
  double wall_ms = 0.0;  // host wall time of the launch, watchdog wait included
  bool ok() const { return status == CudaStatus::Ok; }
};

// One program resident on the GPU: instructions, buffers (weights uploaded once, activations in
// one scratch arena placed by the PageAllocation, KV caches persistent across launches),
// counters that are never reset between steps (epoch thresholds).
class CudaVM {
 public:
  // Validates and uploads the program's tables and allocates every buffer. Throws CudaVmError
  // (Rejected) for a program validate() or the loader refuses (unsupported dtype or op, a buffer
  // too large), or (LaunchError) when there is no usable GPU.
  explicit CudaVM(Program program, const CudaVmOptions& options = {});
  ~CudaVM();
  CudaVM(const CudaVM&) = delete;
  CudaVM& operator=(const CudaVM&) = delete;

  const Program& program() const;
  const Buffer* find_buffer(std::string_view name) const;

  // Uploads `value` (converted to the buffer's dtype) into a WEIGHT, CONST, IO_INPUT or KV_CACHE
  // buffer. Throws std::invalid_argument on an id, shape or kind mismatch.
  void set_buffer(int64_t id, const Tensor& value);
  // Copies a buffer back to the host (as its own dtype).
  Tensor read_buffer(int64_t id) const;
  // Zeroes every KV_CACHE buffer.
  void zero_kv_cache();

  // Runs `n_steps` decode steps in ONE launch, the first at `position`. The step's token is
  // whatever the token buffer holds (set_buffer before the first step); with n_steps > 1 each
  // step's next_token feeds the following step on the device (the program's token and
  // next_token buffers share memory, docs/CUDA_VM.md). `tokens`, when given, receives the
  // n_steps generated tokens. A program without a sink can only run n_steps == 1.
  CudaRunResult run(int64_t position, int n_steps = 1, std::vector<int32_t>* tokens = nullptr);

  // Profiling: when on, every launch stamps its last step's tasks with %globaltimer (ns) and
  // last_profile() returns them, one entry per task in list order.
  struct TaskTiming {
    uint64_t wait_begin = 0, op_begin = 0, op_end = 0;  // 0: the task did not run
    uint64_t body_begin = 0, body_end = 0;  // 0: the op marks no body (amk_program_t.profile)
  };
  void set_profiling(bool on);
  std::vector<TaskTiming> last_profile() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The ReferenceDecoder's twin on the GPU: binds a checkpoint's weights (converted to the
// program's WEIGHT dtype: BF16 or F32) and runs one launch per step, or one launch for a whole
// greedy generation.
class CudaDecoder final : public Decoder {
 public:
  CudaDecoder(const Checkpoint& checkpoint, Program program, const CudaVmOptions& options = {});
  int64_t position() const override { return position_; }
  int64_t max_context() const override { return max_context_; }
  int64_t vocab_size() const override { return vocab_; }
  std::vector<float> step(int64_t token) override;
  int64_t last_next_token() const override;
  void reset() override;
  void seek(int64_t position, uint64_t seed) override;
  // Sampling runs in the program's last level: set_sampling() writes the settings to the device
  // (when they change), step_sample() and feed() read back the token only, never the logits.
  void set_sampling(const SamplingParams& params, uint64_t draw_offset) override;
  int64_t step_sample(int64_t token) override;
  void feed(int64_t token) override { step_sample(token); }
  // Feeds the prompt one launch per token, then generates `n` tokens in launches of up to
  // `tokens_per_launch` steps with no host round trip inside a launch.
  std::vector<int64_t> generate(std::span<const int64_t> prompt, int64_t n) override;
  // Runs `n` greedy steps from the current position in one launch; returns the tokens.
  std::vector<int32_t> generate_on_device(int64_t first_token, int n);

  CudaVM& vm() { return *vm_; }
  int tokens_per_launch = 64;

 private:
  void launch_step(int64_t token);
  // Writes the settings buffers that differ from `uploaded_` (both when `all`).
  void upload_sampling(const PackedSampling& packed, bool all);

  std::unique_ptr<CudaVM> vm_;
  int64_t token_id_ = -1, pos_id_ = -1, logits_id_ = -1, next_id_ = -1;
  SamplingBuffers sampling_buffers_;
  PackedSampling uploaded_;  // what the device's sampling buffers hold
  int64_t position_ = 0, max_context_ = 0, vocab_ = 0;
  int64_t last_token_ = -1;
};

}  // namespace amk
