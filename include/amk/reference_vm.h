// ReferenceVM: the CPU correctness oracle. It refuses every program validate() rejects and runs
// the rest by counter-driven firing (IR_SPEC §2) with the reference op semantics. Kept simple and
// obviously right: every logical buffer has its own storage, the KV cache persists across runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "amk/ir.h"
#include "amk/tensor.h"
#include "amk/validate.h"

namespace amk {

// The oracle holds every buffer in host memory; these caps turn a typo'd shape into a clear
// error instead of an out-of-memory kill.
inline constexpr int64_t kVmMaxBufferBytes = int64_t{8} << 30;   // one buffer
inline constexpr int64_t kVmMaxTotalBytes = int64_t{32} << 30;   // all buffers together

struct VmOptions {
  enum class Order { ListOrder, Random };
  Order order = Order::ListOrder;  // Random fires a random ready task each step (race shaking)
  uint64_t seed = 0;
  double timeout_s = 60.0;         // wall-clock watchdog, checked between tasks
  // The step's position, for tasks whose flags read it (docs/RUNTIME_POSITION.md). A program
  // lowered once serves every step: the host sets this and the position IO_INPUT together.
  std::optional<int64_t> step_position;

  // TEST-ONLY. Runs a program that validate() rejected, so that the VM's own dynamic watchdogs
  // (deadlock, timeout, read-before-write) can be exercised: validate() rejects every program
  // that could reach them. Nothing outside the tests may set this.
  bool testing_skip_validation = false;
};

struct VmRunResult {
  // ResourceLimit: a buffer exceeds kVmMaxBufferBytes / kVmMaxTotalBytes (nothing allocated).
  enum class Status { Ok, Rejected, Deadlock, Timeout, OpError, MissingData, ResourceLimit };
  Status status = Status::Ok;
  std::string message;
  std::vector<int64_t> fired;  // task ids in firing order
  double wall_s = 0.0;
  bool ok() const { return status == Status::Ok; }
};

// "Ok", "Rejected", "Deadlock", "Timeout", "OpError", "MissingData", "ResourceLimit".
std::string_view name_of(VmRunResult::Status status);

class ReferenceVM {
 public:
  // Validates the program; a rejected program is kept only to report why (run() refuses it).
  // Never throws for a bad program: every problem surfaces as run()'s status.
  explicit ReferenceVM(Program program);

  const ValidationResult& validation() const { return validation_; }
  bool accepted() const { return validation_.ok; }
  const Program& program() const { return program_; }

  // Binds data to a buffer (weights, constants, inputs, or initial KV state). Throws
  // std::invalid_argument when the id, dtype or shape does not match the buffer, or when the
  // buffer is transient (ACTIVATION / IO_OUTPUT are reset by every run).
  void set_buffer(int64_t id, Tensor value);
  // Throws std::out_of_range for an unknown id and std::logic_error when the buffer has no
  // storage (its program was rejected or exceeds the size caps).
  const Tensor& buffer(int64_t id) const;
  // The buffer with this name (first match), or nullptr.
  const Buffer* find_buffer(std::string_view name) const;

  // One forward pass. Transient buffers (ACTIVATION, IO_OUTPUT) are reset to NaN (integer dtypes:
  // a sentinel) first so a read before its write shows; KV_CACHE buffers keep their contents
  // across runs (zero until written or bound).
  VmRunResult run(const VmOptions& options = {});

 private:
  bool ensure_storage(std::string* error);

  Program program_;
  ValidationResult validation_;
  std::unordered_map<int64_t, size_t> buffer_index_;  // buffer id -> index in program_.buffers
  std::vector<Tensor> storage_;                        // parallel to program_.buffers
  std::vector<bool> bound_;
  bool storage_ready_ = false;
};

}  // namespace amk
