// ReferenceVM: the CPU correctness oracle. It refuses every program validate() rejects and runs
// the rest by counter-driven firing (IR_SPEC §2) with the reference op semantics. Kept simple and
// obviously right: every logical buffer has its own storage, the KV cache persists across runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "amk/ir.h"
#include "amk/tensor.h"
#include "amk/validate.h"

namespace amk {

struct VmOptions {
  enum class Order { ListOrder, Random };
  Order order = Order::ListOrder;  // Random fires a random ready task each step (race shaking)
  uint64_t seed = 0;
  double timeout_s = 60.0;         // wall-clock watchdog
};

struct VmRunResult {
  enum class Status { Ok, Rejected, Deadlock, Timeout, OpError, MissingData };
  Status status = Status::Ok;
  std::string message;
  std::vector<int64_t> fired;  // task ids in firing order
  bool ok() const { return status == Status::Ok; }
};

std::string_view name_of(VmRunResult::Status status);

class ReferenceVM {
 public:
  // Validates the program; a rejected program is kept only to report why (run() refuses it).
  explicit ReferenceVM(Program program);

  const ValidationResult& validation() const { return validation_; }
  bool accepted() const { return validation_.ok; }
  const Program& program() const { return program_; }

  // Binds data to a buffer (weights, constants, inputs, or initial KV state). Throws
  // std::invalid_argument when the id, dtype or shape does not match the buffer.
  void set_buffer(int64_t id, Tensor value);
  const Tensor& buffer(int64_t id) const;

  // One forward pass. Transient buffers (ACTIVATION, IO_OUTPUT) are reset to NaN first so a read
  // before its write shows; KV_CACHE buffers keep their contents across runs.
  VmRunResult run(const VmOptions& options = {});

 private:
  Program program_;
  ValidationResult validation_;
  std::vector<Tensor> storage_;
  std::vector<bool> bound_;
};

}  // namespace amk
