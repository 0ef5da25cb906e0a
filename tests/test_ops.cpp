// Every opcode against an independent formulation written here (double-precision textbook
// loops in a different order, hand-computed cases, rotation matrices for RoPE, explicit
// repeat-interleaved K/V with softmax-then-weighted-sum for attention), for F32, F16 and BF16
// storage.
//
// Tolerance. The ops compute in double and round once to the output dtype, so an output is
// within half an ulp of its exact value; the references below are double too and differ from
// the op's double only by summation order (~1e-15 relative). One ulp of the output dtype at the
// reference value therefore bounds every comparison unless a test says why it needs more.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "amk/decoder.h"
#include "amk/ir.h"
#include "amk/reference_ops.h"
#include "amk/sampler.h"
#include "amk/tensor.h"

namespace {

using amk::DType;
using amk::Op;
using amk::OpError;
using amk::Params;
using amk::Tensor;
using amk::PackedSampling;
using amk::SamplingParams;
using amk::StepState;
using amk::greedy_token;
using amk::pack_sampling;
using amk::run_reference_op;
using amk::sample_token;

constexpr DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kInfD = std::numeric_limits<double>::infinity();

struct Prm {
  Params p;
  Prm& i(const std::string& k, int64_t v) {
    p.set_int(k, v);
    return *this;
  }
  Prm& f(const std::string& k, double v) {
    p.set_real(k, v);
    return *this;
  }
  operator const Params&() const { return p; }  // NOLINT: a builder
};

void run(Op op, const Params& params, std::vector<const Tensor*> in, std::vector<Tensor*> out) {
  amk::run_reference_op(op, params, in, out);
}

void expect_op_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no OpError; expected one containing: " << needle;
  } catch (const OpError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
  }
}

Tensor rnd(DType dt, std::vector<int64_t> shape, std::mt19937& rng, double lo = -1, double hi = 1) {
  Tensor t = Tensor::zeros(dt, std::move(shape));
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, float(u(rng)));
  return t;
}

Tensor rnd_ints(DType dt, std::vector<int64_t> shape, std::mt19937& rng, int64_t lo, int64_t hi) {
  Tensor t = Tensor::zeros(dt, std::move(shape));
  std::uniform_int_distribution<int64_t> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.set_int(i, u(rng));
  return t;
}

Tensor filled(DType dt, std::vector<int64_t> shape, float v) {
  Tensor t = Tensor::zeros(dt, std::move(shape));
  t.fill(v);
  return t;
}

// The stored values, widened exactly.
std::vector<double> vals(const Tensor& t) {
  const std::vector<float> f = t.to_floats();
  return {f.begin(), f.end()};
}

// The spacing of `dt` around |x| (subnormal spacing below the normal range).
double ulp(DType dt, double x) {
  int mbits = 23, min_exp = -126;
  if (dt == DType::F16) mbits = 10, min_exp = -14;
  if (dt == DType::BF16) mbits = 7;
  const int e = (x == 0 || !std::isfinite(x)) ? min_exp : std::max(std::ilogb(x), min_exp);
  return std::ldexp(1.0, e - mbits);
}

// |got - want| <= ulps * ulp(dtype, want) + abs_tol, element by element (first failure only).
void expect_close(const Tensor& got, const std::vector<double>& want, double ulps = 1.0,
                  double abs_tol = 1e-12) {
  ASSERT_EQ(got.numel(), int64_t(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got.get(int64_t(i));
    const double tol = ulps * ulp(got.dtype, want[i]) + abs_tol;
    if (!(std::fabs(g - want[i]) <= tol)) {
      ADD_FAILURE() << name_of(got.dtype) << " element " << i << ": got " << g << ", want "
                    << want[i] << " (tolerance " << tol << ")";
      return;
    }
  }
}

// ==== NOP, COPY ==============================================================================
TEST(OpNop, DoesNothingAndTakesNoOperands) {
  run(Op::NOP, {}, {}, {});
  Tensor t = Tensor::zeros(DType::F32, {1});
  expect_op_error([&] { run(Op::NOP, {}, {&t}, {}); }, "NOP: takes 0 inputs, got 1");
}

TEST(OpCopy, ConvertsDtypeAndIgnoresShape) {
  const std::vector<float> src_v = {1.0f + 0x1p-8f, -2.5f, 3.25f, 1e6f, -0.0f, 7.9f};
  const Tensor src = Tensor::from_floats(DType::F32, {2, 3}, src_v);
  Tensor bf = Tensor::zeros(DType::BF16, {6});
  run(Op::COPY, {}, {&src}, {&bf});
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_EQ(bf.get(i), amk::bf16_bits_to_float(amk::float_to_bf16_bits(src_v[size_t(i)])));

  Tensor i32 = Tensor::zeros(DType::I32, {3, 2});
  run(Op::COPY, {}, {&src}, {&i32});
  const std::vector<int64_t> truncated = {1, -2, 3, 1000000, 0, 7};
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(i32.get_int(i), truncated[size_t(i)]);

  // Integers copy exactly, even past float's 24-bit mantissa.
  const Tensor big = Tensor::from_ints(DType::I32, {2}, std::vector<int64_t>{16777217, INT32_MIN});
  Tensor big2 = Tensor::zeros(DType::I32, {2});
  run(Op::COPY, {}, {&big}, {&big2});
  EXPECT_EQ(big2.get_int(0), 16777217);
  EXPECT_EQ(big2.get_int(1), INT32_MIN);

  Tensor in_place = Tensor::from_floats(DType::F16, {2}, std::vector<float>{1.5f, 2.0f});
  run(Op::COPY, {}, {&in_place}, {&in_place});
  EXPECT_EQ(in_place.to_floats(), (std::vector<float>{1.5f, 2.0f}));

  Tensor i8 = Tensor::zeros(DType::I8, {6});
  expect_op_error([&] { run(Op::COPY, {}, {&src}, {&i8}); }, "COPY: Tensor: value 1000000 does not fit I8");
  Tensor five = Tensor::zeros(DType::F32, {5});
  expect_op_error([&] { run(Op::COPY, {}, {&src}, {&five}); }, "COPY: output 0 has 5 elements");
}

// ==== EMBED ==================================================================================
TEST(OpEmbed, GathersRows) {
  std::mt19937 rng(11);
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(name_of(dt)));
    const Tensor table = rnd(dt, {5, 4}, rng);
    const Tensor ids = Tensor::from_ints(DType::I32, {3}, std::vector<int64_t>{4, 0, 4});
    Tensor out = Tensor::zeros(dt, {3, 4});
    run(Op::EMBED, Prm().i("hidden", 4), {&ids, &table}, {&out});
    const int64_t id_of[] = {4, 0, 4};
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(out.get(r * 4 + j), table.get(id_of[r] * 4 + j));
  }
}

TEST(OpEmbed, ReshapesAFlatActivationIntoHeads) {
  // The Python lowerer's reshape bridge: ids [0], a [1, 8] activation as the table, [2, 4] out.
  std::vector<float> flat_v(8);
  for (int i = 0; i < 8; ++i) flat_v[size_t(i)] = float(i) - 3.5f;
  const Tensor flat = Tensor::from_floats(DType::F32, {1, 8}, flat_v);
  const Tensor zero_id = Tensor::from_ints(DType::I32, {1}, std::vector<int64_t>{0});
  Tensor heads = Tensor::zeros(DType::F32, {2, 4});
  run(Op::EMBED, Prm().i("hidden", 4), {&zero_id, &flat}, {&heads});
  EXPECT_EQ(heads.to_floats(), flat_v);
}

TEST(OpEmbed, RejectsBadIdsAndShapes) {
  const Tensor table = Tensor::zeros(DType::F32, {5, 4});
  Tensor out = Tensor::zeros(DType::F32, {2, 4});
  const Tensor too_big = Tensor::from_ints(DType::I32, {2}, std::vector<int64_t>{1, 5});
  expect_op_error([&] { run(Op::EMBED, Prm().i("hidden", 4), {&too_big, &table}, {&out}); },
                  "EMBED: input 0 (ids) element 1 is 5, outside the table's rows [0, 5)");
  const Tensor negative = Tensor::from_ints(DType::I32, {2}, std::vector<int64_t>{-1, 0});
  expect_op_error([&] { run(Op::EMBED, Prm().i("hidden", 4), {&negative, &table}, {&out}); },
                  "element 0 is -1");
  const Tensor float_ids = Tensor::from_floats(DType::F32, {2}, std::vector<float>{0, 1});
  expect_op_error([&] { run(Op::EMBED, Prm().i("hidden", 4), {&float_ids, &table}, {&out}); },
                  "input 0 (ids) must have an integer dtype, got F32");
  const Tensor ok_ids = Tensor::from_ints(DType::I32, {2}, std::vector<int64_t>{0, 1});
  expect_op_error([&] { run(Op::EMBED, Prm().i("hidden", 3), {&ok_ids, &table}, {&out}); },
                  "param hidden 3 must be >= 1 and divide the table row width 4");
  Tensor small = Tensor::zeros(DType::F32, {4});
  expect_op_error([&] { run(Op::EMBED, Prm().i("hidden", 4), {&ok_ids, &table}, {&small}); },
                  "output 0 has 4 elements");
}

// ==== RMSNORM, LAYERNORM =====================================================================
TEST(OpRmsNorm, HandComputed) {
  const Tensor x = Tensor::from_floats(DType::F32, {1, 2}, std::vector<float>{3, 4});
  const Tensor w = Tensor::from_floats(DType::F32, {2}, std::vector<float>{1, 2});
  Tensor out = Tensor::zeros(DType::F32, {1, 2});
  run(Op::RMSNORM, Prm().f("eps", 0.0).i("hidden", 2), {&x, &w}, {&out});
  // mean(x^2) = 12.5, rms = sqrt(12.5)
  expect_close(out, {3 / std::sqrt(12.5), 8 / std::sqrt(12.5)});
}

TEST(OpRmsNorm, MatchesTextbookPerRow) {
  std::mt19937 rng(12);
  const double eps = double(float(1e-5));  // params marshal as float32
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(name_of(dt)));
    const int64_t H = 16;
    const Tensor x = rnd(dt, {3, H}, rng, -2, 2);
    const Tensor w = rnd(dt, {H}, rng, 0.5, 1.5);
    Tensor out = filled(dt, {3, H}, kNaN);
    run(Op::RMSNORM, Prm().f("eps", 1e-5).i("hidden", H), {&x, &w}, {&out});
    const auto xv = vals(x), wv = vals(w);
    std::vector<double> want(xv.size());
    for (int64_t r = 0; r < 3; ++r) {
      double ss = 0;
      for (int64_t j = H - 1; j >= 0; --j) ss += xv[size_t(r * H + j)] * xv[size_t(r * H + j)];
      const double rms = std::sqrt(ss / double(H) + eps);
      for (int64_t j = 0; j < H; ++j) want[size_t(r * H + j)] = wv[size_t(j)] * (xv[size_t(r * H + j)] / rms);
    }
    expect_close(out, want);
  }
}

TEST(OpLayerNorm, MatchesTextbookWithAndWithoutBias) {
  std::mt19937 rng(13);
  const double eps = double(float(1e-5));
  for (DType dt : kFloatTypes) {
    for (bool bias : {false, true}) {
      SCOPED_TRACE(std::string(name_of(dt)) + (bias ? " bias" : " no bias"));
      const int64_t H = 12;
      const Tensor x = rnd(dt, {2, H}, rng, -2, 3);
      const Tensor w = rnd(dt, {H}, rng, 0.5, 1.5);
      const Tensor b = rnd(dt, {H}, rng);
      Tensor out = filled(dt, {2, H}, kNaN);
      std::vector<const Tensor*> in = {&x, &w};
      if (bias) in.push_back(&b);
      run(Op::LAYERNORM, Prm().f("eps", 1e-5).i("hidden", H), in, {&out});
      const auto xv = vals(x), wv = vals(w), bv = vals(b);
      std::vector<double> want(xv.size());
      for (int64_t r = 0; r < 2; ++r) {
        double s = 0, s2 = 0;  // var = E[x^2] - E[x]^2, a different formula from the op's
        for (int64_t j = 0; j < H; ++j) {
          s += xv[size_t(r * H + j)];
          s2 += xv[size_t(r * H + j)] * xv[size_t(r * H + j)];
        }
        const double mean = s / double(H), var = s2 / double(H) - mean * mean;
        for (int64_t j = 0; j < H; ++j)
          want[size_t(r * H + j)] = (xv[size_t(r * H + j)] - mean) / std::sqrt(var + eps) * wv[size_t(j)] +
                                    (bias ? bv[size_t(j)] : 0.0);
      }
      expect_close(out, want, 1.0, 1e-10);
    }
  }
}

TEST(OpNorm, RejectsMismatchedHidden) {
  const Tensor x = Tensor::zeros(DType::F32, {2, 8});
  const Tensor w = Tensor::zeros(DType::F32, {8});
  const Tensor w7 = Tensor::zeros(DType::F32, {7});
  Tensor out = Tensor::zeros(DType::F32, {2, 8});
  expect_op_error([&] { run(Op::RMSNORM, Prm().f("eps", 1e-5).i("hidden", 4), {&x, &w}, {&out}); },
                  "RMSNORM: input 0 (x) has shape [2,8], its last dimension must equal param hidden 4");
  expect_op_error([&] { run(Op::RMSNORM, Prm().f("eps", 1e-5).i("hidden", 8), {&x, &w7}, {&out}); },
                  "RMSNORM: input 1 (weight) has 7 elements");
  expect_op_error([&] { run(Op::LAYERNORM, Prm().f("eps", 1e-5).i("hidden", 8), {&x, &w, &w7}, {&out}); },
                  "LAYERNORM: input 2 (bias) has 7 elements");
  expect_op_error([&] { run(Op::RMSNORM, Prm().f("eps", -1.0).i("hidden", 8), {&x, &w}, {&out}); },
                  "param eps must be >= 0");
}

// ==== GEMV_TILE / GEMM_TILE ==================================================================
// out[r][n] = sum_k x[r][k] W[n][k], accumulated k-outer (the op is n-outer).
std::vector<double> matmul_ref(const std::vector<double>& x, const std::vector<double>& w,
                               int64_t M, int64_t K, int64_t N) {
  std::vector<double> out(size_t(M * N), 0.0);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) out[size_t(r * N + n)] += x[size_t(r * K + k)] * w[size_t(n * K + k)];
  return out;
}

Params gemv(int64_t K, int64_t N_tile, int64_t n_off) {
  return Prm().i("K", K).i("N_tile", N_tile).i("n_off", n_off);
}

TEST(OpGemv, HandComputedWithBias) {
  const Tensor x = Tensor::from_floats(DType::F32, {1, 2}, std::vector<float>{1, 2});
  const Tensor W = Tensor::from_floats(DType::F32, {3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6});
  const Tensor b = Tensor::from_floats(DType::F32, {3}, std::vector<float>{0.5f, -1, 0});
  Tensor out = Tensor::zeros(DType::F32, {1, 3});
  run(Op::GEMV_TILE, gemv(2, 3, 0), {&x, &W}, {&out});
  EXPECT_EQ(out.to_floats(), (std::vector<float>{5, 11, 17}));
  run(Op::GEMV_TILE, gemv(2, 2, 1), {&x, &W, &b}, {&out});  // bias is indexed by output column
  EXPECT_EQ(out.to_floats(), (std::vector<float>{5, 10, 17}));
}

TEST(OpGemv, TilesAssembleTheFullMatvec) {
  std::mt19937 rng(21);
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(name_of(dt)));
    const int64_t K = 24, N = 40;
    const Tensor x = rnd(dt, {1, K}, rng);
    const Tensor W = rnd(dt, {N, K}, rng);
    Tensor tiled = filled(dt, {1, N}, kNaN);
    for (int64_t off = 0; off < N; off += 16)
      run(Op::GEMV_TILE, gemv(K, std::min<int64_t>(16, N - off), off), {&x, &W}, {&tiled});
    expect_close(tiled, matmul_ref(vals(x), vals(W), 1, K, N));
    // Tiling must not change a single bit: each element is computed the same way.
    Tensor whole = Tensor::zeros(dt, {1, N});
    run(Op::GEMV_TILE, gemv(K, N, 0), {&x, &W}, {&whole});
    EXPECT_EQ(whole.bytes, tiled.bytes);
  }
}

TEST(OpGemv, LeavesOtherColumnsAndCoversEveryRow) {
  std::mt19937 rng(22);
  const int64_t K = 8, N = 10, M = 3;
  const Tensor x = rnd(DType::F32, {M, K}, rng);
  const Tensor W = rnd(DType::F32, {N, K}, rng);
  Tensor out = filled(DType::F32, {M, N}, kNaN);
  run(Op::GEMV_TILE, gemv(K, 4, 3), {&x, &W}, {&out});
  const auto want = matmul_ref(vals(x), vals(W), M, K, N);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t n = 0; n < N; ++n) {
      const float got = out.get(r * N + n);
      if (n >= 3 && n < 7)
        EXPECT_NEAR(got, want[size_t(r * N + n)], ulp(DType::F32, want[size_t(r * N + n)]));
      else
        EXPECT_TRUE(std::isnan(got)) << r << "," << n;
    }
  // A rank-1 x is one row.
  const Tensor x1 = rnd(DType::BF16, {K}, rng);
  Tensor y1 = Tensor::zeros(DType::F32, {N});
  run(Op::GEMV_TILE, gemv(K, N, 0), {&x1, &W}, {&y1});
  expect_close(y1, matmul_ref(vals(x1), vals(W), 1, K, N));
}

TEST(OpGemv, RejectsBadShapesAndParams) {
  const Tensor x = Tensor::zeros(DType::F32, {1, 32});
  const Tensor W = Tensor::zeros(DType::F32, {64, 32});
  Tensor out = Tensor::zeros(DType::F32, {1, 128});
  expect_op_error([&] { run(Op::GEMV_TILE, gemv(32, 32, 48), {&x, &W}, {&out}); },
                  "GEMV_TILE: n_off 48 + N_tile 32 exceeds weight rows 64");
  Tensor narrow = Tensor::zeros(DType::F32, {1, 40});
  expect_op_error([&] { run(Op::GEMV_TILE, gemv(32, 16, 32), {&x, &W}, {&narrow}); },
                  "GEMV_TILE: n_off 32 + N_tile 16 exceeds output 0 columns 40");
  expect_op_error([&] { run(Op::GEMV_TILE, gemv(16, 16, 0), {&x, &W}, {&out}); },
                  "GEMV_TILE: input 0 (x) has shape [1,32], its last dimension must equal param K 16");
  const Tensor W_wide = Tensor::zeros(DType::F32, {64, 16});
  expect_op_error([&] { run(Op::GEMV_TILE, gemv(32, 16, 0), {&x, &W_wide}, {&out}); },
                  "input 1 (weight) has shape [64,16], expected [N_out, K] with K 32");
  Tensor two_rows = Tensor::zeros(DType::F32, {2, 64});
  expect_op_error([&] { run(Op::GEMV_TILE, gemv(32, 16, 0), {&x, &W}, {&two_rows}); },
                  "output 0 has shape [2,64] with 2 rows, input 0 (x) has 1");
  const Tensor bias = Tensor::zeros(DType::F32, {32});
  expect_op_error([&] { run(Op::GEMV_TILE, gemv(32, 16, 0), {&x, &W, &bias}, {&out}); },
                  "input 2 (bias) has shape [32], expected [64]");
  const Tensor W_int = Tensor::zeros(DType::I8, {64, 32});
  expect_op_error([&] { run(Op::GEMV_TILE, gemv(32, 16, 0), {&x, &W_int}, {&out}); },
                  "input 1 (weight) has dtype I8; integer weights need params qdtype");
  expect_op_error([&] { run(Op::GEMV_TILE, gemv(32, 0, 0), {&x, &W}, {&out}); },
                  "param N_tile must be >= 1, got 0");
  expect_op_error([&] { run(Op::GEMV_TILE, gemv(32, 16, -16), {&x, &W}, {&out}); },
                  "param n_off must be >= 0, got -16");
  Params q5 = gemv(32, 16, 0);
  q5.set_int("qdtype", 5);
  expect_op_error([&] { run(Op::GEMV_TILE, q5, {&x, &W}, {&out}); },
                  "param qdtype 5 is neither a float weight dtype");
  Params q6 = gemv(32, 16, 0);
  q6.set_int("qdtype", 6);
  expect_op_error([&] { run(Op::GEMV_TILE, q6, {&x, &W_int}, {&out}); },
                  "selects quantized weights, which need inputs [x, qW, scales(, zeros)]");
}

TEST(OpGemm, RowAndColumnTilesAssembleTheFullMatmul) {
  std::mt19937 rng(23);
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(name_of(dt)));
    const int64_t M = 5, K = 8, N = 12;
    const Tensor x = rnd(dt, {M, K}, rng);
    const Tensor W = rnd(dt, {N, K}, rng);
    const Tensor b = rnd(dt, {N}, rng);
    Tensor out = filled(dt, {M, N}, kNaN);
    for (int64_t m = 0; m < M; m += 2)
      for (int64_t n = 0; n < N; n += 5) {
        Params p = Prm().i("M_tile", std::min<int64_t>(2, M - m)).i("m_off", m).i("K", K)
                       .i("N_tile", std::min<int64_t>(5, N - n)).i("n_off", n);
        run(Op::GEMM_TILE, p, {&x, &W, &b}, {&out});
      }
    auto want = matmul_ref(vals(x), vals(W), M, K, N);
    const auto bv = vals(b);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t n = 0; n < N; ++n) want[size_t(r * N + n)] += bv[size_t(n)];
    expect_close(out, want);
  }
}

TEST(OpGemm, WritesOnlyItsBlock) {
  std::mt19937 rng(24);
  const int64_t M = 5, K = 4, N = 9;
  const Tensor x = rnd(DType::F32, {M, K}, rng);
  const Tensor W = rnd(DType::F32, {N, K}, rng);
  Tensor out = filled(DType::F32, {M, N}, kNaN);
  run(Op::GEMM_TILE, Prm().i("M_tile", 2).i("m_off", 2).i("K", K).i("N_tile", 3).i("n_off", 5),
      {&x, &W}, {&out});
  for (int64_t r = 0; r < M; ++r)
    for (int64_t n = 0; n < N; ++n)
      EXPECT_EQ(std::isnan(out.get(r * N + n)), !(r >= 2 && r < 4 && n >= 5 && n < 8)) << r << "," << n;
  expect_op_error(
      [&] {
        run(Op::GEMM_TILE, Prm().i("M_tile", 2).i("m_off", 4).i("K", K).i("N_tile", 3).i("n_off", 0),
            {&x, &W}, {&out});
      },
      "GEMM_TILE: m_off 4 + M_tile 2 exceeds input 0 (x) rows 5");
  expect_op_error([&] { run(Op::GEMM_TILE, gemv(K, 3, 0), {&x, &W}, {&out}); },
                  "GEMM_TILE: missing required param 'M_tile'");
}

// ==== quantized GEMV and DEQUANT ============================================================
// The dequantized weight, written straight from the storage convention of docs/OPCODES.md.
std::vector<double> dequant_ref(DType qd, const Tensor& q, const Tensor& s, const Tensor* z,
                                int64_t K, int64_t group) {
  const int64_t rows = q.numel() / K, G = (K + group - 1) / group;
  std::vector<double> out(static_cast<size_t>(q.numel()));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k) {
      const double stored = double(q.get_int(r * K + k));
      const double scale = s.get(r * G + k / group);
      double level = stored;
      if (z != nullptr)
        level -= z->get(r * G + k / group);
      else if (qd == DType::I4)
        level -= 8;  // symmetric int4 stores q + 8
      out[size_t(r * K + k)] = level * scale;
    }
  return out;
}

Params qgemv(int64_t K, int64_t N_tile, int64_t n_off, DType qd, int64_t group) {
  return Prm().i("K", K).i("N_tile", N_tile).i("n_off", n_off).i("qdtype", int64_t(qd)).i("group", group);
}

TEST(OpGemvQuant, HandComputed) {
  const Tensor x2 = Tensor::from_floats(DType::F32, {1, 2}, std::vector<float>{1, 2});
  const Tensor q8 = Tensor::from_ints(DType::I8, {2, 2}, std::vector<int64_t>{1, -1, 3, 4});
  const Tensor s8 = Tensor::from_floats(DType::F16, {2, 1}, std::vector<float>{0.5f, 2});
  Tensor out = Tensor::zeros(DType::F32, {1, 2});
  run(Op::GEMV_TILE, qgemv(2, 2, 0, DType::I8, 2), {&x2, &q8, &s8}, {&out});
  EXPECT_EQ(out.to_floats(), (std::vector<float>{-0.5f, 22}));

  // int4 nibbles 0, 8, 15, 9 are levels -8, 0, 7, 1; with zero point 3 they are -3, 5, 12, 6.
  const Tensor x4 = Tensor::from_floats(DType::F32, {1, 4}, std::vector<float>{1, 2, 3, 4});
  const Tensor q4 = Tensor::from_ints(DType::I4, {1, 4}, std::vector<int64_t>{0, 8, 15, 9});
  const Tensor s4 = Tensor::from_floats(DType::F32, {1, 1}, std::vector<float>{0.5f});
  const Tensor z4 = Tensor::from_floats(DType::F32, {1, 1}, std::vector<float>{3});
  Tensor y = Tensor::zeros(DType::F32, {1, 1});
  run(Op::GEMV_TILE, qgemv(4, 1, 0, DType::I4, 4), {&x4, &q4, &s4}, {&y});
  EXPECT_EQ(y.get(0), 8.5f);  // (-4*1 + 0*2 + 3.5*3 + 0.5*4)
  run(Op::GEMV_TILE, qgemv(4, 1, 0, DType::I4, 4), {&x4, &q4, &s4, &z4}, {&y});
  EXPECT_EQ(y.get(0), 33.5f);  // (-1.5*1 + 2.5*2 + 6*3 + 3*4)
}

TEST(OpGemvQuant, TiledI8AndI4MatchTheDequantizedMatvec) {
  std::mt19937 rng(31);
  const int64_t K = 12, N = 10, group = 5;  // three groups, the last one short (2 columns)
  for (DType qd : {DType::I8, DType::I4}) {
    for (bool zeros : {false, true}) {
      for (DType dt : kFloatTypes) {
        SCOPED_TRACE(std::string(name_of(qd)) + (zeros ? " asym " : " sym ") + std::string(name_of(dt)));
        const Tensor x = rnd(dt, {1, K}, rng);
        const Tensor q = qd == DType::I8 ? rnd_ints(qd, {N, K}, rng, -128, 127) : rnd_ints(qd, {N, K}, rng, 0, 15);
        const Tensor s = rnd(dt, {N, 3}, rng, 0.01, 0.1);
        const Tensor z = qd == DType::I8 ? rnd_ints(dt, {N, 3}, rng, -5, 5) : rnd_ints(dt, {N, 3}, rng, 0, 15);
        Tensor out = filled(dt, {1, N}, kNaN);
        std::vector<const Tensor*> in = {&x, &q, &s};
        if (zeros) in.push_back(&z);
        for (int64_t off = 0; off < N; off += 4)
          run(Op::GEMV_TILE, qgemv(K, std::min<int64_t>(4, N - off), off, qd, group), in, {&out});
        expect_close(out, matmul_ref(vals(x), dequant_ref(qd, q, s, zeros ? &z : nullptr, K, group), 1, K, N));
      }
    }
  }
}

TEST(OpGemvQuant, EqualsDequantThenFpGemv) {
  // With F16 scales every dequantized weight is exact in F32, so the two paths agree bit for bit.
  std::mt19937 rng(32);
  const int64_t K = 16, N = 6, group = 8;
  for (DType qd : {DType::I8, DType::I4}) {
    SCOPED_TRACE(std::string(name_of(qd)));
    const Tensor x = rnd(DType::BF16, {1, K}, rng);
    const Tensor q = qd == DType::I8 ? rnd_ints(qd, {N, K}, rng, -128, 127) : rnd_ints(qd, {N, K}, rng, 0, 15);
    const Tensor s = rnd(DType::F16, {N, 2}, rng, 0.01, 0.1);
    Tensor w = Tensor::zeros(DType::F32, {N, K});
    run(Op::DEQUANT, Prm().i("qdtype", int64_t(qd)).i("group", group), {&q, &s}, {&w});
    Tensor via_dequant = Tensor::zeros(DType::F32, {1, N});
    run(Op::GEMV_TILE, gemv(K, N, 0), {&x, &w}, {&via_dequant});
    Tensor fused = Tensor::zeros(DType::F32, {1, N});
    run(Op::GEMV_TILE, qgemv(K, N, 0, qd, group), {&x, &q, &s}, {&fused});
    EXPECT_EQ(fused.bytes, via_dequant.bytes);
  }
}

TEST(OpGemvQuant, RejectsBadQuantOperands) {
  const Tensor x = Tensor::zeros(DType::F32, {1, 8});
  const Tensor q4 = Tensor::zeros(DType::I4, {4, 8});
  const Tensor q8 = Tensor::zeros(DType::I8, {4, 8});
  const Tensor s = Tensor::zeros(DType::F16, {4, 2});
  Tensor out = Tensor::zeros(DType::F32, {1, 4});
  expect_op_error([&] { run(Op::GEMV_TILE, qgemv(8, 4, 0, DType::I4, 4), {&x, &q8, &s}, {&out}); },
                  "GEMV_TILE: input 1 (weight) has dtype I8 but param qdtype 7 says I4");
  expect_op_error([&] { run(Op::GEMV_TILE, qgemv(8, 4, 0, DType::I4, 3), {&x, &q4, &s}, {&out}); },
                  "input 2 (scales) has shape [4,2], expected [4,3]");
  const Tensor s_int = Tensor::zeros(DType::I32, {4, 2});
  expect_op_error([&] { run(Op::GEMV_TILE, qgemv(8, 4, 0, DType::I4, 4), {&x, &q4, &s_int}, {&out}); },
                  "input 2 (scales) must have a float dtype, got I32");
  expect_op_error([&] { run(Op::GEMV_TILE, qgemv(8, 4, 0, DType::I4, 0), {&x, &q4, &s}, {&out}); },
                  "param group must be >= 1, got 0");
  const Tensor x7 = Tensor::zeros(DType::F32, {1, 7});
  const Tensor q4_odd = Tensor::zeros(DType::I4, {4, 7});
  expect_op_error([&] { run(Op::GEMV_TILE, qgemv(7, 4, 0, DType::I4, 4), {&x7, &q4_odd, &s}, {&out}); },
                  "is I4 with an odd row width 7");
  const Tensor z_bad = Tensor::zeros(DType::F16, {4, 1});
  expect_op_error([&] { run(Op::GEMV_TILE, qgemv(8, 4, 0, DType::I4, 4), {&x, &q4, &s, &z_bad}, {&out}); },
                  "input 3 (zeros) has shape [4,1], expected [4,2]");
  expect_op_error([&] { run(Op::GEMV_TILE, gemv(8, 4, 0), {&x, &q4, &s, &s}, {&out}); },
                  "GEMV_TILE: takes 2 to 3 inputs, got 4");
}

TEST(OpDequant, HandComputed) {
  const Tensor q8 = Tensor::from_ints(DType::I8, {4}, std::vector<int64_t>{-128, 127, 0, 5});
  const Tensor s8 = Tensor::from_floats(DType::F32, {1}, std::vector<float>{0.25f});
  Tensor out = Tensor::zeros(DType::F32, {4});
  run(Op::DEQUANT, Prm().i("qdtype", 6).i("group", 4), {&q8, &s8}, {&out});
  EXPECT_EQ(out.to_floats(), (std::vector<float>{-32, 31.75f, 0, 1.25f}));

  const Tensor q4 = Tensor::from_ints(DType::I4, {4}, std::vector<int64_t>{0, 8, 15, 9});
  const Tensor s4 = Tensor::from_floats(DType::BF16, {2}, std::vector<float>{0.5f, 2});
  run(Op::DEQUANT, Prm().i("qdtype", 7).i("group", 2), {&q4, &s4}, {&out});
  EXPECT_EQ(out.to_floats(), (std::vector<float>{-4, 0, 14, 2}));
  const Tensor z4 = Tensor::from_floats(DType::F16, {2}, std::vector<float>{3, 10});
  run(Op::DEQUANT, Prm().i("qdtype", 7).i("group", 2), {&q4, &s4, &z4}, {&out});
  EXPECT_EQ(out.to_floats(), (std::vector<float>{-1.5f, 2.5f, 10, -2}));
}

TEST(OpDequant, MatchesStorageConventionForEveryDtype) {
  std::mt19937 rng(33);
  const int64_t K = 10, group = 4;  // groups of 4, 4, 2
  for (DType qd : {DType::I8, DType::I4}) {
    for (DType dt : kFloatTypes) {
      for (bool zeros : {false, true}) {
        SCOPED_TRACE(std::string(name_of(qd)) + " " + std::string(name_of(dt)) + (zeros ? " asym" : " sym"));
        const Tensor q = qd == DType::I8 ? rnd_ints(qd, {2, 3, K}, rng, -128, 127) : rnd_ints(qd, {2, 3, K}, rng, 0, 15);
        const Tensor s = rnd(dt, {2, 3, 3}, rng, 0.01, 1);
        const Tensor z = rnd_ints(dt, {2, 3, 3}, rng, 0, 15);
        Tensor out = filled(dt, {6, K}, kNaN);
        std::vector<const Tensor*> in = {&q, &s};
        if (zeros) in.push_back(&z);
        run(Op::DEQUANT, Prm().i("qdtype", int64_t(qd)).i("group", group), in, {&out});
        expect_close(out, dequant_ref(qd, q, s, zeros ? &z : nullptr, K, group));
      }
    }
  }
}

TEST(OpDequant, RejectsBadOperands) {
  const Tensor q = Tensor::zeros(DType::I8, {2, 8});
  const Tensor s = Tensor::zeros(DType::F32, {2, 2});
  Tensor out = Tensor::zeros(DType::F32, {2, 8});
  expect_op_error([&] { run(Op::DEQUANT, Prm().i("qdtype", 7).i("group", 4), {&q, &s}, {&out}); },
                  "DEQUANT: input 0 (q) has dtype I8 but param qdtype 7 says I4");
  expect_op_error([&] { run(Op::DEQUANT, Prm().i("qdtype", 2).i("group", 4), {&q, &s}, {&out}); },
                  "DEQUANT: param qdtype 2 is not a quantized weight dtype");
  expect_op_error([&] { run(Op::DEQUANT, Prm().i("qdtype", 6).i("group", 8), {&q, &s}, {&out}); },
                  "input 1 (scales) has shape [2,2], expected [2,1]");
  Tensor small = Tensor::zeros(DType::F32, {8});
  expect_op_error([&] { run(Op::DEQUANT, Prm().i("qdtype", 6).i("group", 4), {&q, &s}, {&small}); },
                  "output 0 has 8 elements");
  expect_op_error([&] { run(Op::DEQUANT, Prm().i("qdtype", 6), {&q, &s}, {&out}); },
                  "DEQUANT: missing required param 'group'");
}

// ==== ATTENTION_TILE / ATTENTION_COMBINE / KV_APPEND =========================================
struct AttnCase {
  int64_t H, Hkv, D, S;
};

// A case's random q [H, D] and K / V caches [Hkv, S, D], drawn in that order.
struct AttnInputs {
  Tensor q, k, v;
};
AttnInputs random_inputs(const AttnCase& a, std::mt19937& rng) {
  Tensor q = rnd(DType::F32, {a.H, a.D}, rng);
  Tensor k = rnd(DType::F32, {a.Hkv, a.S, a.D}, rng);
  Tensor v = rnd(DType::F32, {a.Hkv, a.S, a.D}, rng);
  return {std::move(q), std::move(k), std::move(v)};
}

// softmax(q k^T * scale) v over rows [start, start + len), with K/V expanded to every query head
// by an explicit repeat_interleave (each KV head copied n_heads / n_kv_heads times in a row).
// Caches are [n_kv_heads, S, head_dim]: KV head g's key j is at (g * S + j) * head_dim.
std::vector<double> naive_attention(const std::vector<double>& q, const std::vector<double>& k,
                                    const std::vector<double>& v, AttnCase a, int64_t start,
                                    int64_t len, double scale) {
  const int64_t rep = a.H / a.Hkv;
  using Rows = std::vector<std::vector<std::vector<double>>>;  // [j][h][d]
  Rows kr(static_cast<size_t>(len)), vr(static_cast<size_t>(len));
  for (int64_t j = 0; j < len; ++j)
    for (int64_t g = 0; g < a.Hkv; ++g)
      for (int64_t r = 0; r < rep; ++r) {
        const auto at = size_t((g * a.S + start + j) * a.D);
        kr[size_t(j)].emplace_back(k.begin() + long(at), k.begin() + long(at + size_t(a.D)));
        vr[size_t(j)].emplace_back(v.begin() + long(at), v.begin() + long(at + size_t(a.D)));
      }
  std::vector<double> out(size_t(a.H * a.D), 0.0);
  for (int64_t h = 0; h < a.H; ++h) {
    std::vector<double> p(static_cast<size_t>(len));
    double total = 0;
    for (int64_t j = 0; j < len; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < a.D; ++d) dot += q[size_t(h * a.D + d)] * kr[size_t(j)][size_t(h)][size_t(d)];
      total += p[size_t(j)] = std::exp(dot * scale);  // small scores: no max shift needed
    }
    for (int64_t j = 0; j < len; ++j)
      for (int64_t d = 0; d < a.D; ++d)
        out[size_t(h * a.D + d)] += p[size_t(j)] / total * vr[size_t(j)][size_t(h)][size_t(d)];
  }
  return out;
}

Params attn(AttnCase a, int64_t start, int64_t len, double scale, int64_t flags = 0) {
  Prm p;
  p.i("head_dim", a.D).i("kv_start", start).i("kv_len", len).f("scale", scale).i("n_heads", a.H)
      .i("n_kv_heads", a.Hkv);
  if (flags != 0) p.i("flags", flags);
  return p;
}

TEST(OpAttention, GqaRepeatsEachKvHeadInterleaved) {
  // One key: softmax is 1, so head h returns the value of the KV head it reads.
  const AttnCase a{4, 2, 1, 1};
  const Tensor q = Tensor::from_floats(DType::F32, {4, 1}, std::vector<float>{1, 2, 3, 4});
  const Tensor k = Tensor::from_floats(DType::F32, {2, 1, 1}, std::vector<float>{1, 1});
  const Tensor v = Tensor::from_floats(DType::F32, {2, 1, 1}, std::vector<float>{10, 20});
  Tensor out = Tensor::zeros(DType::F32, {4, 1});
  run(Op::ATTENTION_TILE, attn(a, 0, 1, 1.0), {&q, &k, &v}, {&out});
  EXPECT_EQ(out.to_floats(), (std::vector<float>{10, 10, 20, 20}));  // not 10, 20, 10, 20
}

TEST(OpAttention, MatchesSoftmaxThenWeightedSumForGqaAndMqa) {
  std::mt19937 rng(41);
  for (AttnCase a : {AttnCase{4, 4, 8, 12}, AttnCase{4, 2, 8, 12}, AttnCase{8, 2, 8, 12},
                     AttnCase{4, 1, 8, 12}, AttnCase{8, 1, 16, 12}}) {
    for (DType dt : kFloatTypes) {
      SCOPED_TRACE("H " + std::to_string(a.H) + " Hkv " + std::to_string(a.Hkv) + " " + std::string(name_of(dt)));
      const Tensor q = rnd(dt, {a.H, a.D}, rng);
      const Tensor k = rnd(dt, {a.Hkv, a.S, a.D}, rng);
      const Tensor v = rnd(dt, {a.Hkv, a.S, a.D}, rng);
      const double scale = 1.0 / std::sqrt(double(a.D));
      Tensor out = filled(dt, {1, a.H * a.D}, kNaN);  // flat, as the lowerer declares it
      run(Op::ATTENTION_TILE, attn(a, 2, 7, scale), {&q, &k, &v}, {&out});
      expect_close(out, naive_attention(vals(q), vals(k), vals(v), a, 2, 7, double(float(scale))), 1.0, 1e-10);
    }
  }
}

TEST(OpAttention, EmptyWindowAndIgnoredFourthInput) {
  std::mt19937 rng(42);
  const AttnCase a{2, 1, 4, 4};
  const Tensor q = rnd(DType::F32, {2, 4}, rng);
  const Tensor k = rnd(DType::F32, {1, 4, 4}, rng);
  const Tensor v = rnd(DType::F32, {1, 4, 4}, rng);
  Tensor out = filled(DType::F32, {2, 4}, kNaN);
  run(Op::ATTENTION_TILE, attn(a, 4, 0, 0.5), {&q, &k, &v}, {&out});
  EXPECT_EQ(out.to_floats(), std::vector<float>(8, 0.0f));

  Tensor part = filled(DType::F32, {2, 6}, kNaN);
  run(Op::ATTENTION_TILE, attn(a, 1, 0, 0.5, 2), {&q, &k, &v}, {&part});
  for (int h = 0; h < 2; ++h) {
    for (int d = 0; d < 4; ++d) EXPECT_EQ(part.get(h * 6 + d), 0.0f);
    EXPECT_EQ(part.get(h * 6 + 4), -INFINITY);
    EXPECT_EQ(part.get(h * 6 + 5), 0.0f);
  }

  // reference.py never reads a 4th input; neither do we.
  Tensor with4 = Tensor::zeros(DType::F32, {2, 4}), without = Tensor::zeros(DType::F32, {2, 4});
  const Tensor extra = rnd(DType::F32, {3}, rng);
  run(Op::ATTENTION_TILE, attn(a, 0, 4, 0.5), {&q, &k, &v, &extra}, {&with4});
  run(Op::ATTENTION_TILE, attn(a, 0, 4, 0.5), {&q, &k, &v}, {&without});
  EXPECT_EQ(with4.bytes, without.bytes);
  // The causal bit changes nothing for one decode query.
  Tensor causal = Tensor::zeros(DType::F32, {2, 4});
  run(Op::ATTENTION_TILE, attn(a, 0, 4, 0.5, 1), {&q, &k, &v}, {&causal});
  EXPECT_EQ(causal.bytes, without.bytes);
}

TEST(OpAttention, SplitKvPartialsCombineToWholeWindow) {
  // Partials are F32: acc, m and l each carry <= 2^-24 relative error, and an error in m scales
  // that shard's weight by exp(dm) ~ 1 + |m| 2^-24. With |v| <= 1 and |m| <= 3 the combined
  // result is within 1e-6 of the exact one, on top of the output's own rounding.
  std::mt19937 rng(43);
  const AttnCase a{8, 2, 8, 16};
  const std::vector<std::vector<int64_t>> splits = {
      {11}, {5, 6}, {3, 3, 5}, {4, 0, 7}, {1, 1, 1, 1, 1, 1, 1, 4}};
  for (DType dt : kFloatTypes) {
    const Tensor q = rnd(dt, {a.H, a.D}, rng);
    const Tensor k = rnd(dt, {a.Hkv, a.S, a.D}, rng);
    const Tensor v = rnd(dt, {a.Hkv, a.S, a.D}, rng);
    const double scale = 1.0 / std::sqrt(double(a.D));
    const int64_t start = 3, len = 11;
    const auto want = naive_attention(vals(q), vals(k), vals(v), a, start, len, double(float(scale)));
    Tensor whole = Tensor::zeros(dt, {1, a.H * a.D});
    run(Op::ATTENTION_TILE, attn(a, start, len, scale), {&q, &k, &v}, {&whole});
    for (const auto& split : splits) {
      SCOPED_TRACE(std::string(name_of(dt)) + " shards " + std::to_string(split.size()));
      std::vector<Tensor> parts;
      int64_t at = start;
      for (int64_t n : split) {
        parts.push_back(filled(DType::F32, {a.H, a.D + 2}, kNaN));
        run(Op::ATTENTION_TILE, attn(a, at, n, scale, 2), {&q, &k, &v}, {&parts.back()});
        at += n;
      }
      if (split.size() == 1) parts.push_back(filled(DType::F32, {a.H, a.D + 2}, 0.0f));  // arity >= 2; l = 0
      std::vector<const Tensor*> in;
      for (const Tensor& p : parts) in.push_back(&p);
      Tensor out = filled(dt, {1, a.H * a.D}, kNaN);
      run(Op::ATTENTION_COMBINE, Prm().i("head_dim", a.D).i("n_heads", a.H), in, {&out});
      expect_close(out, want, 1.0, 1e-6);
      if (dt == DType::F32) expect_close(out, vals(whole), 0.0, 1e-6);
    }
  }
}

// Head ranges (n_off, N_tile): per group of KV heads, partial tiles over KV blocks and a combine
// into that group's slice of the output assemble the whole-window attention of every head.
TEST(OpAttention, HeadRangesAssembleEveryHead) {
  std::mt19937 rng(44);
  const AttnCase a{8, 4, 8, 16};  // rep 2: groups of whole KV heads
  const auto [q, k, v] = random_inputs(a, rng);
  const double scale = 1.0 / std::sqrt(double(a.D));
  const auto want = naive_attention(vals(q), vals(k), vals(v), a, 0, 13, double(float(scale)));
  for (int64_t kv_heads : {1, 2, 4}) {
    SCOPED_TRACE("kv_heads " + std::to_string(kv_heads));
    const int64_t heads = kv_heads * (a.H / a.Hkv);
    Tensor out = filled(DType::F32, {1, a.H * a.D}, kNaN);
    for (int64_t first = 0; first < a.H; first += heads) {
      std::vector<Tensor> parts;
      for (int64_t start : {0, 6}) {
        parts.push_back(filled(DType::F32, {heads, a.D + 2}, kNaN));
        Params p = attn(a, start, start == 0 ? 6 : 7, scale, 2);
        p.set_int("n_off", first);
        p.set_int("N_tile", heads);
        run(Op::ATTENTION_TILE, p, {&q, &k, &v}, {&parts.back()});
      }
      // Ranged full (non-partial) tile: the group's heads alone, equal to the naive rows.
      Tensor alone = filled(DType::F32, {heads, a.D}, kNaN);
      Params p = attn(a, 0, 13, scale);
      p.set_int("n_off", first);
      p.set_int("N_tile", heads);
      run(Op::ATTENTION_TILE, p, {&q, &k, &v}, {&alone});
      expect_close(alone, std::vector<double>(want.begin() + first * a.D,
                                              want.begin() + (first + heads) * a.D), 1.0, 1e-6);
      // The combine writes exactly its slice: the rest of out keeps its NaN until its turn.
      run(Op::ATTENTION_COMBINE, Prm().i("head_dim", a.D).i("n_off", first).i("N_tile", heads),
          {&parts[0], &parts[1]}, {&out});
      for (int64_t e = (first + heads) * a.D; e < a.H * a.D; ++e) ASSERT_TRUE(std::isnan(out.get(e)));
    }
    expect_close(out, want, 1.0, 1e-6);
  }
}

// A ranged partial into a stack of partials of every head [S * n_heads, head_dim + 2] (slab
// m_off, COMBINE_GEMV_ADD_TILE's input) writes exactly the rows the same task writes into a
// buffer of its own, and nothing else; a slab past the stack, or m_off without a stack, is an
// error.
TEST(OpAttention, PartialsGoToTheirSlabOfAStack) {
  std::mt19937 rng(47);
  const AttnCase a{8, 4, 8, 16};
  const auto [q, k, v] = random_inputs(a, rng);
  const double scale = 1.0 / std::sqrt(double(a.D));
  const int64_t heads = 2, slabs = 2, width = a.D + 2;
  Tensor stack = filled(DType::F32, {slabs * a.H, width}, kNaN);
  for (int64_t slab = 0; slab < slabs; ++slab)
    for (int64_t first = 0; first < a.H; first += heads) {
      Params p = attn(a, slab * 6, slab == 0 ? 6 : 7, scale, 2);
      p.set_int("n_off", first);
      p.set_int("N_tile", heads);
      Tensor own = filled(DType::F32, {heads, width}, kNaN);
      run(Op::ATTENTION_TILE, p, {&q, &k, &v}, {&own});
      p.set_int("m_off", slab);
      run(Op::ATTENTION_TILE, p, {&q, &k, &v}, {&stack});
      const int64_t row0 = slab * a.H + first;
      for (int64_t e = 0; e < heads * width; ++e)
        ASSERT_EQ(stack.get(row0 * width + e), own.get(e)) << slab << " " << first << " " << e;
      for (int64_t e = (row0 + heads) * width; e < slabs * a.H * width; ++e)
        ASSERT_TRUE(std::isnan(stack.get(e))) << "wrote past its rows: " << e;
    }
  Params past = attn(a, 0, 6, scale, 2);
  past.set_int("n_off", 0);
  past.set_int("N_tile", heads);
  past.set_int("m_off", slabs);
  expect_op_error([&] { run(Op::ATTENTION_TILE, past, {&q, &k, &v}, {&stack}); },
                  "param m_off 2 is not a slab of output 0, a stack of 2 partials");
  Tensor own = filled(DType::F32, {heads, width}, kNaN);
  past.set_int("m_off", 1);
  expect_op_error([&] { run(Op::ATTENTION_TILE, past, {&q, &k, &v}, {&own}); },
                  "param m_off 1 needs output 0 to be a stack of partials");
}

// The same for a task with no head range (its slab's rows of every head) and for the fused
// ROPE_KV_ATTENTION_TILE, which runs ATTENTION_TILE's body with its params (m_off among them):
// the stack's slab holds exactly the task's own partials, the rest of the stack is untouched,
// and the fused task's KV caches are the same either way.
TEST(OpAttention, WholeAndFusedPartialsGoToTheirSlabOfAStack) {
  std::mt19937 rng(48);
  const AttnCase a{4, 2, 4, 8};
  const double scale = 1.0 / std::sqrt(double(a.D));
  const int64_t width = a.D + 2, slabs = 3;
  const auto expect_slab = [&](const Tensor& stack, const Tensor& own, int64_t row0) {
    const int64_t n = own.numel();
    for (int64_t e = 0; e < slabs * a.H * width; ++e) {
      const int64_t i = e - row0 * width;
      if (i >= 0 && i < n)
        ASSERT_EQ(stack.get(e), own.get(i)) << e;
      else
        ASSERT_TRUE(std::isnan(stack.get(e))) << "wrote outside its rows: " << e;
    }
  };
  {
    SCOPED_TRACE("ATTENTION_TILE, every head");
    const auto [q, k, v] = random_inputs(a, rng);
    Params p = attn(a, 2, 5, scale, 2);
    Tensor own = filled(DType::F32, {a.H, width}, kNaN);
    run(Op::ATTENTION_TILE, p, {&q, &k, &v}, {&own});
    p.set_int("m_off", 2);
    Tensor stack = filled(DType::F32, {slabs, a.H, width}, kNaN);
    run(Op::ATTENTION_TILE, p, {&q, &k, &v}, {&stack});
    expect_slab(stack, own, 2 * a.H);
    p.set_int("m_off", 3);
    expect_op_error([&] { run(Op::ATTENTION_TILE, p, {&q, &k, &v}, {&stack}); },
                    "param m_off 3 is not a slab of output 0, a stack of 3 partials");
  }
  {
    SCOPED_TRACE("ROPE_KV_ATTENTION_TILE, heads [2, 4)");
    const Tensor q = rnd(DType::F32, {1, a.H * a.D}, rng);
    const Tensor k = rnd(DType::F32, {1, a.Hkv * a.D}, rng);
    const Tensor v = rnd(DType::F32, {1, a.Hkv * a.D}, rng);
    const Tensor k_cache = rnd(DType::F32, {a.Hkv, a.S, a.D}, rng);
    const Tensor v_cache = rnd(DType::F32, {a.Hkv, a.S, a.D}, rng);
    Params p = Prm()
                   .i("head_dim", a.D).i("n_heads", a.H).i("n_kv_heads", a.Hkv)
                   .i("kv_start", 4).i("kv_len", 4).f("scale", scale).f("theta", 10000.0)
                   .i("flags", 2 | 4).i("n_off", 2).i("N_tile", 2);
    const auto fused = [&](const Params& params, Tensor& out, Tensor& kc, Tensor& vc) {
      const std::vector<const Tensor*> in{&q, &k, &v, &k_cache, &v_cache};
      const std::vector<Tensor*> outs{&out, &kc, &vc};
      run_reference_op(Op::ROPE_KV_ATTENTION_TILE, params, in, outs,
                       StepState{5});  // position 5: in the block [4, 8)
    };
    Tensor own = filled(DType::F32, {2, width}, kNaN);
    Tensor kc_own = k_cache, vc_own = v_cache;
    fused(p, own, kc_own, vc_own);
    p.set_int("m_off", 1);
    Tensor stack = filled(DType::F32, {slabs * a.H, width}, kNaN);
    Tensor kc = k_cache, vc = v_cache;
    fused(p, stack, kc, vc);
    expect_slab(stack, own, 1 * a.H + 2);
    EXPECT_EQ(kc.to_floats(), kc_own.to_floats());
    EXPECT_EQ(vc.to_floats(), vc_own.to_floats());
    EXPECT_NE(kc.to_floats(), k_cache.to_floats());  // the new row was written
    Tensor own_again = filled(DType::F32, {2, width}, kNaN);
    expect_op_error([&] { fused(p, own_again, kc, vc); },
                    "param m_off 1 needs output 0 to be a stack of partials");
  }
}

TEST(OpAttention, RejectsBadHeadRanges) {
  std::mt19937 rng(45);
  const AttnCase a{4, 2, 4, 8};
  const auto [q, k, v] = random_inputs(a, rng);
  Tensor out = filled(DType::F32, {2, a.D}, kNaN);
  Params split_group = attn(a, 0, 8, 0.5);
  split_group.set_int("n_off", 1);  // half of a GQA group
  split_group.set_int("N_tile", 2);
  expect_op_error([&] { run(Op::ATTENTION_TILE, split_group, {&q, &k, &v}, {&out}); },
                  "whole GQA groups (multiples of 2)");
  Params lone = attn(a, 0, 8, 0.5);
  lone.set_int("n_off", 2);
  expect_op_error([&] { run(Op::ATTENTION_TILE, lone, {&q, &k, &v}, {&out}); },
                  "n_off and N_tile (a head range) come together");
  Params past = attn(a, 0, 8, 0.5);
  past.set_int("n_off", 4);
  past.set_int("N_tile", 2);
  expect_op_error([&] { run(Op::ATTENTION_TILE, past, {&q, &k, &v}, {&out}); },
                  "must lie in the 4 heads");
  const Tensor part = filled(DType::F32, {2, a.D + 2}, 0.0f);
  Tensor flat = filled(DType::F32, {1, a.H * a.D}, kNaN);
  expect_op_error([&] {
    run(Op::ATTENTION_COMBINE, Prm().i("n_off", 0).i("N_tile", 2), {&part, &part}, {&flat});
  }, "needs param head_dim");
  expect_op_error([&] {
    run(Op::ATTENTION_COMBINE, Prm().i("head_dim", a.D).i("n_off", 3).i("N_tile", 2),
        {&part, &part}, {&flat});
  }, "must lie in the 4 heads");
  Tensor heads_shaped = filled(DType::F32, {a.H, a.D}, kNaN);
  expect_op_error([&] {
    run(Op::ATTENTION_COMBINE, Prm().i("head_dim", a.D).i("n_off", 0).i("N_tile", 2),
        {&part, &part}, {&heads_shaped});
  }, "one-row output");
}

TEST(OpAttentionCombine, HandComputedAndAllEmpty) {
  // Shard A: one key with score 0 and value 2. Shard B: one key with score ln 3 and value 10.
  // Whole window: (1 * 2 + 3 * 10) / (1 + 3) = 8.
  const Tensor pa = Tensor::from_floats(DType::F32, {1, 3}, std::vector<float>{2, 0, 1});
  const Tensor pb = Tensor::from_floats(DType::F32, {1, 3}, std::vector<float>{10, float(std::log(3.0)), 1});
  Tensor out = Tensor::zeros(DType::F32, {1, 1});
  run(Op::ATTENTION_COMBINE, {}, {&pa, &pb}, {&out});  // head_dim, n_heads inferred from sizes
  EXPECT_NEAR(out.get(0), 8.0, 4 * ulp(DType::F32, 8.0));

  // Every shard empty: the head attended to nothing and is 0 (never NaN).
  const Tensor empty = Tensor::from_floats(DType::F32, {2, 4}, std::vector<float>{0, 0, -INFINITY, 0, 0, 0, -INFINITY, 0});
  Tensor out2 = filled(DType::BF16, {2, 2}, kNaN);
  run(Op::ATTENTION_COMBINE, Prm().i("head_dim", 2), {&empty, &empty, &empty}, {&out2});
  EXPECT_EQ(out2.to_floats(), std::vector<float>(4, 0.0f));

  // One empty shard among full ones carries no weight, whatever its m says.
  const Tensor junk_empty = Tensor::from_floats(DType::F32, {1, 3}, std::vector<float>{0, 100, 0});
  run(Op::ATTENTION_COMBINE, Prm().i("n_heads", 1), {&pa, &junk_empty, &pb}, {&out});
  EXPECT_NEAR(out.get(0), 8.0, 4 * ulp(DType::F32, 8.0));
}

// flags bit 1: the merge stays a partial. The hand case above as a tree: merging (A, B) into a
// partial gives acc = 2 e^(0 - ln 3) + 10 = 32 / 3, m = ln 3, l = 1 / 3 + 1 = 4 / 3 (weights
// relative to the larger m), and merging that with an empty shard finishes at 8 as before.
// A partial over shards that are all empty stays empty (acc 0, m -inf, l 0), never NaN.
TEST(OpAttentionCombine, PartialOutputMergesAgain) {
  const Tensor pa = Tensor::from_floats(DType::F32, {1, 3}, std::vector<float>{2, 0, 1});
  const Tensor pb = Tensor::from_floats(DType::F32, {1, 3}, std::vector<float>{10, float(std::log(3.0)), 1});
  Tensor mid = filled(DType::F32, {1, 3}, kNaN);
  run(Op::ATTENTION_COMBINE, Prm().i("head_dim", 1).i("flags", 2), {&pa, &pb}, {&mid});
  EXPECT_NEAR(mid.get(0), 32.0 / 3.0, 8 * ulp(DType::F32, 11.0));
  EXPECT_NEAR(mid.get(1), std::log(3.0), 4 * ulp(DType::F32, 1.1));
  EXPECT_NEAR(mid.get(2), 4.0 / 3.0, 4 * ulp(DType::F32, 1.3));
  const Tensor empty = Tensor::from_floats(DType::F32, {1, 3}, std::vector<float>{0, -INFINITY, 0});
  Tensor out = filled(DType::F32, {1, 1}, kNaN);
  run(Op::ATTENTION_COMBINE, Prm().i("head_dim", 1), {&mid, &empty}, {&out});
  EXPECT_NEAR(out.get(0), 8.0, 8 * ulp(DType::F32, 8.0));
  Tensor none = filled(DType::F32, {1, 3}, kNaN);
  run(Op::ATTENTION_COMBINE, Prm().i("head_dim", 1).i("flags", 2), {&empty, &empty}, {&none});
  EXPECT_EQ(none.get(0), 0.0);
  EXPECT_EQ(none.get(1), -INFINITY);
  EXPECT_EQ(none.get(2), 0.0);
}

TEST(OpAttentionCombine, RejectsBadPartialCombines) {
  const Tensor p = Tensor::zeros(DType::F32, {2, 6});
  Tensor part_out = Tensor::zeros(DType::F32, {2, 6});
  Tensor flat = Tensor::zeros(DType::F32, {2, 4});
  expect_op_error([&] { run(Op::ATTENTION_COMBINE, Prm().i("head_dim", 4).i("flags", 4), {&p, &p}, {&flat}); },
                  "knows only bit 1");
  expect_op_error([&] { run(Op::ATTENTION_COMBINE, Prm().i("flags", 2), {&p, &p}, {&part_out}); },
                  "needs param head_dim");
  expect_op_error([&] { run(Op::ATTENTION_COMBINE, Prm().i("head_dim", 4).i("flags", 2), {&p, &p}, {&flat}); },
                  "writes a partial");
  expect_op_error([&] {
    run(Op::ATTENTION_COMBINE, Prm().i("head_dim", 4).i("flags", 2).i("n_off", 0).i("N_tile", 1),
        {&p, &p}, {&part_out});
  }, "no head range");
}

TEST(OpAttentionCombine, RejectsInconsistentSizes) {
  const Tensor p = Tensor::zeros(DType::F32, {4, 6});
  const Tensor p_small = Tensor::zeros(DType::F32, {4, 5});
  Tensor out = Tensor::zeros(DType::F32, {4, 4});
  expect_op_error([&] { run(Op::ATTENTION_COMBINE, {}, {&p, &p_small}, {&out}); },
                  "ATTENTION_COMBINE: input 1 (partial) has 20 elements");
  Tensor out_bad = Tensor::zeros(DType::F32, {4, 3});
  expect_op_error([&] { run(Op::ATTENTION_COMBINE, Prm().i("head_dim", 4), {&p, &p}, {&out_bad}); },
                  "are not [n_heads, head_dim + 2] and [n_heads, head_dim]");
  expect_op_error([&] { run(Op::ATTENTION_COMBINE, {}, {&p}, {&out}); },
                  "ATTENTION_COMBINE: takes 2 to 8 inputs, got 1");
}

TEST(OpAttention, RejectsBadWindowsAndShapes) {
  const AttnCase a{4, 2, 8, 6};
  const Tensor q = Tensor::zeros(DType::F32, {4, 8});
  const Tensor k = Tensor::zeros(DType::F32, {2, 6, 8});
  Tensor out = Tensor::zeros(DType::F32, {4, 8});
  expect_op_error([&] { run(Op::ATTENTION_TILE, attn(a, 4, 3, 0.3), {&q, &k, &k}, {&out}); },
                  "ATTENTION_TILE: kv_start 4 + kv_len 3 exceeds the cache's 6 rows");
  expect_op_error([&] { run(Op::ATTENTION_TILE, attn({4, 3, 8, 6}, 0, 3, 0.3), {&q, &k, &k}, {&out}); },
                  "param n_heads 4 must be a positive multiple of n_kv_heads 3");
  const Tensor k_bad = Tensor::zeros(DType::F32, {1, 6, 8});
  expect_op_error([&] { run(Op::ATTENTION_TILE, attn(a, 0, 3, 0.3), {&q, &k_bad, &k_bad}, {&out}); },
                  "input 1 (k cache) has shape [1,6,8], expected [2, max_seq, 8]");
  const Tensor v_bad = Tensor::zeros(DType::F32, {2, 5, 8});
  expect_op_error([&] { run(Op::ATTENTION_TILE, attn(a, 0, 3, 0.3), {&q, &k, &v_bad}, {&out}); },
                  "input 2 (v cache) has shape [2,5,8], expected [2,6,8]");
  const Tensor q_bad = Tensor::zeros(DType::F32, {2, 8});
  expect_op_error([&] { run(Op::ATTENTION_TILE, attn(a, 0, 3, 0.3), {&q_bad, &k, &k}, {&out}); },
                  "input 0 (q) has 16 elements");
  expect_op_error([&] { run(Op::ATTENTION_TILE, attn(a, 0, 3, 0.3, 2), {&q, &k, &k}, {&out}); },
                  "output 0 has 32 elements (shape [4,8]), expected 40 (n_heads x (head_dim + 2) for a partial)");
  expect_op_error([&] { run(Op::ATTENTION_TILE, attn(a, 0, 3, 0.3, 8), {&q, &k, &k}, {&out}); },
                  "param flags 8 has unknown bits");
  // Bit 2 (runtime window) needs the step state, which this call does not give.
  expect_op_error([&] { run(Op::ATTENTION_TILE, attn(a, 0, 3, 0.3, 4), {&q, &k, &k}, {&out}); },
                  "reads the step's position, but none was given");
  expect_op_error([&] { run(Op::ATTENTION_TILE, attn(a, -1, 3, 0.3), {&q, &k, &k}, {&out}); },
                  "param kv_start must be >= 0, got -1");
  Params no_scale = attn(a, 0, 3, 0.3);
  Params p2;
  for (const auto& [key, val] : no_scale.items())
    if (key != "scale") p2.set(key, val);
  expect_op_error([&] { run(Op::ATTENTION_TILE, p2, {&q, &k, &k}, {&out}); },
                  "ATTENTION_TILE: missing required param 'scale'");
}

TEST(OpKvAppend, ThenAttentionSeesTheNewRow) {
  std::mt19937 rng(51);
  const AttnCase a{4, 2, 4, 8};
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(name_of(dt)));
    const int64_t pos = 3;
    Tensor kc = Tensor::zeros(dt, {a.Hkv, a.S, a.D}), vc = Tensor::zeros(dt, {a.Hkv, a.S, a.D});
    // Logical rows [t][g][d]; cache element (g, t, d) at (g * S + t) * D + d.
    const Tensor old_k = rnd(dt, {pos, a.Hkv, a.D}, rng), old_v = rnd(dt, {pos, a.Hkv, a.D}, rng);
    const auto at = [&](int64_t t, int64_t g, int64_t d) { return (g * a.S + t) * a.D + d; };
    for (int64_t i = 0; i < old_k.numel(); ++i) {
      const int64_t t = i / (a.Hkv * a.D), g = i / a.D % a.Hkv, d = i % a.D;
      kc.set(at(t, g, d), old_k.get(i));
      vc.set(at(t, g, d), old_v.get(i));
    }
    const Tensor new_k = rnd(dt, {1, a.Hkv, a.D}, rng);  // roped k: head-shaped
    const Tensor new_v = rnd(dt, {1, a.Hkv * a.D}, rng);  // v: the flat projection
    run(Op::KV_APPEND, Prm().i("pos", pos), {&new_k, &kc}, {&kc});  // output aliases the cache
    run(Op::KV_APPEND, Prm().i("pos", pos), {&new_v, &vc}, {&vc});
    const int64_t row = a.Hkv * a.D;
    for (int64_t i = 0; i < a.S * row; ++i) {  // logical element i = (r, g, d)
      const int64_t r = i / row, g = i / a.D % a.Hkv, d = i % a.D;
      const float want_k = r < pos ? old_k.get(i) : r == pos ? new_k.get(i - pos * row) : 0.0f;
      const float want_v = r < pos ? old_v.get(i) : r == pos ? new_v.get(i - pos * row) : 0.0f;
      ASSERT_EQ(kc.get(at(r, g, d)), want_k) << i;
      ASSERT_EQ(vc.get(at(r, g, d)), want_v) << i;
    }
    const Tensor q = rnd(dt, {a.H, a.D}, rng);
    const double scale = double(float(0.5));
    Tensor out = Tensor::zeros(dt, {a.H, a.D});
    run(Op::ATTENTION_TILE, attn(a, 0, pos + 1, 0.5), {&q, &kc, &vc}, {&out});
    const auto with_new = naive_attention(vals(q), vals(kc), vals(vc), a, 0, pos + 1, scale);
    expect_close(out, with_new, 1.0, 1e-10);
    // And the new row matters: without it the answer is different.
    const auto without_new = naive_attention(vals(q), vals(kc), vals(vc), a, 0, pos, scale);
    double diff = 0;
    for (size_t i = 0; i < with_new.size(); ++i) diff = std::max(diff, std::fabs(with_new[i] - without_new[i]));
    EXPECT_GT(diff, 1e-3);
  }
}

TEST(OpKvAppend, ConvertsRowsAndRejectsOverflow) {
  // Two F32 rows into a BF16 cache at 5..6; a distinct output receives the whole updated cache.
  std::mt19937 rng(52);
  // The cache is [2 KV heads, 8 positions, 2 dims]; fresh is [2 rows, 2 KV heads, 2 dims].
  const Tensor cache = rnd(DType::BF16, {2, 8, 2}, rng);
  const Tensor fresh = rnd(DType::F32, {2, 2, 2}, rng);
  Tensor out = filled(DType::BF16, {2, 8, 2}, kNaN);
  run(Op::KV_APPEND, Prm().i("pos", 5), {&fresh, &cache}, {&out});
  for (int64_t i = 0; i < 32; ++i) {
    const int64_t g = i / 16, t = i / 2 % 8, d = i % 2;
    const float want = (t == 5 || t == 6)
                           ? amk::round_to_dtype(DType::BF16, fresh.get(((t - 5) * 2 + g) * 2 + d))
                           : cache.get(i);
    ASSERT_EQ(out.get(i), want) << i;
  }
  Tensor kc = Tensor::zeros(DType::F32, {2, 8, 2});
  expect_op_error([&] { run(Op::KV_APPEND, Prm().i("pos", 7), {&fresh, &kc}, {&kc}); },
                  "KV_APPEND: pos 7 + 2 new rows exceeds the cache's max_seq 8");
  expect_op_error([&] { run(Op::KV_APPEND, Prm().i("pos", -1), {&fresh, &kc}, {&kc}); },
                  "KV_APPEND: pos -1 + 2 new rows exceeds");
  const Tensor odd = Tensor::zeros(DType::F32, {6});
  expect_op_error([&] { run(Op::KV_APPEND, Prm().i("pos", 0), {&odd, &kc}, {&kc}); },
                  "input 0 (new) has 6 elements (shape [6]), expected a positive multiple of n_kv_heads * head_dim = 4");
  Tensor other = Tensor::zeros(DType::F32, {8, 4});
  expect_op_error([&] { run(Op::KV_APPEND, Prm().i("pos", 0), {&fresh, &kc}, {&other}); },
                  "output 0 (F32 [8,4]) must be the cache, input 1 (F32 [2,8,2])");
  const Tensor flat_cache = Tensor::zeros(DType::F32, {8, 4});
  expect_op_error([&] { run(Op::KV_APPEND, Prm().i("pos", 0), {&fresh, &flat_cache}, {&other}); },
                  "input 1 (cache) must have rank 3");
}

// ==== ROPE ===================================================================================
// The fp32 angle of reference.py: 1 / theta^(i / half) in float32, times float32(pos).
double angle_fp32(int64_t pos, int64_t i, int64_t head_dim, float theta) {
  const float inv_freq = 1.0f / powf(theta, float(2 * i) / float(head_dim));
  return double(float(pos) * inv_freq);
}

// Each pair (x_i, x_{i+half}) multiplied by the rotation matrix [[c, -s], [s, c]].
std::vector<double> rope_ref(const std::vector<double>& x, const std::vector<int64_t>& pos,
                             int64_t heads, int64_t D, float theta) {
  std::vector<double> out(x.size());
  const int64_t half = D / 2;
  for (size_t s = 0; s < pos.size(); ++s)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double t = angle_fp32(pos[s], i, D, theta);
        const double R[2][2] = {{std::cos(t), -std::sin(t)}, {std::sin(t), std::cos(t)}};
        const size_t base = (s * size_t(heads) + size_t(h)) * size_t(D);
        const double v[2] = {x[base + size_t(i)], x[base + size_t(i + half)]};
        out[base + size_t(i)] = R[0][0] * v[0] + R[0][1] * v[1];
        out[base + size_t(i + half)] = R[1][0] * v[0] + R[1][1] * v[1];
      }
  return out;
}

TEST(OpRope, HandComputed) {
  // head_dim 4: inv_freq = [1, 1/100]. At pos 1, (x0, x2) = (1, 3) turns by 1 rad and
  // (x1, x3) = (2, 4) by 0.01 rad.
  const Tensor x = Tensor::from_floats(DType::F32, {1, 4}, std::vector<float>{1, 2, 3, 4});
  const Tensor pos = Tensor::from_ints(DType::I32, {1}, std::vector<int64_t>{1});
  Tensor out = Tensor::zeros(DType::F32, {1, 4});
  run(Op::ROPE, Prm().i("head_dim", 4).f("theta", 10000.0), {&x, &pos}, {&out});
  const std::vector<float> want = {-1.98411065f, 1.95990067f, 2.46237790f, 4.01979967f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out.get(i), want[size_t(i)], 2e-6) << i;
}

TEST(OpRope, MatchesRotationMatricesForRank2AndRank3) {
  // The angle table is fp32 by convention; the test's powf and the op's pow may still differ by
  // an ulp of inv_freq, which moves the angle by up to pos * 2^-24 rad: allowed below.
  std::mt19937 rng(61);
  const int64_t H = 3, D = 8;
  for (float theta : {10000.0f, 500000.0f}) {
    for (DType dt : kFloatTypes) {
      SCOPED_TRACE(std::string(name_of(dt)) + " theta " + std::to_string(theta));
      const std::vector<int64_t> pos3 = {0, 1, 7, 100};
      const Tensor x3 = rnd(dt, {4, H, D}, rng);
      const Tensor p3 = Tensor::from_ints(DType::I32, {4}, pos3);
      Tensor out3 = filled(dt, {4, H, D}, kNaN);
      run(Op::ROPE, Prm().i("head_dim", D).f("theta", theta), {&x3, &p3}, {&out3});
      expect_close(out3, rope_ref(vals(x3), pos3, H, D, theta), 1.0, 100 * 0x1p-23);

      const Tensor x2 = rnd(dt, {H, D}, rng);
      const Tensor p2 = Tensor::from_ints(DType::I32, {1}, std::vector<int64_t>{13});
      Tensor out2 = filled(dt, {H, D}, kNaN);
      run(Op::ROPE, Prm().i("head_dim", D).f("theta", theta), {&x2, &p2}, {&out2});
      expect_close(out2, rope_ref(vals(x2), {13}, H, D, theta), 1.0, 13 * 0x1p-23);

      // Position 0 is the identity, bit for bit.
      const Tensor zero = Tensor::from_ints(DType::I32, {1}, std::vector<int64_t>{0});
      run(Op::ROPE, Prm().i("head_dim", D).f("theta", theta), {&x2, &zero}, {&out2});
      EXPECT_EQ(out2.bytes, x2.bytes);
    }
  }
}

// A GEMV's flat row [1, n_heads * head_dim] rotates exactly as the same elements shaped
// [n_heads, head_dim] (the lowering feeds q and k to RoPE without a reshaping COPY).
TEST(OpRope, AFlatRowOfWholeHeadsRotatesLikeHeads) {
  std::mt19937 rng(63);
  const Tensor heads = rnd(DType::F32, {3, 8}, rng);
  Tensor flat = Tensor::zeros(DType::F32, {1, 24});
  flat.bytes = heads.bytes;
  const Tensor pos = Tensor::from_ints(DType::I32, {1}, std::vector<int64_t>{29});
  Tensor a = filled(DType::F32, {3, 8}, kNaN), b = filled(DType::F32, {3, 8}, kNaN);
  run(Op::ROPE, Prm().i("head_dim", 8).f("theta", 1e4), {&heads, &pos}, {&a});
  run(Op::ROPE, Prm().i("head_dim", 8).f("theta", 1e4), {&flat, &pos}, {&b});
  EXPECT_EQ(a.bytes, b.bytes);
  const Tensor partial_head = Tensor::zeros(DType::F32, {1, 20});  // 2.5 heads
  Tensor out = Tensor::zeros(DType::F32, {1, 20});
  expect_op_error([&] { run(Op::ROPE, Prm().i("head_dim", 8).f("theta", 1e4), {&partial_head, &pos}, {&out}); },
                  "or be a flat row of whole heads");
}

TEST(OpRope, PositionIsConvertedToFloat32LikeReference) {
  // 2^24 + 1 is not a float32: reference.py rotates it exactly as 2^24.
  std::mt19937 rng(62);
  const Tensor x = rnd(DType::F32, {2, 8}, rng);
  const Tensor a = Tensor::from_ints(DType::I32, {1}, std::vector<int64_t>{16777217});
  const Tensor b = Tensor::from_ints(DType::I32, {1}, std::vector<int64_t>{16777216});
  Tensor ya = Tensor::zeros(DType::F32, {2, 8}), yb = Tensor::zeros(DType::F32, {2, 8});
  run(Op::ROPE, Prm().i("head_dim", 8).f("theta", 10000.0), {&x, &a}, {&ya});
  run(Op::ROPE, Prm().i("head_dim", 8).f("theta", 10000.0), {&x, &b}, {&yb});
  EXPECT_EQ(ya.bytes, yb.bytes);
}

TEST(OpRope, RejectsBadShapes) {
  const Tensor x = Tensor::zeros(DType::F32, {4, 2, 8});
  const Tensor p3 = Tensor::from_ints(DType::I32, {3}, std::vector<int64_t>{0, 1, 2});
  Tensor out = Tensor::zeros(DType::F32, {4, 2, 8});
  expect_op_error([&] { run(Op::ROPE, Prm().i("head_dim", 8).f("theta", 1e4), {&x, &p3}, {&out}); },
                  "ROPE: input 1 (positions) has 3 elements");
  expect_op_error([&] { run(Op::ROPE, Prm().i("head_dim", 7).f("theta", 1e4), {&x, &p3}, {&out}); },
                  "param head_dim must be even and >= 2, got 7");
  expect_op_error([&] { run(Op::ROPE, Prm().i("head_dim", 4).f("theta", 1e4), {&x, &p3}, {&out}); },
                  "its last dimension must equal param head_dim 4");
  const Tensor pf = Tensor::from_floats(DType::F32, {4}, std::vector<float>{0, 1, 2, 3});
  expect_op_error([&] { run(Op::ROPE, Prm().i("head_dim", 8).f("theta", 1e4), {&x, &pf}, {&out}); },
                  "input 1 (positions) must have an integer dtype, got F32");
  const Tensor p4 = Tensor::from_ints(DType::I32, {4}, std::vector<int64_t>{0, 1, 2, 3});
  expect_op_error([&] { run(Op::ROPE, Prm().i("head_dim", 8).f("theta", 0.0), {&x, &p4}, {&out}); },
                  "param theta must be > 0");
  const Tensor x4 = Tensor::zeros(DType::F32, {1, 4, 2, 8});
  expect_op_error([&] { run(Op::ROPE, Prm().i("head_dim", 8).f("theta", 1e4), {&x4, &p4}, {&out}); },
                  "input 0 (x) must be [n_heads, head_dim] or [S, n_heads, head_dim]");
}

// ==== ROPE_FREQ ==============================================================================
// The same rotation with the table given: angle = float32(pos) * inv_freq[i] in float32.
std::vector<double> rope_freq_ref(const std::vector<double>& x, const std::vector<int64_t>& pos,
                                  int64_t heads, const std::vector<float>& inv_freq) {
  std::vector<double> out(x.size());
  const auto half = int64_t(inv_freq.size()), D = 2 * half;
  for (size_t s = 0; s < pos.size(); ++s)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double t = double(float(pos[s]) * inv_freq[size_t(i)]);
        const size_t base = (s * size_t(heads) + size_t(h)) * size_t(D);
        const double a = x[base + size_t(i)], b = x[base + size_t(i + half)];
        out[base + size_t(i)] = std::cos(t) * a - std::sin(t) * b;
        out[base + size_t(i + half)] = std::sin(t) * a + std::cos(t) * b;
      }
  return out;
}

TEST(OpRopeFreq, MatchesRotationWithAnyTable) {
  std::mt19937 rng(63);
  const int64_t H = 2, D = 8;
  // A llama3-like table: high frequencies kept, low ones slowed down, one in between.
  const std::vector<float> table = {1.0f, 0.177827941f, 0.00316227f / 8, 1e-4f / 32};
  const std::vector<int64_t> pos = {0, 3, 1000, 131071};
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(name_of(dt)));
    const Tensor x = rnd(dt, {4, H, D}, rng);
    const Tensor p = Tensor::from_ints(DType::I32, {4}, pos);
    const Tensor inv = Tensor::from_floats(DType::F32, {D / 2}, table);
    Tensor out = filled(dt, {4, H, D}, kNaN);
    run(Op::ROPE_FREQ, Prm().i("head_dim", D), {&x, &p, &inv}, {&out});
    expect_close(out, rope_freq_ref(vals(x), pos, H, table), 1.0, 1e-12);
  }
}

TEST(OpRopeFreq, WithTheDefaultTableEqualsRope) {
  std::mt19937 rng(64);
  const int64_t D = 16;
  for (float theta : {10000.0f, 500000.0f}) {
    std::vector<float> table;
    for (int64_t i = 0; i < D / 2; ++i)  // reference.py's fp32 table, written out here
      table.push_back(1.0f / float(std::pow(double(theta), double(float(i) / float(D / 2)))));
    const Tensor x = rnd(DType::F32, {3, D}, rng);
    const Tensor p = Tensor::from_ints(DType::I32, {1}, std::vector<int64_t>{4097});
    const Tensor inv = Tensor::from_floats(DType::F32, {D / 2}, table);
    Tensor a = Tensor::zeros(DType::F32, {3, D}), b = Tensor::zeros(DType::F32, {3, D});
    run(Op::ROPE, Prm().i("head_dim", D).f("theta", theta), {&x, &p}, {&a});
    run(Op::ROPE_FREQ, Prm().i("head_dim", D), {&x, &p, &inv}, {&b});
    EXPECT_EQ(a.bytes, b.bytes) << "theta " << theta;
  }
}

TEST(OpRopeFreq, RejectsBadTables) {
  const Tensor x = Tensor::zeros(DType::F32, {2, 8});
  const Tensor p = Tensor::from_ints(DType::I32, {1}, std::vector<int64_t>{1});
  Tensor out = Tensor::zeros(DType::F32, {2, 8});
  const Tensor short_table = Tensor::zeros(DType::F32, {3});
  expect_op_error([&] { run(Op::ROPE_FREQ, Prm().i("head_dim", 8), {&x, &p, &short_table}, {&out}); },
                  "ROPE_FREQ: input 2 (inv_freq) has 3 elements");
  const Tensor int_table = Tensor::zeros(DType::I32, {4});
  expect_op_error([&] { run(Op::ROPE_FREQ, Prm().i("head_dim", 8), {&x, &p, &int_table}, {&out}); },
                  "input 2 (inv_freq)");
  const std::vector<float> with_inf = {1, std::numeric_limits<float>::infinity(), 0, 0};
  const Tensor inf_table = Tensor::from_floats(DType::F32, {4}, with_inf);
  expect_op_error([&] { run(Op::ROPE_FREQ, Prm().i("head_dim", 8), {&x, &p, &inf_table}, {&out}); },
                  "element 1 is not finite");
  const Tensor table = Tensor::zeros(DType::F32, {4});
  expect_op_error([&] { run(Op::ROPE_FREQ, Prm(), {&x, &p, &table}, {&out}); }, "head_dim");
  expect_op_error([&] { run(Op::ROPE_FREQ, Prm().i("head_dim", 8), {&x, &p}, {&out}); },
                  "ROPE_FREQ");
}

// ==== elementwise ============================================================================
TEST(OpActivations, HandComputed) {
  const Tensor g = Tensor::from_floats(DType::F32, {2}, std::vector<float>{1, -2});
  const Tensor up = Tensor::from_floats(DType::F32, {2}, std::vector<float>{2, 0.5f});
  Tensor out = Tensor::zeros(DType::F32, {2});
  run(Op::SILU_MUL, {}, {&g, &up}, {&out});
  expect_close(out, {1.4621171572600098, -0.11920292202211755});
  const Tensor x = Tensor::from_floats(DType::F32, {4}, std::vector<float>{1, -1, 2, -3});
  Tensor y = Tensor::zeros(DType::F32, {4});
  run(Op::GELU, {}, {&x}, {&y});  // the exact erf form (tanh would give 0.841192 at 1)
  expect_close(y, {0.8413447460685429, -0.15865525393145707, 1.9544997361036416, -0.00404969409489031});
}

TEST(OpActivations, MatchIndependentIdentities) {
  std::mt19937 rng(71);
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(name_of(dt)));
    const Tensor g = rnd(dt, {3, 7}, rng, -6, 6);
    const Tensor up = rnd(dt, {21}, rng, -2, 2);
    Tensor out = filled(dt, {21}, kNaN);
    run(Op::SILU_MUL, {}, {&g, &up}, {&out});
    std::vector<double> want;
    const auto gv = vals(g), uv = vals(up);
    // sigmoid(x) = (1 + tanh(x / 2)) / 2
    for (size_t i = 0; i < gv.size(); ++i) want.push_back(gv[i] * 0.5 * (1 + std::tanh(gv[i] / 2)) * uv[i]);
    expect_close(out, want, 1.0, 1e-14);

    Tensor y = filled(dt, {3, 7}, kNaN);
    run(Op::GELU, {}, {&g}, {&y});
    want.clear();
    // x * Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2
    for (double v : gv) want.push_back(v * 0.5 * std::erfc(-v / std::sqrt(2.0)));
    expect_close(y, want, 1.0, 1e-14);
  }
}

TEST(OpArithmetic, AddMulAllreduce) {
  std::mt19937 rng(72);
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(name_of(dt)));
    const Tensor a = rnd(dt, {2, 5}, rng), b = rnd(dt, {10}, rng), c = rnd(DType::F32, {10}, rng);
    const auto av = vals(a), bv = vals(b), cv = vals(c);
    std::vector<double> sum, prod, scaled, all;
    for (size_t i = 0; i < 10; ++i) {
      sum.push_back(av[i] + bv[i]);
      prod.push_back(av[i] * bv[i]);
      scaled.push_back(av[i] * double(float(0.3)));
      all.push_back(cv[i] + bv[i] + av[i]);
    }
    Tensor out = filled(dt, {10}, kNaN);
    run(Op::ADD, {}, {&a, &b}, {&out});
    expect_close(out, sum);
    run(Op::MUL, {}, {&a, &b}, {&out});
    expect_close(out, prod);
    run(Op::MUL, Prm().f("scale", 0.3), {&a}, {&out});
    expect_close(out, scaled);
    run(Op::MUL, {}, {&a}, {&out});  // no scale: 1
    expect_close(out, av, 0.0);
    run(Op::ALLREDUCE_SHARD, {}, {&c, &b, &a}, {&out});
    expect_close(out, all);
    run(Op::ALLREDUCE_SHARD, {}, {&a}, {&out});
    expect_close(out, av, 0.0);
    // In place: the output is input 0.
    Tensor acc = a;
    run(Op::ADD, {}, {&acc, &b}, {&acc});
    expect_close(acc, sum);
  }
  const Tensor x = Tensor::zeros(DType::F32, {8});
  std::vector<const Tensor*> nine(9, &x);
  Tensor out = Tensor::zeros(DType::F32, {8});
  expect_op_error([&] { run(Op::ALLREDUCE_SHARD, {}, nine, {&out}); },
                  "ALLREDUCE_SHARD: takes 1 to 8 inputs, got 9");
  const Tensor y = Tensor::zeros(DType::F32, {7});
  expect_op_error([&] { run(Op::ADD, {}, {&x, &y}, {&out}); },
                  "ADD: input 1 has 7 elements (shape [7]), expected 8 (the size of input 0)");
  const Tensor i = Tensor::zeros(DType::I32, {8});
  expect_op_error([&] { run(Op::SILU_MUL, {}, {&x, &i}, {&out}); },
                  "SILU_MUL: input 1 (up) must have a float dtype, got I32");
}

// A ranged shard sum (IR 0.12.0) sums and writes elements [n_off, n_off + N_tile) only, in input
// order, and leaves the rest of the output as it was; two ranges fill the vector the whole sum
// fills.
TEST(OpArithmetic, RangedAllreduceSumsItsSliceOnly) {
  std::mt19937 rng(73);
  const Tensor a = rnd(DType::F32, {1, 10}, rng), b = rnd(DType::F32, {10}, rng),
               c = rnd(DType::BF16, {10}, rng);
  const auto av = vals(a), bv = vals(b), cv = vals(c);
  Tensor out = filled(DType::F32, {1, 10}, 7.5);
  run(Op::ALLREDUCE_SHARD, Prm().i("n_off", 3).i("N_tile", 4), {&a, &b, &c}, {&out});
  std::vector<double> want(10, 7.5);
  for (size_t i = 3; i < 7; ++i) want[i] = (av[i] + bv[i]) + cv[i];
  expect_close(out, want, 0.5);  // summed in double, rounded once
  Tensor whole = filled(DType::F32, {1, 10}, kNaN), pieces = filled(DType::F32, {1, 10}, kNaN);
  run(Op::ALLREDUCE_SHARD, {}, {&a, &b, &c}, {&whole});
  run(Op::ALLREDUCE_SHARD, Prm().i("n_off", 0).i("N_tile", 6), {&a, &b, &c}, {&pieces});
  run(Op::ALLREDUCE_SHARD, Prm().i("n_off", 6).i("N_tile", 4), {&a, &b, &c}, {&pieces});
  expect_close(pieces, vals(whole), 0.0);
  for (const auto& [off, len] : {std::pair{7, 4}, std::pair{-1, 2}, std::pair{0, 0}})
    expect_op_error(
        [&] {
          run(Op::ALLREDUCE_SHARD, Prm().i("n_off", off).i("N_tile", len), {&a, &b}, {&out});
        },
        "ALLREDUCE_SHARD: range n_off " + std::to_string(off) + ", N_tile " +
            std::to_string(len) + " must lie in the shards' 10 elements");
}

// ==== SOFTMAX ================================================================================
TEST(OpSoftmax, EveryDimAndLargeLogits) {
  std::mt19937 rng(81);
  const std::vector<int64_t> shape = {2, 3, 4};
  for (DType dt : kFloatTypes) {
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      SCOPED_TRACE(std::string(name_of(dt)) + " dim " + std::to_string(dim));
      const Tensor x = rnd(dt, shape, rng, -3, 3);
      Tensor out = filled(dt, shape, kNaN);
      Params p;
      if (dim != -1) p.set_int("dim", dim);
      run(Op::SOFTMAX, p, {&x}, {&out});
      const auto xv = vals(x);
      const int64_t d = dim < 0 ? dim + 3 : dim;
      std::vector<double> want(xv.size());
      for (int64_t i0 = 0; i0 < 2; ++i0)
        for (int64_t i1 = 0; i1 < 3; ++i1)
          for (int64_t i2 = 0; i2 < 4; ++i2) {
            int64_t idx[3] = {i0, i1, i2};
            const auto flat = [&] { return (idx[0] * 3 + idx[1]) * 4 + idx[2]; };
            const int64_t me = flat();
            double denom = 0;
            for (idx[d] = 0; idx[d] < shape[size_t(d)]; ++idx[d]) denom += std::exp(xv[size_t(flat())]);
            want[size_t(me)] = std::exp(xv[size_t(me)]) / denom;
          }
      expect_close(out, want, 1.0, 1e-15);
    }
  }
  const Tensor big = Tensor::from_floats(DType::F32, {3}, std::vector<float>{1000, 1001, 1002});
  Tensor out = Tensor::zeros(DType::F32, {3});
  run(Op::SOFTMAX, {}, {&big}, {&out});  // exp(1000) overflows; the max shift must not
  expect_close(out, {0.09003057317038046, 0.24472847105479764, 0.6652409557748219});
  expect_op_error([&] { run(Op::SOFTMAX, Prm().i("dim", 1), {&big}, {&out}); },
                  "SOFTMAX: param dim 1 is out of range for input 0 (x) of shape [3]");
}

// ==== SAMPLE_ARGMAX ==========================================================================
// Partial argmaxes over slices, then a reduce of their (value, index) pairs: the whole-row
// argmax, ties (first index) and NaN (first NaN) included, whatever the slicing.
TEST(OpSampleArgmax, PartialsAndReduceEqualTheWholeRow) {
  std::mt19937 rng(92);
  for (int trial = 0; trial < 6; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    Tensor l = rnd(DType::F32, {1, 37}, rng, -3, 3);
    if (trial >= 1) l.set(5, 9.0f), l.set(30, 9.0f);  // a tie across slices: 5 wins
    if (trial >= 3) l.set(21, kNaN), l.set(33, kNaN);  // the first NaN wins
    Tensor whole = Tensor::zeros(DType::I32, {1});
    run(Op::SAMPLE_ARGMAX, {}, {&l}, {&whole});
    for (int64_t n : {1, 4, 8, 13, 36, 37}) {
      const int64_t parts = (37 + n - 1) / n;
      Tensor pairs = filled(DType::F32, {parts, 2}, kNaN);
      for (int64_t k = 0; k < parts; ++k)
        run(Op::SAMPLE_ARGMAX, Prm().i("n_off", k * n).i("N_tile", std::min(n, 37 - k * n)).i("m_off", k),
            {&l}, {&pairs});
      Tensor tok = Tensor::zeros(DType::I32, {1});
      run(Op::SAMPLE_ARGMAX, Prm().i("flags", 1), {&pairs}, {&tok});
      EXPECT_EQ(tok.get_int(0), whole.get_int(0)) << "slices of " << n;
    }
  }
  const Tensor l = Tensor::zeros(DType::F32, {1, 8});
  Tensor pairs = Tensor::zeros(DType::F32, {2, 2});
  expect_op_error([&] { run(Op::SAMPLE_ARGMAX, Prm().i("n_off", 6).i("N_tile", 4).i("m_off", 0), {&l}, {&pairs}); },
                  "must lie in the 8 logits");
  expect_op_error([&] { run(Op::SAMPLE_ARGMAX, Prm().i("n_off", 0).i("N_tile", 4).i("m_off", 2), {&l}, {&pairs}); },
                  "with row m_off 2");
  expect_op_error([&] { run(Op::SAMPLE_ARGMAX, Prm().i("n_off", 0).i("N_tile", 4), {&l}, {&pairs}); },
                  "needs all of n_off, N_tile and m_off");
  Tensor tok = Tensor::zeros(DType::I32, {1});
  const Tensor bad = Tensor::from_floats(DType::F32, {1, 2}, std::vector<float>{1.0f, 2.5f});
  expect_op_error([&] { run(Op::SAMPLE_ARGMAX, Prm().i("flags", 1), {&bad}, {&tok}); },
                  "not a logit index");
  expect_op_error([&] { run(Op::SAMPLE_ARGMAX, Prm().i("flags", 4), {&l}, {&tok}); },
                  "has unknown bits");
  expect_op_error([&] { run(Op::SAMPLE_ARGMAX, Prm().i("flags", 2), {&l}, {&tok}); },
                  "3 inputs, got 1");
}

// Sampling (flags bit 1): the token is sample_token() of the logits with the packed settings at
// draw index draw_offset + the step position, from the whole row or after the partials' pairs.
TEST(OpSampleArgmax, SamplingDrawsTheSamplersTokenAtOffsetPlusPosition) {
  std::mt19937 rng(7);
  const Tensor l = rnd(DType::F32, {1, 61}, rng, -2, 2);
  const std::vector<float> row = l.to_floats();
  Tensor pairs = Tensor::zeros(DType::F32, {2, 2});
  run(Op::SAMPLE_ARGMAX, Prm().i("n_off", 0).i("N_tile", 32).i("m_off", 0), {&l}, {&pairs});
  run(Op::SAMPLE_ARGMAX, Prm().i("n_off", 32).i("N_tile", 29).i("m_off", 1), {&l}, {&pairs});
  const auto settings = [](const SamplingParams& s, uint64_t offset) {
    const PackedSampling p = pack_sampling(s, offset);
    return std::pair{amk::SamplingBuffers::floats_tensor(p), amk::SamplingBuffers::ints_tensor(p)};
  };
  const auto draw = [&](const Tensor& f, const Tensor& i, bool reduce, std::optional<int64_t> pos) {
    Tensor tok = Tensor::zeros(DType::I32, {1});
    std::vector<const Tensor*> in{&l, &f, &i};
    if (reduce) in.insert(in.begin(), &pairs);
    Tensor* out[] = {&tok};
    run_reference_op(Op::SAMPLE_ARGMAX, Prm().i("flags", reduce ? 3 : 2), in, out, StepState{pos});
    return tok.get_int(0);
  };
  int differing = 0;
  for (const SamplingParams& s : {SamplingParams{1.0, 0, 1.0, 0.0, 3}, SamplingParams{0.5, 7, 0.75, 0.0, 99},
                                  SamplingParams{2.0, 0, 0.9, 0.125, ~0ull}}) {
    for (const uint64_t offset : {uint64_t{0}, uint64_t{1} << 40, ~uint64_t{0}}) {
      const auto [f, i] = settings(s, offset);
      for (const int64_t pos : {0, 5, 31}) {
        const int64_t expected = sample_token(row, s, offset + uint64_t(pos));
        EXPECT_EQ(draw(f, i, false, pos), expected);
        EXPECT_EQ(draw(f, i, true, pos), expected);
        differing += expected != greedy_token(row);
      }
    }
  }
  EXPECT_GT(differing, 5) << "the draws were the argmax nearly every time";
  const auto [gf, gi] = settings(SamplingParams{}, 0);
  EXPECT_EQ(draw(gf, gi, false, std::nullopt), greedy_token(row)) << "temperature 0 needs no position";
  EXPECT_EQ(draw(gf, gi, true, std::nullopt), greedy_token(row));

  const auto [f, i] = settings(SamplingParams{1.0, 0, 1.0, 0.0, 3}, 0);
  expect_op_error([&] { draw(f, i, false, std::nullopt); }, "reads the step's position");
  const auto [bf, bi] = settings(SamplingParams{1.0, 0, 1.0, 0.0, 3}, 0);
  Tensor bad_f = bf;
  bad_f.set(1, 1.5f);
  expect_op_error([&] { draw(bad_f, bi, false, 0); }, "top-p must be in (0, 1]");
  Tensor tok = Tensor::zeros(DType::I32, {1});
  for (const float poison : {kNaN, INFINITY}) {
    Tensor p = l;
    p.set(40, poison);
    const Tensor* in[] = {&p, &f, &i};
    Tensor* out[] = {&tok};
    expect_op_error([&] { run_reference_op(Op::SAMPLE_ARGMAX, Prm().i("flags", 2), in, out, StepState{0}); },
                    "no token is drawn from non-finite logits");
  }
  const Tensor dead = filled(DType::F32, {1, 8}, -INFINITY);
  const Tensor* in[] = {&dead, &f, &i};
  Tensor* out[] = {&tok};
  expect_op_error([&] { run_reference_op(Op::SAMPLE_ARGMAX, Prm().i("flags", 2), in, out, StepState{0}); },
                  "every logit is -inf");
  expect_op_error([&] { run(Op::SAMPLE_ARGMAX, Prm().i("flags", 2), {&l, &i, &f}, {&tok}); },
                  "the sampling floats must be F32");
  expect_op_error([&] { run(Op::SAMPLE_ARGMAX, Prm().i("flags", 2).i("N_tile", 4), {&l, &f, &i}, {&tok}); },
                  "takes no range");
}

TEST(OpSampleArgmax, FirstMaxNanAndRows) {
  const Tensor logits = Tensor::from_floats(
      DType::F32, {4, 4},
      std::vector<float>{1, 3, 3, 2,  1, kNaN, 5, kNaN,  -INFINITY, -INFINITY, -INFINITY, -INFINITY,
                         -1, -0.5f, -2, -0.5f});
  Tensor tok = Tensor::zeros(DType::I32, {4});
  run(Op::SAMPLE_ARGMAX, {}, {&logits}, {&tok});
  EXPECT_EQ(tok.get_int(0), 1);  // first of the tied maxima
  EXPECT_EQ(tok.get_int(1), 1);  // NaN is the max, as torch.argmax
  EXPECT_EQ(tok.get_int(2), 0);
  EXPECT_EQ(tok.get_int(3), 1);

  std::mt19937 rng(91);
  for (DType dt : kFloatTypes) {
    const Tensor l = rnd(dt, {1, 50}, rng, -5, 5);
    Tensor t = Tensor::zeros(DType::U8, {1});
    run(Op::SAMPLE_ARGMAX, {}, {&l}, {&t});
    const auto lv = vals(l);
    int64_t best = 0;
    for (int64_t j = 0; j < 50; ++j)
      if (lv[size_t(j)] > lv[size_t(best)]) best = j;
    EXPECT_EQ(t.get_int(0), best) << name_of(dt);
  }
  Tensor f = Tensor::zeros(DType::F32, {4});
  expect_op_error([&] { run(Op::SAMPLE_ARGMAX, {}, {&logits}, {&f}); },
                  "SAMPLE_ARGMAX: output 0 must have an integer dtype, got F32");
  Tensor two = Tensor::zeros(DType::I32, {2});
  expect_op_error([&] { run(Op::SAMPLE_ARGMAX, {}, {&logits}, {&two}); },
                  "output 0 has 2 elements (shape [2]), expected 4 (one token per row of logits)");
  const Tensor wide = Tensor::zeros(DType::F32, {1, 300});
  Tensor i8 = Tensor::zeros(DType::I8, {1});
  Tensor w300 = wide;
  w300.set(299, 1.0f);
  expect_op_error([&] { run(Op::SAMPLE_ARGMAX, {}, {&w300}, {&i8}); }, "SAMPLE_ARGMAX: Tensor: value 299 does not fit I8");
}

// ==== errors common to every op ==============================================================
TEST(OpErrors, ArityNullsAndParams) {
  const Tensor x = Tensor::zeros(DType::F32, {1, 4});
  const Tensor w = Tensor::zeros(DType::F32, {4});
  Tensor out = Tensor::zeros(DType::F32, {1, 4});
  expect_op_error([&] { run(Op::ADD, {}, {&x}, {&out}); }, "ADD: takes 2 inputs, got 1");
  expect_op_error([&] { run(Op::COPY, {}, {&x}, {}); }, "COPY: takes 1 outputs, got 0");
  expect_op_error([&] { run(Op::ADD, {}, {&x, nullptr}, {&out}); }, "ADD: input 1 is null");
  expect_op_error([&] { run(Op::GELU, {}, {&x}, {nullptr}); }, "GELU: output 0 is null");
  expect_op_error([&] { run(Op::RMSNORM, Prm().i("hidden", 4), {&x, &w}, {&out}); },
                  "RMSNORM: missing required param 'eps'");
  Params non_integer = Prm().f("eps", 1e-5).f("hidden", 4.5);
  expect_op_error([&] { run(Op::RMSNORM, non_integer, {&x, &w}, {&out}); },
                  "RMSNORM: param 'hidden' must be an integer, got 4.5");
  Params integral_real = Prm().f("eps", 1e-5).f("hidden", 4.0);  // 4.0 is an integer: accepted
  run(Op::RMSNORM, integral_real, {&x, &w}, {&out});
  Params too_big = Prm().f("eps", 1e-5).i("hidden", int64_t{1} << 40);
  expect_op_error([&] { run(Op::RMSNORM, too_big, {&x, &w}, {&out}); },
                  "RMSNORM: param 'hidden' 1099511627776 does not fit int32");
  Params text;
  text.set("eps", amk::ParamValue::other("\"small\""));
  text.set_int("hidden", 4);
  expect_op_error([&] { run(Op::RMSNORM, text, {&x, &w}, {&out}); },
                  "RMSNORM: param 'eps' is not a number: \"small\"");
  Params huge_eps = Prm().f("eps", 1e300).i("hidden", 4);
  expect_op_error([&] { run(Op::RMSNORM, huge_eps, {&x, &w}, {&out}); }, "is not a finite float32");
  expect_op_error([&] { run(Op(99), {}, {}, {}); }, "unknown opcode 99");
}

}  // namespace
