// The fused GEMV tiles (RMSNORM_GEMV_TILE, SILU_MUL_GEMV_TILE, GEMV_ADD_TILE) against a naive
// formulation written here: whole-row double loops that normalise / activate / add inline, with
// no intermediate tensor, for F32 and BF16 storage.
//
// Tolerance. The op rounds its intermediate to F32 (the unfused lowering's activation dtype)
// and its output once; the naive formulation rounds nothing. So an element may differ by the
// output's rounding (1 ulp, 2 to cover a boundary the intermediate's rounding crosses) plus the
// intermediate's rounding carried through the dot product: 2^-24 relative per term, bounded by
// 1e-6 of the sum of |terms|.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "amk/ir.h"
#include "amk/reference_ops.h"
#include "amk/tensor.h"

namespace {

using amk::DType;
using amk::Op;
using amk::Params;
using amk::Tensor;

constexpr int64_t kRows = 2, kK = 16, kN = 12;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor rnd(DType dt, std::vector<int64_t> shape, std::mt19937& rng) {
  Tensor t = Tensor::zeros(dt, std::move(shape));
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, float(u(rng)));
  return t;
}

double at(const Tensor& t, int64_t i) { return t.get(i); }

double ulp(DType dt, double x) {
  const int mbits = dt == DType::BF16 ? 7 : 23;
  const int e = x == 0 ? -126 : std::max(std::ilogb(x), -126);
  return std::ldexp(1.0, e - mbits);
}

// want[r][n] with the sum of |terms| for the tolerance.
struct Naive {
  std::vector<double> value, magnitude;
};

// out[r, n] = sum_k a(r, k) * W[n, k] + bias[n] + residual[r, n] (each optional).
template <typename A>
Naive naive_gemv(A a, const Tensor& W, const Tensor* bias, const Tensor* residual) {
  Naive n{std::vector<double>(kRows * kN), std::vector<double>(kRows * kN)};
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t j = 0; j < kN; ++j) {
      double acc = 0, mag = 0;
      for (int64_t k = 0; k < kK; ++k) {
        const double term = a(r, k) * at(W, j * kK + k);
        acc += term;
        mag += std::fabs(term);
      }
      if (bias) acc += at(*bias, j);
      if (residual) acc += at(*residual, r * kN + j);
      n.value[size_t(r * kN + j)] = acc;
      n.magnitude[size_t(r * kN + j)] = mag;
    }
  return n;
}

// Runs every tile of width 5 (the last one narrower), checking that the first tile alone leaves
// the other columns untouched, then compares the whole output.
void run_tiles_and_compare(Op op, const Params& base, std::vector<const Tensor*> in, DType dt,
                           const Naive& want) {
  Tensor out = Tensor::zeros(dt, {kRows, kN});
  out.fill(kNaN);
  for (int64_t off = 0; off < kN; off += 5) {
    Params p = base;
    p.set_int("K", kK);
    p.set_int("N_tile", std::min<int64_t>(5, kN - off));
    p.set_int("n_off", off);
    std::vector<Tensor*> outs{&out};
    amk::run_reference_op(op, p, in, outs);
    if (off == 0)
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t j = 5; j < kN; ++j) EXPECT_TRUE(std::isnan(out.get(r * kN + j))) << j;
  }
  for (size_t i = 0; i < want.value.size(); ++i) {
    const double tol = 2 * ulp(dt, want.value[i]) + 1e-6 * want.magnitude[i] + 1e-12;
    EXPECT_NEAR(out.get(int64_t(i)), want.value[i], tol) << name_of(dt) << " element " << i;
  }
}

TEST(OpRmsnormGemvTile, NormalisesEachRowThenProjects) {
  std::mt19937 rng(20);
  const double eps = 1e-5;
  for (DType dt : {DType::F32, DType::BF16})
    for (bool with_bias : {false, true}) {
      const Tensor x = rnd(dt, {kRows, kK}, rng), nw = rnd(dt, {kK}, rng);
      const Tensor W = rnd(dt, {kN, kK}, rng), b = rnd(dt, {kN}, rng);
      std::vector<double> inv_rms(kRows);
      for (int64_t r = 0; r < kRows; ++r) {
        double ss = 0;
        for (int64_t k = 0; k < kK; ++k) ss += at(x, r * kK + k) * at(x, r * kK + k);
        inv_rms[size_t(r)] = 1.0 / std::sqrt(ss / kK + eps);
      }
      const Naive want = naive_gemv(
          [&](int64_t r, int64_t k) { return at(x, r * kK + k) * inv_rms[size_t(r)] * at(nw, k); },
          W, with_bias ? &b : nullptr, nullptr);
      Params p;
      p.set_real("eps", eps);
      p.set_int("hidden", kK);
      std::vector<const Tensor*> in{&x, &nw, &W};
      if (with_bias) in.push_back(&b);
      run_tiles_and_compare(Op::RMSNORM_GEMV_TILE, p, in, dt, want);
    }
}

// The naive SILU_MUL prologue: element (r, k) of silu(gate) * up, in double.
auto silu_times(const Tensor& gate, const Tensor& up) {
  return [&gate, &up](int64_t r, int64_t k) {
    const double g = at(gate, r * kK + k);
    return g * (1.0 / (1.0 + std::exp(-g))) * at(up, r * kK + k);
  };
}

TEST(OpSiluMulGemvTile, ActivatesThenProjects) {
  std::mt19937 rng(21);
  for (DType dt : {DType::F32, DType::BF16})
    for (bool with_bias : {false, true}) {
      const Tensor gate = rnd(dt, {kRows, kK}, rng), up = rnd(dt, {kRows, kK}, rng);
      const Tensor W = rnd(dt, {kN, kK}, rng), b = rnd(dt, {kN}, rng);
      const Naive want = naive_gemv(
          silu_times(gate, up),
          W, with_bias ? &b : nullptr, nullptr);
      std::vector<const Tensor*> in{&gate, &up, &W};
      if (with_bias) in.push_back(&b);
      run_tiles_and_compare(Op::SILU_MUL_GEMV_TILE, {}, in, dt, want);
    }
}

TEST(OpGemvAddTile, ProjectsThenAddsTheResidualTile) {
  std::mt19937 rng(22);
  for (DType dt : {DType::F32, DType::BF16})
    for (bool with_bias : {false, true}) {
      const Tensor x = rnd(dt, {kRows, kK}, rng), W = rnd(dt, {kN, kK}, rng);
      const Tensor res = rnd(dt, {kRows, kN}, rng), b = rnd(dt, {kN}, rng);
      const Naive want = naive_gemv([&](int64_t r, int64_t k) { return at(x, r * kK + k); }, W,
                                    with_bias ? &b : nullptr, &res);
      std::vector<const Tensor*> in{&x, &W, &res};
      if (with_bias) in.push_back(&b);
      run_tiles_and_compare(Op::GEMV_ADD_TILE, {}, in, dt, want);
    }
}

TEST(OpSiluMulGemvAddTile, ActivatesProjectsThenAddsTheResidualTile) {
  std::mt19937 rng(23);
  for (DType dt : {DType::F32, DType::BF16})
    for (bool with_bias : {false, true}) {
      const Tensor gate = rnd(dt, {kRows, kK}, rng), up = rnd(dt, {kRows, kK}, rng);
      const Tensor W = rnd(dt, {kN, kK}, rng), b = rnd(dt, {kN}, rng);
      const Tensor res = rnd(dt, {kRows, kN}, rng);
      const Naive want = naive_gemv(
          silu_times(gate, up),
          W, with_bias ? &b : nullptr, &res);
      std::vector<const Tensor*> in{&gate, &up, &W, &res};
      if (with_bias) in.push_back(&b);
      run_tiles_and_compare(Op::SILU_MUL_GEMV_ADD_TILE, {}, in, dt, want);
    }
}

TEST(FusedGemvTiles, ErrorsNameTheFusedOp) {
  const Tensor x = Tensor::zeros(DType::F32, {1, kK}), nw = Tensor::zeros(DType::F32, {kK});
  const Tensor W = Tensor::zeros(DType::F32, {kN, kK});
  Tensor out = Tensor::zeros(DType::F32, {1, kN});
  std::vector<Tensor*> outs{&out};
  Params p;
  p.set_real("eps", 1e-5);
  p.set_int("hidden", kK);
  p.set_int("K", kK + 1);
  p.set_int("N_tile", 4);
  p.set_int("n_off", 0);
  try {
    const std::vector<const Tensor*> in{&x, &nw, &W};
    amk::run_reference_op(Op::RMSNORM_GEMV_TILE, p, in, outs);
    ADD_FAILURE() << "no OpError";
  } catch (const amk::OpError& e) {
    EXPECT_NE(std::string(e.what()).find("RMSNORM_GEMV_TILE: param hidden 16 must equal param K"),
              std::string::npos)
        << e.what();
  }
  const Tensor short_res = Tensor::zeros(DType::F32, {3});
  p.set_int("K", kK);
  try {
    const std::vector<const Tensor*> in{&x, &W, &short_res};
    amk::run_reference_op(Op::GEMV_ADD_TILE, p, in, outs);
    ADD_FAILURE() << "no OpError";
  } catch (const amk::OpError& e) {
    EXPECT_NE(std::string(e.what()).find("GEMV_ADD_TILE: input 2 (residual)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
