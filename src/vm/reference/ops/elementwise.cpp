// COPY, ADD, MUL, SILU_MUL, GELU, ALLREDUCE_SHARD: flat elementwise maps.
//
// Operands are pages: only their element counts must agree, their shapes may differ (a reshape
// is free). COPY, ADD, MUL and ALLREDUCE_SHARD accept any dtype (an integer result truncates
// toward zero and must fit); SILU_MUL and GELU are activations and take float tensors only.
#include <cmath>
#include <string>
#include <vector>

#include "vm/reference/ops/numeric.h"
#include "vm/reference/ops/ops.h"

namespace amk::ref {

namespace {

std::string in_name(size_t i, const char* role) {
  return "input " + std::to_string(i) + " (" + role + ")";
}

// Every input and the output must hold the same number of elements as input 0.
void require_same_numel(const OpContext& c) {
  const int64_t n = c.input(0).numel();
  for (size_t i = 1; i < c.num_inputs(); ++i)
    require_numel(c, c.input(i), "input " + std::to_string(i), n, "the size of input 0");
  require_numel(c, c.output(0), "output 0", n, "the size of input 0");
}

}  // namespace

void op_copy(const OpContext& c) {
  c.check_registry();
  require_same_numel(c);
  const std::vector<double> v = load_all(c.input(0));
  store_all(c.output(0), v);
}

void op_add(const OpContext& c) {
  c.check_registry();
  require_same_numel(c);
  std::vector<double> v = load_all(c.input(0));
  const std::vector<double> b = load_all(c.input(1));
  for (size_t i = 0; i < v.size(); ++i) v[i] += b[i];
  store_all(c.output(0), v);
}

void op_mul(const OpContext& c) {
  c.check_registry();
  require_same_numel(c);
  std::vector<double> v = load_all(c.input(0));
  if (c.num_inputs() == 2) {
    const std::vector<double> b = load_all(c.input(1));
    for (size_t i = 0; i < v.size(); ++i) v[i] *= b[i];
  } else {
    const double scale = c.real_param_or("scale", 1.0);
    for (double& x : v) x *= scale;
  }
  store_all(c.output(0), v);
}

void op_silu_mul(const OpContext& c) {
  c.check_registry();
  require_float(c, c.input(0), in_name(0, "gate"));
  require_float(c, c.input(1), in_name(1, "up"));
  require_float(c, c.output(0), "output 0");
  require_same_numel(c);
  std::vector<double> g = load_all(c.input(0));
  const std::vector<double> up = load_all(c.input(1));
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * up[i];
  store_all(c.output(0), g);
}

void op_gelu(const OpContext& c) {
  c.check_registry();
  require_float(c, c.input(0), in_name(0, "x"));
  require_float(c, c.output(0), "output 0");
  require_same_numel(c);
  std::vector<double> v = load_all(c.input(0));
  for (double& x : v) x = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));  // exact, not tanh
  store_all(c.output(0), v);
}

// With a range (n_off, N_tile; IR 0.12.0) only elements [n_off, n_off + N_tile) are summed and
// written, the rest of the output untouched: several tasks then reduce disjoint slices of one
// vector, as GEMV tiles fill disjoint columns (a tensor-parallel step's partial sums).
void op_allreduce_shard(const OpContext& c) {
  c.check_registry();
  require_same_numel(c);
  const int64_t n = c.input(0).numel();
  if (!c.has_param("n_off") && !c.has_param("N_tile")) {
    std::vector<double> acc = load_all(c.input(0));
    for (size_t i = 1; i < c.num_inputs(); ++i) {
      const std::vector<double> s = load_all(c.input(i));
      for (size_t j = 0; j < acc.size(); ++j) acc[j] += s[j];
    }
    store_all(c.output(0), acc);
    return;
  }
  const int64_t off = c.int_param("n_off"), len = c.int_param("N_tile");
  if (off < 0 || len < 1 || off > n - len)
    c.fail("range n_off " + std::to_string(off) + ", N_tile " + std::to_string(len) +
           " must lie in the shards' " + std::to_string(n) + " elements");
  for (int64_t j = off; j < off + len; ++j) {
    double acc = load(c.input(0), j);
    for (size_t i = 1; i < c.num_inputs(); ++i) acc += load(c.input(i), j);
    store(c.output(0), j, acc);
  }
}

}  // namespace amk::ref
