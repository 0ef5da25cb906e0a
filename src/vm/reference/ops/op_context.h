// What every reference op needs: its operands, its params, and errors that name the op, the
// operand and the problem. Internal to amk_core.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "amk/ir.h"
#include "amk/reference_ops.h"
#include "amk/tensor.h"

namespace amk::ref {

class OpContext {
 public:
  OpContext(Op op, const Params& params, std::span<const Tensor* const> inputs,
            std::span<Tensor* const> outputs, const StepState* step = nullptr)
      : op_(op), params_(params), inputs_(inputs), outputs_(outputs), step_(step) {}

  Op op() const { return op_; }
  // For a fused op that runs its constituent ops' semantics under their own contexts.
  const Params& params() const { return params_; }
  const StepState* step() const { return step_; }
  // Throws OpError("<OP>: <msg>").
  [[noreturn]] void fail(const std::string& msg) const;

  // Checks the operand counts against the registry (max_inputs_override widens the input cap,
  // for the quantized GEMV/GEMM that take a zeros input), that no operand is null, and that every
  // registry-required param is present and numeric.
  void check_registry(int max_inputs_override = -1) const;

  size_t num_inputs() const { return inputs_.size(); }
  const Tensor& input(size_t i) const { return *inputs_[i]; }
  size_t num_outputs() const { return outputs_.size(); }
  Tensor& output(size_t i) const { return *outputs_[i]; }

  bool has_param(std::string_view key) const { return params_.find(key) != nullptr; }
  // Integer params must be integral and fit int32 (their ABI type).
  int64_t int_param(std::string_view key) const;
  int64_t int_param_or(std::string_view key, int64_t fallback) const;
  // Real params are read as the float32 they marshal to, and must be finite.
  double real_param(std::string_view key) const;
  double real_param_or(std::string_view key, double fallback) const;

  // The step's position for an op whose flags ask for it; fails naming `why` when the caller
  // gave none.
  int64_t step_position(std::string_view why) const;

 private:
  Op op_;
  const Params& params_;
  std::span<const Tensor* const> inputs_;
  std::span<Tensor* const> outputs_;
  const StepState* step_;
};

// Operand checks. `what` names the operand, e.g. "input 1 (weight)".
void require_float(const OpContext& c, const Tensor& t, std::string_view what);
void require_rank(const OpContext& c, const Tensor& t, std::string_view what, size_t rank);
void require_shape(const OpContext& c, const Tensor& t, std::string_view what,
                   const std::vector<int64_t>& expected);
void require_numel(const OpContext& c, const Tensor& t, std::string_view what, int64_t expected,
                   std::string_view why);
// The size of the last dimension (rank >= 1 required).
int64_t last_dim(const OpContext& c, const Tensor& t, std::string_view what);

// Reads every element widened to double / rounds each value once into t (see numeric.h).
std::vector<double> load_all(const Tensor& t);
void store_all(Tensor& t, std::span<const double> values);

}  // namespace amk::ref
