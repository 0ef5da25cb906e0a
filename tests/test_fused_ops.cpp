// The fused GEMV tiles (RMSNORM_GEMV_TILE, SILU_MUL_GEMV_TILE, GEMV_ADD_TILE,
// SILU_MUL_GEMV_ADD_TILE, GEMV_GLU_TILE, RMSNORM_GEMV_GLU_TILE, COMBINE_GEMV_ADD_TILE,
// RMSNORM_GEMV_GLU_DOWN_TILE) against a naive formulation
// written here: whole-row double loops that normalise / activate / add inline, with no
// intermediate tensor, for F32 and BF16 storage. The GLU tiles are also run against the unfused
// sequence they replace (GEMV_TILE gate, GEMV_TILE up, SILU_MUL), which they must equal bit for
// bit.
//
// Tolerance. The op rounds its intermediate to F32 (the unfused lowering's activation dtype)
// and its output once; the naive formulation rounds nothing. So an element may differ by the
// output's rounding (1 ulp, 2 to cover a boundary the intermediate's rounding crosses) plus the
// intermediate's rounding carried through the dot product: 2^-24 relative per term, bounded by
// 1e-6 of the sum of |terms|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "amk/ir.h"
#include "amk/op_flags.h"
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

// x[r, k] * rsqrt(mean_k x[r, k]^2 + eps) * nw[k] in double: the RMSNORM prologue, naively, for
// the kRows x kK activations of these tests.
auto naive_rmsnorm(const Tensor& x, const Tensor& nw, double eps) {
  std::vector<double> inv_rms(kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    double ss = 0;
    for (int64_t k = 0; k < kK; ++k) ss += at(x, r * kK + k) * at(x, r * kK + k);
    inv_rms[size_t(r)] = 1.0 / std::sqrt(ss / kK + eps);
  }
  return [&x, &nw, inv_rms](int64_t r, int64_t k) {
    return at(x, r * kK + k) * inv_rms[size_t(r)] * at(nw, k);
  };
}

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
      const Naive want =
          naive_gemv(naive_rmsnorm(x, nw, eps), W, with_bias ? &b : nullptr, nullptr);
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

void run(Op op, const Params& p, std::vector<const Tensor*> in, Tensor& out) {
  std::vector<Tensor*> outs{&out};
  amk::run_reference_op(op, p, in, outs);
}

// An OpError naming the op and containing `what`.
void expect_error(Op op, const Params& p, const std::vector<const Tensor*>& in,
                  std::vector<Tensor*> outs, const std::string& what) {
  try {
    amk::run_reference_op(op, p, in, outs);
    ADD_FAILURE() << "no OpError, expected one containing: " << what;
  } catch (const amk::OpError& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}
void expect_error(Op op, const Params& p, std::vector<const Tensor*> in, Tensor& out,
                  const std::string& what) {
  expect_error(op, p, in, std::vector<Tensor*>{&out}, what);
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
  expect_error(Op::RMSNORM_GEMV_TILE, p, {&x, &nw, &W}, outs,
               "RMSNORM_GEMV_TILE: param hidden 16 must equal param K");
  const Tensor short_res = Tensor::zeros(DType::F32, {3});
  p.set_int("K", kK);
  expect_error(Op::GEMV_ADD_TILE, p, {&x, &W, &short_res}, outs,
               "GEMV_ADD_TILE: input 2 (residual)");
}

// ---- the gated-unit tiles ----------------------------------------------------------------------

// The naive gated unit: for every row r and feature j, g = sum_k a(r, k) W_gate[j, k]
// (+ b_gate[j]), u likewise with W_up (+ b_up), want = silu(g) * u, all in double. `magnitude`
// is chosen so that run_tiles_and_compare's 1e-6 * magnitude bounds what the op's F32
// intermediates carry into the result: g and u each within e = 1e-6 (sum |terms| + |bias|) (the
// rounding of g and u to F32 and, for RMSNORM_, of the normalised x), and
// |d(silu(g) u)| <= 1.1 e_g (|u| + e_u) + |silu(g)| e_u (silu' stays below 1.1).
template <typename A>
Naive naive_glu(A a, const Tensor& Wg, const Tensor& Wu, const Tensor* bg, const Tensor* bu) {
  Naive n{std::vector<double>(kRows * kN), std::vector<double>(kRows * kN)};
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t j = 0; j < kN; ++j) {
      double g = 0, u = 0, mg = 0, mu = 0;
      for (int64_t k = 0; k < kK; ++k) {
        const double tg = a(r, k) * at(Wg, j * kK + k), tu = a(r, k) * at(Wu, j * kK + k);
        g += tg;
        u += tu;
        mg += std::fabs(tg);
        mu += std::fabs(tu);
      }
      if (bg) {
        g += at(*bg, j);
        mg += std::fabs(at(*bg, j));
      }
      if (bu) {
        u += at(*bu, j);
        mu += std::fabs(at(*bu, j));
      }
      const double silu = g / (1.0 + std::exp(-g));
      n.value[size_t(r * kN + j)] = silu * u;
      n.magnitude[size_t(r * kN + j)] =
          1.1 * mg * (std::fabs(u) + 1e-6 * mu) + std::fabs(silu) * mu;
    }
  return n;
}

TEST(OpGemvGluTile, ProjectsGateAndUpThenGates) {
  std::mt19937 rng(24);
  for (DType dt : {DType::F32, DType::BF16})
    for (bool with_bias : {false, true}) {
      const Tensor x = rnd(dt, {kRows, kK}, rng), Wg = rnd(dt, {kN, kK}, rng);
      const Tensor Wu = rnd(dt, {kN, kK}, rng), bg = rnd(dt, {kN}, rng), bu = rnd(dt, {kN}, rng);
      const Naive want = naive_glu([&](int64_t r, int64_t k) { return at(x, r * kK + k); }, Wg, Wu,
                                   with_bias ? &bg : nullptr, with_bias ? &bu : nullptr);
      std::vector<const Tensor*> in{&x, &Wg, &Wu};
      if (with_bias) in.insert(in.end(), {&bg, &bu});
      run_tiles_and_compare(Op::GEMV_GLU_TILE, {}, in, dt, want);
    }
}

TEST(OpRmsnormGemvGluTile, NormalisesEachRowThenProjectsAndGates) {
  std::mt19937 rng(25);
  const double eps = 1e-5;
  for (DType dt : {DType::F32, DType::BF16})
    for (bool with_bias : {false, true}) {
      const Tensor x = rnd(dt, {kRows, kK}, rng), nw = rnd(dt, {kK}, rng);
      const Tensor Wg = rnd(dt, {kN, kK}, rng), Wu = rnd(dt, {kN, kK}, rng);
      const Tensor bg = rnd(dt, {kN}, rng), bu = rnd(dt, {kN}, rng);
      const Naive want = naive_glu(naive_rmsnorm(x, nw, eps), Wg, Wu, with_bias ? &bg : nullptr,
                                   with_bias ? &bu : nullptr);
      Params p;
      p.set_real("eps", eps);
      p.set_int("hidden", kK);
      std::vector<const Tensor*> in{&x, &nw, &Wg, &Wu};
      if (with_bias) in.insert(in.end(), {&bg, &bu});
      run_tiles_and_compare(Op::RMSNORM_GEMV_GLU_TILE, p, in, dt, want);
    }
}

// The bits of every element (a float holds every F32 and BF16 value exactly).
std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<uint32_t> b(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = t.get(i);
    std::memcpy(&b[size_t(i)], &v, sizeof v);
  }
  return b;
}

Params tile_params(Params p, int64_t n_tile, int64_t n_off) {
  p.set_int("K", kK);
  p.set_int("N_tile", n_tile);
  p.set_int("n_off", n_off);
  return p;
}

// What the unfused lowering computes, step by step, as tasks on F32 activation buffers: (RMSNORM
// into xn,) GEMV_TILE gate and GEMV_TILE up as one whole-width tile each, SILU_MUL over the
// buffers. The fused tiles (width 5, so 5 + 5 + 2, a different tiling) must reproduce it bit for
// bit: F32 and BF16 outputs, with and without biases, and quantized I8 weights (params qdtype 6,
// whose scales take the biases' slots as they take GEMV_TILE's input 2).
TEST(GluTiles, EqualTheUnfusedGemvsAndSiluMulBitForBit) {
  std::mt19937 rng(26);
  for (bool norm : {false, true})
    for (DType dt : {DType::F32, DType::BF16})
      for (int mode : {0, 1, 2}) {  // no bias, biases, quantized weights with scales
        SCOPED_TRACE(std::string(norm ? "RMSNORM_GEMV_GLU_TILE " : "GEMV_GLU_TILE ") +
                     std::string(name_of(dt)) + " mode " + std::to_string(mode));
        const Tensor x = rnd(dt, {kRows, kK}, rng), nw = rnd(dt, {kK}, rng);
        Tensor Wg = rnd(dt, {kN, kK}, rng), Wu = rnd(dt, {kN, kK}, rng);
        Tensor bg = rnd(dt, {kN}, rng), bu = rnd(dt, {kN}, rng);
        Params base;
        if (norm) {
          base.set_real("eps", 1e-5);
          base.set_int("hidden", kK);
        }
        if (mode == 2) {  // I8 levels, two groups of 8 per row, positive scales
          Wg = Tensor::zeros(DType::I8, {kN, kK});
          Wu = Tensor::zeros(DType::I8, {kN, kK});
          std::uniform_int_distribution<int> level(-127, 127);
          for (int64_t i = 0; i < kN * kK; ++i) {
            Wg.set_int(i, level(rng));
            Wu.set_int(i, level(rng));
          }
          bg = Tensor::zeros(DType::F32, {kN, 2});
          bu = Tensor::zeros(DType::F32, {kN, 2});
          std::uniform_real_distribution<double> scale(0.001, 0.02);
          for (int64_t i = 0; i < 2 * kN; ++i) {
            bg.set(i, float(scale(rng)));
            bu.set(i, float(scale(rng)));
          }
          base.set_int("qdtype", int64_t(DType::I8));
          base.set_int("group", 8);
        }
        const bool extra = mode != 0;

        Tensor xn = Tensor::zeros(DType::F32, {kRows, kK});
        if (norm) run(Op::RMSNORM, base, {&x, &nw}, xn);
        const Tensor& a = norm ? xn : x;
        Tensor gate = Tensor::zeros(DType::F32, {kRows, kN}), up = gate;
        std::vector<const Tensor*> gate_in{&a, &Wg}, up_in{&a, &Wu};
        if (extra) {
          gate_in.push_back(&bg);
          up_in.push_back(&bu);
        }
        run(Op::GEMV_TILE, tile_params(base, kN, 0), gate_in, gate);
        run(Op::GEMV_TILE, tile_params(base, kN, 0), up_in, up);
        Tensor unfused = Tensor::zeros(dt, {kRows, kN});
        run(Op::SILU_MUL, {}, {&gate, &up}, unfused);

        Tensor fused = Tensor::zeros(dt, {kRows, kN});
        fused.fill(kNaN);
        std::vector<const Tensor*> in{&x};
        if (norm) in.push_back(&nw);
        in.insert(in.end(), {&Wg, &Wu});
        if (extra) in.insert(in.end(), {&bg, &bu});
        for (int64_t off = 0; off < kN; off += 5)
          run(norm ? Op::RMSNORM_GEMV_GLU_TILE : Op::GEMV_GLU_TILE,
              tile_params(base, std::min<int64_t>(5, kN - off), off), in, fused);
        EXPECT_EQ(bits(fused), bits(unfused));
        // Not vacuous: the unit's output is neither zero nor NaN anywhere.
        for (int64_t i = 0; i < fused.numel(); ++i) {
          EXPECT_FALSE(std::isnan(fused.get(i))) << i;
          EXPECT_NE(fused.get(i), 0.0f) << i;
        }
      }
}

TEST(GluTiles, BadOperandsAreNamedErrors) {
  const Tensor x = Tensor::zeros(DType::F32, {1, kK}), nw = Tensor::zeros(DType::F32, {kK});
  const Tensor W = Tensor::zeros(DType::F32, {kN, kK}), b = Tensor::zeros(DType::F32, {kN});
  const Tensor tall = Tensor::zeros(DType::F32, {kN + 4, kK});
  const Tensor bf16 = Tensor::zeros(DType::BF16, {kN, kK});
  Tensor out = Tensor::zeros(DType::F32, {1, kN});
  const Params p = tile_params({}, 4, 0);
  Params norm = p;
  norm.set_real("eps", 1e-5);
  norm.set_int("hidden", kK);

  // The up weight is the gate weight's twin: a taller one (which passes the GEMV's own row
  // check) and another dtype are refused, for both ops (the up weight at input 2, then 3).
  expect_error(Op::GEMV_GLU_TILE, p, {&x, &W, &tall}, out,
               "GEMV_GLU_TILE: input 2 (up weight) F32 [16,16] differs from input 1 (gate "
               "weight) F32 [12,16]: both must have the same shape and dtype");
  expect_error(Op::GEMV_GLU_TILE, p, {&x, &W, &bf16}, out, "input 2 (up weight) BF16");
  expect_error(Op::RMSNORM_GEMV_GLU_TILE, norm, {&x, &nw, &W, &tall}, out,
               "RMSNORM_GEMV_GLU_TILE: input 3 (up weight) F32 [16,16] differs from input 2");
  // Biases come in pairs: 4 inputs (5 with the norm) is one bias alone.
  expect_error(Op::GEMV_GLU_TILE, p, {&x, &W, &W, &b}, out,
               "GEMV_GLU_TILE: takes the gate and up weights (inputs 1, 2) and optionally both "
               "biases (inputs 3, 4): biases come in pairs, got 4 inputs");
  expect_error(Op::RMSNORM_GEMV_GLU_TILE, norm, {&x, &nw, &W, &W, &b}, out,
               "RMSNORM_GEMV_GLU_TILE: takes the gate and up weights (inputs 2, 3)");
  // The registry's bounds still hold.
  expect_error(Op::GEMV_GLU_TILE, p, {&x, &W}, out, "GEMV_GLU_TILE: takes 3 to 5 inputs, got 2");
  // The norm's width is K.
  Params wide = norm;
  wide.set_int("K", kK + 1);
  expect_error(Op::RMSNORM_GEMV_GLU_TILE, wide, {&x, &nw, &W, &W}, out,
               "RMSNORM_GEMV_GLU_TILE: param hidden 16 must equal param K 17");
  // A constituent's error names both ops; a bias of the wrong length is the up GEMV's.
  expect_error(Op::GEMV_GLU_TILE, tile_params({}, 4, 10), {&x, &W, &W}, out,
               "GEMV_GLU_TILE: GEMV_TILE: n_off 10 + N_tile 4 exceeds weight rows 12");
  const Tensor short_b = Tensor::zeros(DType::F32, {kN - 1});
  expect_error(Op::GEMV_GLU_TILE, p, {&x, &W, &W, &b, &short_b}, out,
               "GEMV_GLU_TILE: GEMV_TILE: input 2 (bias)");
  // Nothing was written by the failed calls.
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(out.get(i), 0.0f);
}

}  // namespace

// ---- COMBINE_GEMV_ADD_TILE: the split-KV merge of a stack of partials, then GEMV_ADD_TILE ----

namespace combine {

constexpr int64_t kHeads = 2, kHeadDim = kK / kHeads, kWidth = kHeadDim + 2, kSlabs = 3;

// A stack [kSlabs * kHeads, kHeadDim + 2] of flash partials [acc | m | l]: slab 1 is empty (m =
// -inf, l = 0, as a block past the position is written), the others saw keys.
Tensor partial_stack(std::mt19937& rng) {
  Tensor s = rnd(DType::F32, {kSlabs * kHeads, kWidth}, rng);
  std::uniform_real_distribution<double> m(-2, 2), l(0.5, 3);
  for (int64_t row = 0; row < kSlabs * kHeads; ++row) {
    const bool empty = row / kHeads == 1;
    s.set(row * kWidth + kHeadDim, empty ? -std::numeric_limits<float>::infinity() : float(m(rng)));
    s.set(row * kWidth + kHeadDim + 1, empty ? 0.0f : float(l(rng)));
    if (empty)
      for (int64_t d = 0; d < kHeadDim; ++d) s.set(row * kWidth + d, 0.0f);
  }
  return s;
}

// x[h * head_dim + d] = sum_s e^(m_s - M) acc_s[d] / sum_s e^(m_s - M) l_s over the first
// `slabs` slabs that saw keys (M their largest m), written out by hand in double.
std::vector<double> naive_merge(const Tensor& s, int64_t slabs) {
  std::vector<double> x(kK, 0.0);
  for (int64_t h = 0; h < kHeads; ++h) {
    double M = -std::numeric_limits<double>::infinity();
    for (int64_t b = 0; b < slabs; ++b)
      if (at(s, (b * kHeads + h) * kWidth + kHeadDim + 1) > 0)
        M = std::max(M, at(s, (b * kHeads + h) * kWidth + kHeadDim));
    double L = 0;
    for (int64_t b = 0; b < slabs; ++b) {
      const int64_t row = (b * kHeads + h) * kWidth;
      if (!(at(s, row + kHeadDim + 1) > 0)) continue;
      const double w = std::exp(at(s, row + kHeadDim) - M);
      L += w * at(s, row + kHeadDim + 1);
      for (int64_t d = 0; d < kHeadDim; ++d) x[size_t(h * kHeadDim + d)] += w * at(s, row + d);
    }
    for (int64_t d = 0; d < kHeadDim; ++d) x[size_t(h * kHeadDim + d)] /= L;
  }
  return x;
}

Params merge_params() {
  Params p;
  p.set_int("head_dim", kHeadDim);
  p.set_int("n_heads", kHeads);
  return p;
}

}  // namespace combine

TEST(OpCombineGemvAddTile, MergesThePartialsThenProjectsAndAdds) {
  using namespace combine;
  std::mt19937 rng(27);
  for (DType dt : {DType::F32, DType::BF16})
    for (bool with_bias : {false, true})
      for (bool window : {false, true}) {
        SCOPED_TRACE(std::string(name_of(dt)) + (with_bias ? " bias" : "") +
                     (window ? " runtime window" : ""));
        const Tensor stack = partial_stack(rng);
        const Tensor W = rnd(dt, {kN, kK}, rng), b = rnd(dt, {kN}, rng);
        const Tensor res = rnd(DType::F32, {1, kN}, rng);
        Params p = merge_params();
        // The runtime window: blocks of 4 keys at position 5 reach slabs 0 and 1, so slab 2
        // (which saw keys: it would change x) must not be read.
        if (window) {
          p.set_int("flags", amk::attention_flags::kRuntimeWindow);
          p.set_int("kv_len", 4);
        }
        const std::vector<double> x = naive_merge(stack, window ? 2 : kSlabs);
        Tensor out = Tensor::zeros(DType::F32, {1, kN});
        out.fill(kNaN);
        for (int64_t off = 0; off < kN; off += 5) {
          std::vector<const Tensor*> in{&stack, &W, &res};
          if (with_bias) in.push_back(&b);
          std::vector<Tensor*> outs{&out};
          amk::run_reference_op(Op::COMBINE_GEMV_ADD_TILE,
                                tile_params(p, std::min<int64_t>(5, kN - off), off), in, outs,
                                amk::StepState{5});
        }
        for (int64_t j = 0; j < kN; ++j) {
          double want = at(res, j) + (with_bias ? at(b, j) : 0.0), mag = 0;
          for (int64_t k = 0; k < kK; ++k) {
            want += x[size_t(k)] * at(W, j * kK + k);
            mag += std::fabs(x[size_t(k)] * at(W, j * kK + k));
          }
          EXPECT_NEAR(out.get(j), want, 2 * ulp(DType::F32, want) + 1e-6 * mag + 1e-12) << j;
        }
        if (!window) {  // slab 2 matters: dropping it moves the result (the window test can fail)
          const std::vector<double> fewer = naive_merge(stack, 2);
          double moved = 0;
          for (int64_t k = 0; k < kK; ++k) moved = std::max(moved, std::fabs(fewer[size_t(k)] - x[size_t(k)]));
          EXPECT_GT(moved, 1e-3);
        }
      }
}

// A merge over heads [m_off, m_off + K / head_dim) (IR 0.12.0: a tensor-parallel cluster's
// heads) is the full merge's columns of those heads: against W's columns of head 1 it gives
// what the full merge gives against W with head 0's columns zeroed.
TEST(OpCombineGemvAddTile, AMergeOfSomeHeadsIsThoseHeadsColumns) {
  using namespace combine;
  std::mt19937 rng(29);
  const Tensor stack = partial_stack(rng);
  const Tensor W = rnd(DType::F32, {kN, kK}, rng), res = rnd(DType::F32, {1, kN}, rng);
  Tensor W1 = Tensor::zeros(DType::F32, {kN, kHeadDim}), Wz = W;
  for (int64_t j = 0; j < kN; ++j)
    for (int64_t k = 0; k < kK; ++k) {
      if (k >= kHeadDim) W1.set(j * kHeadDim + k - kHeadDim, float(at(W, j * kK + k)));
      else Wz.set(j * kK + k, 0.0f);
    }
  Tensor part = Tensor::zeros(DType::F32, {1, kN}), full = Tensor::zeros(DType::F32, {1, kN});
  Params one = merge_params();
  one.set_int("m_off", 1);
  std::vector<Tensor*> o1{&part}, o2{&full};
  Params one_tile = tile_params(one, kN, 0);
  one_tile.set_int("K", kHeadDim);
  const std::vector<const Tensor*> in1{&stack, &W1, &res}, in2{&stack, &Wz, &res};
  amk::run_reference_op(Op::COMBINE_GEMV_ADD_TILE, one_tile, in1, o1);
  amk::run_reference_op(Op::COMBINE_GEMV_ADD_TILE, tile_params(merge_params(), kN, 0), in2, o2);
  for (int64_t j = 0; j < kN; ++j) EXPECT_EQ(part.get(j), full.get(j)) << j;
}

TEST(OpCombineGemvAddTile, BadOperandsAreNamedErrors) {
  using namespace combine;
  std::mt19937 rng(28);
  const Tensor stack = partial_stack(rng), W = rnd(DType::F32, {kN, kK}, rng);
  const Tensor res = rnd(DType::F32, {1, kN}, rng);
  Tensor out = Tensor::zeros(DType::F32, {1, kN});
  const Params p = tile_params(merge_params(), 4, 0);
  Params past = p;  // heads [1, 3) of 2
  past.set_int("m_off", 1);
  expect_error(Op::COMBINE_GEMV_ADD_TILE, past, {&stack, &W, &res}, out,
               "param K 16 must be a whole number of heads of head_dim 8 from head m_off 1 "
               "within n_heads 2");
  const Tensor ragged = rnd(DType::F32, {kSlabs * kHeads * kWidth - 2}, rng);
  expect_error(Op::COMBINE_GEMV_ADD_TILE, p, {&ragged, &W, &res}, out,
               "not a stack of partials of n_heads x (head_dim + 2) = 20");
  Params windowed = p;
  windowed.set_int("flags", amk::attention_flags::kRuntimeWindow);
  windowed.set_int("kv_len", 4);
  expect_error(Op::COMBINE_GEMV_ADD_TILE, windowed, {&stack, &W, &res}, out, "position");
  expect_error(Op::COMBINE_GEMV_ADD_TILE, p, {&stack, &W}, out, "takes 3 to 4 inputs");
  Tensor bf16_stack = Tensor::zeros(DType::BF16, stack.shape);
  for (int64_t i = 0; i < stack.numel(); ++i) bf16_stack.set(i, stack.get(i));
  expect_error(Op::COMBINE_GEMV_ADD_TILE, p, {&bf16_stack, &W, &res}, out,
               "COMBINE_GEMV_ADD_TILE: input 0 (partials) is BF16, not F32");
}

// ---- RMSNORM_GEMV_GLU_DOWN_TILE: a slice of the MLP's features, through down_proj, added ----

namespace glu_down {

using amk::DType;
using amk::Op;
using amk::Params;
using amk::Tensor;

constexpr int64_t kK = 16, kF = 12, kH = 8, kWidth = 5;

struct Operands {
  Tensor x, nw, Wg, Wu, Wd, bg, bu, bd, acc0;
};
Operands operands(DType dt, std::mt19937& rng) {
  return {rnd(dt, {1, kK}, rng),  rnd(dt, {kK}, rng),     rnd(dt, {kF, kK}, rng),
          rnd(dt, {kF, kK}, rng), rnd(dt, {kH, kF}, rng), rnd(dt, {kF}, rng),
          rnd(dt, {kF}, rng),     rnd(dt, {kH}, rng),     rnd(DType::F32, {1, kH}, rng)};
}

// The whole MLP in double, no intermediate rounded: acc0 + W_down (silu(W_gate xn + b_gate) *
// (W_up xn + b_up)) + b_down, xn = x / rms(x) * nw; with sum |terms| for the tolerance.
struct Want {
  std::vector<double> value, magnitude;
};
Want naive_mlp(const Operands& o, bool bias, double eps) {
  double ss = 0;
  for (int64_t k = 0; k < kK; ++k) ss += double(o.x.get(k)) * o.x.get(k);
  const double inv = 1.0 / std::sqrt(ss / kK + eps);
  std::vector<double> a(kF), mag_a(kF);
  for (int64_t j = 0; j < kF; ++j) {
    double g = bias ? o.bg.get(j) : 0.0, u = bias ? o.bu.get(j) : 0.0, mg = 0, mu = 0;
    for (int64_t k = 0; k < kK; ++k) {
      const double xn = o.x.get(k) * inv * o.nw.get(k);
      g += xn * o.Wg.get(j * kK + k);
      u += xn * o.Wu.get(j * kK + k);
      mg += std::fabs(xn * o.Wg.get(j * kK + k));
      mu += std::fabs(xn * o.Wu.get(j * kK + k));
    }
    const double silu = g / (1.0 + std::exp(-g));
    a[size_t(j)] = silu * u;
    mag_a[size_t(j)] = 1.1 * mg * std::fabs(u) + std::fabs(silu) * mu + std::fabs(a[size_t(j)]);
  }
  Want w{std::vector<double>(kH), std::vector<double>(kH)};
  for (int64_t i = 0; i < kH; ++i) {
    double y = o.acc0.get(i) + (bias ? o.bd.get(i) : 0.0), m = std::fabs(y);
    for (int64_t j = 0; j < kF; ++j) {
      y += a[size_t(j)] * o.Wd.get(i * kF + j);
      m += mag_a[size_t(j)] * std::fabs(o.Wd.get(i * kF + j));
    }
    w.value[size_t(i)] = y;
    w.magnitude[size_t(i)] = m;
  }
  return w;
}

Params tile(int64_t n_off) {
  Params p;
  p.set_real("eps", 1e-5);
  p.set_int("hidden", kK);
  p.set_int("K", kK);
  p.set_int("N_tile", std::min(kWidth, kF - n_off));
  p.set_int("n_off", n_off);
  return p;
}

std::vector<const Tensor*> inputs(const Operands& o, bool bias) {
  std::vector<const Tensor*> in{&o.x, &o.nw, &o.Wg, &o.Wu, &o.Wd};
  if (bias) in.insert(in.end(), {&o.bg, &o.bu, &o.bd});
  return in;
}

// Every tile (widths 5, 5, 2) adds into the accumulator, in two orders; each result is the whole
// MLP within F32 rounding (the features, each tile's row and each add round once), and the down
// bias counts once.
TEST(OpRmsnormGemvGluDownTile, TheTilesSumToTheWholeMlpInAnyOrder) {
  std::mt19937 rng(28);
  for (DType dt : {DType::F32, DType::BF16})
    for (bool bias : {false, true})
      for (bool reverse : {false, true}) {
        SCOPED_TRACE(std::string(name_of(dt)) + (bias ? " biases" : "") + (reverse ? " reversed" : ""));
        const Operands o = operands(dt, rng);
        const Want want = naive_mlp(o, bias, 1e-5);
        Tensor acc = o.acc0;
        std::vector<int64_t> offs{0, 5, 10};
        if (reverse) std::reverse(offs.begin(), offs.end());
        for (int64_t off : offs) {
          std::vector<Tensor*> outs{&acc};
          amk::run_reference_op(Op::RMSNORM_GEMV_GLU_DOWN_TILE, tile(off), inputs(o, bias), outs);
        }
        for (int64_t i = 0; i < kH; ++i) {
          const double tol = 1e-6 * want.magnitude[size_t(i)] + 1e-12;
          EXPECT_NEAR(acc.get(i), want.value[size_t(i)], tol) << i;
          EXPECT_NE(acc.get(i), o.acc0.get(i)) << i;  // every element moved
        }
      }
}

// One tile adds exactly its own features' share: the difference it makes equals the down
// projection of those features alone (the other tiles' columns of W_down zeroed).
TEST(OpRmsnormGemvGluDownTile, ATileAddsOnlyItsFeaturesColumns) {
  std::mt19937 rng(29);
  Operands o = operands(DType::F32, rng);
  Operands only = o;
  for (int64_t i = 0; i < kH; ++i)
    for (int64_t j = 0; j < kF; ++j)
      if (j < 5 || j >= 10) only.Wd.set(i * kF + j, 0.0f);
  Tensor a = Tensor::zeros(DType::F32, {1, kH});
  std::vector<Tensor*> outs_a{&a};
  amk::run_reference_op(Op::RMSNORM_GEMV_GLU_DOWN_TILE, tile(5), inputs(o, false), outs_a);
  const Want want = naive_mlp(only, false, 1e-5);  // acc0 is added there: subtract it
  for (int64_t i = 0; i < kH; ++i)
    EXPECT_NEAR(a.get(i), want.value[size_t(i)] - o.acc0.get(i), 1e-6 * want.magnitude[size_t(i)] + 1e-12);
}

TEST(OpRmsnormGemvGluDownTile, BadOperandsAreNamedErrors) {
  std::mt19937 rng(30);
  const Operands o = operands(DType::F32, rng);
  const auto expect_error = [&](std::vector<const Tensor*> in, Tensor& acc, const Params& p,
                                const std::string& what) {
    const Tensor before = acc;
    ::expect_error(Op::RMSNORM_GEMV_GLU_DOWN_TILE, p, std::move(in), acc, what);
    EXPECT_EQ(acc.bytes, before.bytes);  // nothing written
  };
  Tensor acc = o.acc0;
  expect_error({&o.x, &o.nw, &o.Wg, &o.Wu, &o.Wd, &o.bg}, acc, tile(0),
               "RMSNORM_GEMV_GLU_DOWN_TILE: takes x, the norm weight, the gate, up and down "
               "weights (inputs 0-4) and optionally the three biases (inputs 5-7): got 6 inputs");
  const Tensor wide = Tensor::zeros(DType::F32, {kH, kF + 1});
  expect_error({&o.x, &o.nw, &o.Wg, &o.Wu, &wide}, acc, tile(0),
               "input 4 (down weight) [8,13] must have the gate weight's 12 rows as its columns");
  Tensor bf16_acc = Tensor::zeros(DType::BF16, {1, kH});
  expect_error(inputs(o, false), bf16_acc, tile(0), "output 0 (accumulator) is BF16, not F32");
  Tensor long_acc = Tensor::zeros(DType::F32, {1, kH + 1});
  expect_error(inputs(o, false), long_acc, tile(0), "output 0 (accumulator)");
  const Tensor two_rows = Tensor::zeros(DType::F32, {2, kK});
  expect_error({&two_rows, &o.nw, &o.Wg, &o.Wu, &o.Wd}, acc, tile(0),
               "input 0 (x) [2,16] must be one row of K = 16");
  Params past = tile(10);
  past.set_int("N_tile", 5);  // features [10, 15) of 12
  expect_error(inputs(o, false), acc, past, "n_off 10 + N_tile 5");
  const Tensor short_bd = Tensor::zeros(DType::F32, {kH - 1});
  expect_error({&o.x, &o.nw, &o.Wg, &o.Wu, &o.Wd, &o.bg, &o.bu, &short_bd}, acc, tile(5),
               "input 7 (down bias)");
}

// GEMV_ADD_TILE's second output gets output 0's tile, and only its tile.
TEST(OpGemvAddTile, ASecondOutputGetsTheSameTile) {
  std::mt19937 rng(31);
  const Tensor x = rnd(DType::F32, {1, kK}, rng), W = rnd(DType::BF16, {kH, kK}, rng);
  const Tensor res = rnd(DType::F32, {1, kH}, rng);
  Tensor out = Tensor::zeros(DType::F32, {1, kH}), copy = out;
  copy.fill(std::numeric_limits<float>::quiet_NaN());
  Params p;
  p.set_int("K", kK);
  p.set_int("N_tile", 3);
  p.set_int("n_off", 2);
  std::vector<Tensor*> outs{&out, &copy};
  const std::vector<const Tensor*> in{&x, &W, &res};
  amk::run_reference_op(Op::GEMV_ADD_TILE, p, in, outs);
  for (int64_t i = 0; i < kH; ++i) {
    if (i >= 2 && i < 5) {
      EXPECT_EQ(copy.get(i), out.get(i)) << i;
      EXPECT_NE(out.get(i), 0.0f) << i;
    } else {
      EXPECT_TRUE(std::isnan(copy.get(i))) << i;
    }
  }
  Tensor narrow = Tensor::zeros(DType::F32, {1, kH - 1});
  ::expect_error(Op::GEMV_ADD_TILE, p, in, {&out, &narrow},
                 "output 1 [1,7] must have output 0's shape [1,8]");
}

}  // namespace glu_down
