#include "vm/reference/ops/op_context.h"

#include <cmath>
#include <limits>

#include "vm/reference/ops/numeric.h"

namespace amk::ref {

void OpContext::fail(const std::string& msg) const {
  throw OpError(std::string(name_of(op_)) + ": " + msg);
}

void OpContext::check_registry(int max_inputs_override) const {
  const OpSpec& spec = op_spec(op_);
  const int max_in = max_inputs_override >= 0 ? max_inputs_override : spec.max_inputs;
  const auto n_in = int64_t(inputs_.size());
  if (n_in < spec.min_inputs || n_in > max_in) {
    const std::string want = spec.min_inputs == max_in
                                 ? std::to_string(max_in)
                                 : std::to_string(spec.min_inputs) + " to " + std::to_string(max_in);
    fail("takes " + want + " inputs, got " + std::to_string(n_in));
  }
  if (int64_t(outputs_.size()) < spec.n_outputs || int64_t(outputs_.size()) > spec.most_outputs())
    fail("takes " + std::to_string(spec.n_outputs) +
         (spec.most_outputs() > spec.n_outputs ? " or " + std::to_string(spec.most_outputs()) : "") +
         " outputs, got " + std::to_string(outputs_.size()));
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (inputs_[i] == nullptr) fail("input " + std::to_string(i) + " is null");
  for (size_t i = 0; i < outputs_.size(); ++i)
    if (outputs_[i] == nullptr) fail("output " + std::to_string(i) + " is null");
  for (std::string_view key : spec.required_params) {
    const ParamValue* v = params_.find(key);
    if (v == nullptr) fail("missing required param '" + std::string(key) + "'");
    if (!v->is_number()) fail("param '" + std::string(key) + "' is not a number: " + v->other_json);
  }
}

int64_t OpContext::int_param(std::string_view key) const {
  const ParamValue* v = params_.find(key);
  if (v == nullptr) fail("missing required param '" + std::string(key) + "'");
  const std::string name = "param '" + std::string(key) + "'";
  if (!v->is_number()) fail(name + " is not a number: " + v->other_json);
  if (v->kind == ParamValue::Kind::Real && (!std::isfinite(v->f) || std::trunc(v->f) != v->f))
    fail(name + " must be an integer, got " + std::to_string(v->f));
  const double d = v->as_double();
  if (d < std::numeric_limits<int32_t>::min() || d > std::numeric_limits<int32_t>::max())
    fail(name + " " + (v->kind == ParamValue::Kind::Int ? std::to_string(v->i) : std::to_string(d)) +
         " does not fit int32, its ABI type");
  return v->kind == ParamValue::Kind::Int ? v->i : int64_t(v->f);
}

int64_t OpContext::int_param_or(std::string_view key, int64_t fallback) const {
  return has_param(key) ? int_param(key) : fallback;
}

double OpContext::real_param(std::string_view key) const {
  const ParamValue* v = params_.find(key);
  if (v == nullptr) fail("missing required param '" + std::string(key) + "'");
  if (!v->is_number()) fail("param '" + std::string(key) + "' is not a number: " + v->other_json);
  const auto f = static_cast<float>(v->as_double());
  if (!std::isfinite(f))
    fail("param '" + std::string(key) + "' " + std::to_string(v->as_double()) +
         " is not a finite float32");
  return f;
}

double OpContext::real_param_or(std::string_view key, double fallback) const {
  return has_param(key) ? real_param(key) : fallback;
}

int64_t OpContext::step_position(std::string_view why) const {
  if (step_ == nullptr || !step_->position)
    fail(std::string(why) + " reads the step's position, but none was given (StepState)");
  if (*step_->position < 0) fail("the step's position must be >= 0, got " + std::to_string(*step_->position));
  return *step_->position;
}

void require_float(const OpContext& c, const Tensor& t, std::string_view what) {
  if (!is_float_dtype(t.dtype))
    c.fail(std::string(what) + " must have a float dtype, got " + std::string(name_of(t.dtype)));
}

void require_rank(const OpContext& c, const Tensor& t, std::string_view what, size_t rank) {
  if (t.shape.size() != rank)
    c.fail(std::string(what) + " must have rank " + std::to_string(rank) + ", got shape " +
           shape_str(t.shape));
}

void require_shape(const OpContext& c, const Tensor& t, std::string_view what,
                   const std::vector<int64_t>& expected) {
  if (t.shape != expected)
    c.fail(std::string(what) + " has shape " + shape_str(t.shape) + ", expected " +
           shape_str(expected));
}

void require_numel(const OpContext& c, const Tensor& t, std::string_view what, int64_t expected,
                   std::string_view why) {
  if (t.numel() != expected)
    c.fail(std::string(what) + " has " + std::to_string(t.numel()) + " elements (shape " +
           shape_str(t.shape) + "), expected " + std::to_string(expected) + " (" +
           std::string(why) + ")");
}

int64_t last_dim(const OpContext& c, const Tensor& t, std::string_view what) {
  if (t.shape.empty()) c.fail(std::string(what) + " must have rank >= 1, got a scalar");
  return t.shape.back();
}

std::vector<double> load_all(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  load_range(t, 0, v);
  return v;
}

void store_all(Tensor& t, std::span<const double> values) {
  for (size_t i = 0; i < values.size(); ++i) store(t, int64_t(i), values[i]);
}

}  // namespace amk::ref
