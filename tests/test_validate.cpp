// validate(): every invariant has a REJECTED counterexample and an ACCEPTED twin that differs
// minimally, plus robustness (random mutation, huge cycles) and scale (the full race check runs
// above the 8,000 tasks where the reference design gave up).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>

#include "amk/json.h"
#include "amk/validate.h"
#include "support/program_gen.h"

namespace amk {
namespace {

// ---- assertions that print the whole report when they fail
// ---------------------------------------
bool contains_any(const std::vector<std::string>& lines, std::string_view needle) {
  for (const auto& l : lines)
    if (l.find(needle) != std::string::npos) return true;
  return false;
}

::testing::AssertionResult Accepted(const ValidationResult& r) {
  if (r.ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected VALID, got:\n" << r.report();
}

::testing::AssertionResult Rejected(const ValidationResult& r, std::string_view needle) {
  if (!r.ok && contains_any(r.errors, needle)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "expected REJECTED with an error containing '" << needle << "', got:\n"
         << r.report();
}

::testing::AssertionResult Warned(const ValidationResult& r, std::string_view needle) {
  if (contains_any(r.warnings, needle)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected a warning containing '" << needle << "', got:\n"
                                       << r.report();
}

::testing::AssertionResult Clean(const ValidationResult& r) {
  if (r.ok && r.warnings.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected VALID without warnings, got:\n" << r.report();
}

Params gemv_params(int64_t k, int64_t n_tile, int64_t n_off) {
  Params p;
  p.set_int("K", k);
  p.set_int("N_tile", n_tile);
  p.set_int("n_off", n_off);
  return p;
}

// An attention task's params: its heads, its window, scale 0.5.
Params attention_params(int64_t head_dim, int64_t n_heads, int64_t n_kv_heads, int64_t kv_start,
                        int64_t kv_len) {
  Params p;
  p.set_int("head_dim", head_dim);
  p.set_int("n_heads", n_heads);
  p.set_int("n_kv_heads", n_kv_heads);
  p.set_int("kv_start", kv_start);
  p.set_int("kv_len", kv_len);
  p.set_real("scale", 0.5);
  return p;
}

Params norm_params(int64_t hidden = 16) {
  Params p;
  p.set_real("eps", 1e-5);
  p.set_int("hidden", hidden);
  return p;
}

// x -> rmsnorm -> h -> two GEMV tiles (one shared counter) -> y (IO_OUTPUT).
struct Tiny {
  Program p;
  int64_t x, nw, w, h, y;
  int64_t c_norm, c_proj;
};

Tiny tiny() {
  Tiny t;
  Program& p = t.p;
  t.x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F16, {1, 16});
  t.nw = p.new_buffer("norm.w", BufferKind::WEIGHT, DType::F16, {16}, MemSpace::HBM, "norm.weight");
  t.w = p.new_buffer("proj.w", BufferKind::WEIGHT, DType::F16, {16, 16}, MemSpace::HBM,
                     "proj.weight");
  t.h = p.new_buffer("h", BufferKind::ACTIVATION, DType::F16, {1, 16}, MemSpace::GLOBAL_SCRATCH);
  t.y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F16, {1, 16});
  t.c_norm = p.new_counter("norm done");
  t.c_proj = p.new_counter("proj done");
  p.add_task(Op::RMSNORM, {t.x, t.nw}, {t.h}, t.c_norm, {}, norm_params(), "norm");
  p.add_task(Op::GEMV_TILE, {t.h, t.w}, {t.y}, t.c_proj, {{t.c_norm, 1}}, gemv_params(16, 8, 0),
             "proj0");
  p.add_task(Op::GEMV_TILE, {t.h, t.w}, {t.y}, t.c_proj, {{t.c_norm, 1}}, gemv_params(16, 8, 8),
             "proj1");
  return t;
}

// n producers (NOP, one counter each or shared) feeding tasks as the tests need.
int64_t add_nop(Program& p, int64_t counter, std::vector<Wait> waits = {},
                std::string label = "nop") {
  p.add_task(Op::NOP, {}, {}, counter, std::move(waits), {}, std::move(label));
  return static_cast<int64_t>(p.tasks.size()) - 1;
}

// ---- the baseline
// ----------------------------------------------------------------------------------
TEST(ValidateBasics, TinyProgramIsValidAndReportsStats) {
  const auto r = validate(tiny().p);
  ASSERT_TRUE(Clean(r));
  EXPECT_EQ(r.stats.tasks, 3);
  EXPECT_EQ(r.stats.buffers, 5);
  EXPECT_EQ(r.stats.counters, 2);
  EXPECT_EQ(r.stats.edges, 2);
  EXPECT_TRUE(r.stats.acyclic);
  EXPECT_FALSE(r.stats.sm_assigned);
  EXPECT_GT(r.stats.hb_queries, 0);
  EXPECT_EQ(
      r.report().rfind("[VALID] tasks=3 buffers=5 counters=2 edges=2 acyclic=true weight_MB=0.00 "
                       "sm_assigned=false",
                       0),
      0u)
      << r.report();
}

TEST(ValidateBasics, EmptyProgramIsValid) { EXPECT_TRUE(Clean(validate(Program{}))); }

TEST(ValidateBasics, ReportListsErrorsAndWarnings) {
  Tiny t = tiny();
  t.p.tasks[1].inputs.push_back(99);  // a missing (optional third) input
  t.p.tasks[0].params.set_int("bogus", 1);
  const auto r = validate(t.p);
  const std::string rep = r.report();
  EXPECT_EQ(rep.rfind("[REJECTED] tasks=3", 0), 0u) << rep;
  EXPECT_NE(rep.find("\n  ERROR: task 1 (proj0) reads missing buffer 99"), std::string::npos)
      << rep;
  EXPECT_NE(rep.find("\n  warning: task 0 (norm) param 'bogus'"), std::string::npos) << rep;
  EXPECT_FALSE(static_cast<bool>(r));
}

TEST(ValidateBasics, EdgesCountDistinctPairsWithoutListingThem) {
  // An all-join of 128 tiles into 128 consumers: 16,384 pairs.
  Program p;
  const int64_t c = p.new_counter(), d = p.new_counter();
  for (int i = 0; i < 128; ++i) add_nop(p, c);
  for (int i = 0; i < 128; ++i)
    add_nop(p, d, {{c, 128}, {c, 128}});  // a duplicated wait counts once
  const auto r = validate(p);
  ASSERT_TRUE(Accepted(r));
  EXPECT_EQ(r.stats.edges, 128 * 128);
}

// ---- referential integrity
// -------------------------------------------------------------------------
TEST(ValidateReferences, MissingBufferIsRejected) {
  Tiny t = tiny();
  t.p.tasks[1].inputs[0] = 99;
  EXPECT_TRUE(Rejected(validate(t.p), "task 1 (proj0) reads missing buffer 99"));
  t = tiny();
  t.p.tasks[2].outputs[0] = -3;
  EXPECT_TRUE(Rejected(validate(t.p), "task 2 (proj1) writes missing buffer -3"));
  EXPECT_TRUE(Accepted(validate(tiny().p)));
}

TEST(ValidateReferences, MissingCounterIsRejected) {
  Tiny t = tiny();
  t.p.tasks[1].waits[0].counter = 42;
  EXPECT_TRUE(Rejected(validate(t.p), "waits on missing counter 42"));
  t = tiny();
  t.p.tasks[0].out_counter = -1;
  EXPECT_TRUE(Rejected(validate(t.p), "increments missing counter -1"));
}

TEST(ValidateReferences, IdsMustBeDense) {
  Tiny t = tiny();
  t.p.buffers[2].id = 7;
  EXPECT_TRUE(Rejected(validate(t.p), "buffer at index 2 has id 7"));
  t = tiny();
  t.p.counters[1].id = 0;  // duplicate id
  EXPECT_TRUE(Rejected(validate(t.p), "counter at index 1 has id 0"));
  t = tiny();
  t.p.tasks[2].id = -5;
  EXPECT_TRUE(Rejected(validate(t.p), "task at index 2 has id -5"));
}

TEST(ValidateReferences, InvalidEnumValuesAreRejected) {
  Tiny t = tiny();
  t.p.tasks[0].op = static_cast<Op>(77);
  EXPECT_TRUE(Rejected(validate(t.p), "invalid opcode 77"));
  t = tiny();
  t.p.buffers[3].kind = static_cast<BufferKind>(9);
  EXPECT_TRUE(Rejected(validate(t.p), "invalid kind code 9"));
  t = tiny();
  t.p.buffers[3].dtype = static_cast<DType>(-1);
  EXPECT_TRUE(Rejected(validate(t.p), "invalid dtype code -1"));
  t = tiny();
  t.p.buffers[3].space = static_cast<MemSpace>(4);
  EXPECT_TRUE(Rejected(validate(t.p), "invalid memory space code 4"));
}

TEST(ValidateReferences, CounterInitMustBeZero) {
  Tiny t = tiny();
  t.p.counters[0].init = 1;
  EXPECT_TRUE(Rejected(validate(t.p), "counter 0 has init 1 != 0"));
}

// ---- arity, params, caps
// ---------------------------------------------------------------------------
TEST(ValidateArity, InputAndOutputCountsFollowTheRegistry) {
  Tiny t = tiny();
  t.p.tasks[1].inputs = {t.h};
  EXPECT_TRUE(Rejected(validate(t.p), "GEMV_TILE arity: 1 inputs, expected [2,3]"));
  t = tiny();
  const int64_t bias = t.p.new_buffer("bias", BufferKind::WEIGHT, DType::F16, {16});
  t.p.tasks[1].inputs.push_back(bias);  // the optional third input
  EXPECT_TRUE(Accepted(validate(t.p)));
  t = tiny();
  t.p.tasks[0].outputs.push_back(t.h);
  EXPECT_TRUE(Rejected(validate(t.p), "RMSNORM expected 1 outputs, got 2"));
}

TEST(ValidateParams, RequiredParamMustBePresent) {
  Tiny t = tiny();
  Params p;
  p.set_int("N_tile", 8);
  p.set_int("n_off", 0);
  t.p.tasks[1].params = p;
  EXPECT_TRUE(Rejected(validate(t.p), "GEMV_TILE missing required param 'K'"));
  p.set_int("K", 16);
  t.p.tasks[1].params = p;
  EXPECT_TRUE(Accepted(validate(t.p)));
}

TEST(ValidateParams, Int32FieldsMustBeIntegersInRange) {
  const std::pair<ParamValue, bool> cases[] = {
      {ParamValue::integer(16), true},
      {ParamValue::integer(std::numeric_limits<int32_t>::max()), true},
      {ParamValue::integer(std::numeric_limits<int32_t>::min()), true},
      {ParamValue::real(16.0), false},  // a float where an int marshals
      {ParamValue::integer(int64_t{1} << 31), false},
      {ParamValue::integer(-(int64_t{1} << 31) - 1), false},
      {ParamValue::other("true"), false},
      {ParamValue::other("\"16\""), false},
  };
  for (const auto& [value, ok] : cases) {
    Tiny t = tiny();
    t.p.tasks[1].params.set("K", value);
    const auto r = validate(t.p);
    if (ok)  // (a K other than 16 is then rejected against the shapes, not as a type)
      EXPECT_FALSE(contains_any(r.errors, "param 'K'=")) << r.report();
    else
      EXPECT_TRUE(Rejected(r, "param 'K'=")) << "must be an int32";
    if (!ok) EXPECT_TRUE(contains_any(r.errors, "must be an int32"));
  }
}

TEST(ValidateParams, RealFieldsMustBeFiniteNumbers) {
  const std::pair<ParamValue, bool> cases[] = {
      {ParamValue::real(1e-5), true},
      {ParamValue::integer(0), true},  // an int marshals to float fine
      {ParamValue::other("null"), false},
      {ParamValue::real(std::nan("")), false},
  };
  for (const auto& [value, ok] : cases) {
    Tiny t = tiny();
    t.p.tasks[0].params.set("eps", value);
    const auto r = validate(t.p);
    if (ok)
      EXPECT_TRUE(Accepted(r));
    else
      EXPECT_TRUE(Rejected(r, "param 'eps'="));
  }
}

TEST(ValidateParams, UnknownParamIsOnlyAWarning) {
  Tiny t = tiny();
  t.p.tasks[1].params.set_int("kv_block", 128);
  const auto r = validate(t.p);
  EXPECT_TRUE(Accepted(r));
  EXPECT_TRUE(Warned(r, "param 'kv_block' is not a known amk_params_t field"));
}

TEST(ValidateCaps, NineInputsAreRejectedEightAccepted) {
  for (int n : {8, 9}) {
    Program p;
    std::vector<int64_t> in;
    for (int i = 0; i < n; ++i)
      in.push_back(p.new_buffer("s" + std::to_string(i), BufferKind::IO_INPUT, DType::F32, {4}));
    const int64_t out = p.new_buffer("o", BufferKind::IO_OUTPUT, DType::F32, {4});
    p.add_task(Op::ALLREDUCE_SHARD, in, {out}, p.new_counter(), {}, {}, "reduce");
    if (n == 8)
      EXPECT_TRUE(Clean(validate(p)));
    else
      EXPECT_TRUE(Rejected(validate(p), "has 9 inputs > ABI_MAX_INPUTS=8"));
  }
}

TEST(ValidateCaps, FiveOutputsAreRejected) {
  Program p;
  std::vector<int64_t> out;
  for (int i = 0; i < 5; ++i)
    out.push_back(p.new_buffer("o" + std::to_string(i), BufferKind::IO_OUTPUT, DType::F32, {4}));
  p.add_task(Op::NOP, {}, out, p.new_counter());
  EXPECT_TRUE(Rejected(validate(p), "has 5 outputs > ABI_MAX_OUTPUTS=4"));
}

TEST(ValidateCaps, NineWaitsAreRejectedEightAccepted) {
  for (int n : {8, 9}) {
    Program p;
    std::vector<Wait> waits;
    for (int i = 0; i < n; ++i) {
      const int64_t c = p.new_counter();
      add_nop(p, c);
      waits.push_back({c, 1});
    }
    add_nop(p, p.new_counter(), waits, "join");
    if (n == 8)
      EXPECT_TRUE(Clean(validate(p)));
    else
      EXPECT_TRUE(Rejected(validate(p), "has 9 waits > ABI_MAX_WAITS=8"));
  }
}

TEST(ValidateCaps, RankFiveIsRejectedRankFourAccepted) {
  Tiny t = tiny();
  t.p.buffers[static_cast<size_t>(t.w)].shape = {1, 1, 1, 16, 16};
  const auto r = validate(t.p);
  EXPECT_TRUE(Rejected(r, "task 1 (proj0) uses buffer #2 ('proj.w') of rank 5 > ABI_MAX_RANK=4"));
  EXPECT_TRUE(Rejected(r, "buffer #2 ('proj.w') has rank 5"));
  t.p.buffers[static_cast<size_t>(t.w)].shape = {1, 1, 16, 16};
  EXPECT_TRUE(Accepted(validate(t.p)));
  // An unused buffer of rank 5 is still reported, as is a negative dimension.
  Program p;
  p.new_buffer("unused", BufferKind::WEIGHT, DType::F32, {1, 1, 1, 1, 1});
  p.new_buffer("neg", BufferKind::WEIGHT, DType::F32, {4, -2});
  const auto r2 = validate(p);
  EXPECT_TRUE(Rejected(r2, "has rank 5"));
  EXPECT_TRUE(Rejected(r2, "has negative dimension -2"));
}

// A weight's box (IR 0.12.0): rows and columns of its source tensor, the buffer's whole shape;
// only WEIGHT buffers with a source have one. Whether it fits the tensor is the checkpoint's to
// say (amk/decoder.h weight_tensor).
TEST(ValidateCaps, SourceBoxesAreWeightsOfTheirOwnShape) {
  const auto with_box = [](BufferKind kind, std::optional<std::string> source,
                           std::vector<int64_t> shape, SourceBox box) {
    Program p;
    p.new_buffer("w", kind, DType::BF16, std::move(shape), MemSpace::HBM, std::move(source));
    p.buffers[0].source_box = box;
    return validate(p);
  };
  EXPECT_TRUE(Accepted(with_box(BufferKind::WEIGHT, "model.w", {2, 3}, {4, 2, 8, 3})));
  EXPECT_TRUE(Rejected(with_box(BufferKind::ACTIVATION, std::nullopt, {2, 3}, {4, 2, 8, 3}),
                       "buffer #0 ('w') has a source_box [4, 2, 8, 3] but is not a WEIGHT with a "
                       "source"));
  EXPECT_TRUE(Rejected(with_box(BufferKind::WEIGHT, std::nullopt, {2, 3}, {4, 2, 8, 3}),
                       "is not a WEIGHT with a source"));
  EXPECT_TRUE(Rejected(with_box(BufferKind::WEIGHT, "model.w", {2, 3}, {-1, 2, 8, 3}),
                       "source_box [-1, 2, 8, 3]: offsets must be >= 0 and sizes >= 1"));
  EXPECT_TRUE(Rejected(with_box(BufferKind::WEIGHT, "model.w", {0, 3}, {4, 0, 8, 3}),
                       "offsets must be >= 0 and sizes >= 1"));
  EXPECT_TRUE(Rejected(
      with_box(BufferKind::WEIGHT, "model.w", {2, 3}, {INT64_MAX, 2, 8, 3}),
      "offsets must be >= 0 and sizes >= 1"));
  EXPECT_TRUE(Rejected(with_box(BufferKind::WEIGHT, "model.w", {3, 2}, {4, 2, 8, 3}),
                       "but its shape is not [2, 3]"));
}

// Ranged shard sums (IR 0.12.0) under one counter fill disjoint slices of one vector as GEMV
// tiles fill columns: disjoint ranges that cover it are valid, overlapping ones race, and a
// range must lie in the shards and come with both params.
TEST(ValidateParams, RangedShardSumsAreTilesOfTheirOutput) {
  const auto program = [](std::vector<std::pair<int64_t, int64_t>> ranges) {
    Program p;
    const int64_t a = p.new_buffer("a", BufferKind::IO_INPUT, DType::F32, {1, 8});
    const int64_t b = p.new_buffer("b", BufferKind::IO_INPUT, DType::F32, {1, 8});
    const int64_t h = p.new_buffer("h", BufferKind::ACTIVATION, DType::F32, {1, 8},
                                   MemSpace::GLOBAL_SCRATCH);
    const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {1, 8});
    const int64_t sums = p.new_counter("sums");
    for (const auto& [off, len] : ranges) {
      Params prm;
      if (off >= 0) prm.set_int("n_off", off);
      if (len >= 0) prm.set_int("N_tile", len);
      p.add_task(Op::ALLREDUCE_SHARD, {a, b}, {h}, sums, {}, prm, "slice");
    }
    p.add_task(Op::COPY, {h}, {y}, p.new_counter("copy"), {{sums, int64_t(ranges.size())}}, {},
               "copy");
    return validate(p);
  };
  EXPECT_TRUE(Accepted(program({{0, 5}, {5, 3}})));
  EXPECT_TRUE(Rejected(program({{0, 5}, {4, 4}}), "share a counter but their tiles OVERLAP"));
  EXPECT_TRUE(Rejected(program({{0, 4}}),  // elements [4, 8) are read, never written
                       "reads buffer #2 ('h') but its writers write only part of it"));
  EXPECT_TRUE(Rejected(program({{0, 4}, {4, 5}}),
                       "range n_off 4, N_tile 5 must lie in the 8 elements of input 0"));
  EXPECT_TRUE(Rejected(program({{0, -1}, {4, 4}}), "a ranged shard sum takes both n_off and N_tile"));
}

// A ranged shard sum reads only its slice of every shard (read_region), so slice r of a
// tensor-parallel step's sum waits for the tiles that wrote slice r of each partial alone, each
// under a counter of its own; waiting for another slice's tiles races, and an unranged sum
// still reads every slice.
TEST(ValidateRaces, ARangedShardSumWaitsOnlyForItsSlicesWriters) {
  const auto program = [](int64_t slice_waited, bool ranged) {
    Program p;
    const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {1, 4});
    const int64_t w = p.new_buffer("w", BufferKind::WEIGHT, DType::F32, {8, 4}, MemSpace::HBM,
                                   "w");
    const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {1, 8});
    std::vector<int64_t> parts;
    int64_t counters[2][2];  // [part][slice]
    for (int64_t part = 0; part < 2; ++part) {
      parts.push_back(p.new_buffer("part" + std::to_string(part), BufferKind::ACTIVATION,
                                   DType::F32, {1, 8}, MemSpace::GLOBAL_SCRATCH));
      for (int64_t slice = 0; slice < 2; ++slice) {
        counters[part][slice] = p.new_counter("tile");
        p.add_task(Op::GEMV_TILE, {x, w}, {parts.back()}, counters[part][slice], {},
                   gemv_params(4, 4, 4 * slice), "tile");
      }
    }
    const int64_t sums = p.new_counter("sums");
    for (int64_t slice = 0; slice < 2; ++slice) {
      Params prm;
      if (ranged) {
        prm.set_int("n_off", 4 * slice);
        prm.set_int("N_tile", 4);
      }
      const int64_t waited = slice == 1 ? slice_waited : 0;
      p.add_task(Op::ALLREDUCE_SHARD, parts, {y}, sums,
                 {{counters[0][waited], 1}, {counters[1][waited], 1}}, prm, "sum");
      if (!ranged) break;
    }
    return validate(p);
  };
  EXPECT_TRUE(Accepted(program(1, true)));
  EXPECT_TRUE(Rejected(program(0, true), "reads buffer #3 ('part0') but writer task(s)"));
  EXPECT_TRUE(Rejected(program(0, false), "reads buffer #3 ('part0') but writer task(s)"));
}

// An attention task with a head range reads only its heads' columns of q (read_region): it
// must be ordered after the q tiles that write them, and need not be ordered against the others
// (issue 9's "attention waits only for its own heads' q"). Writers of its columns that it is
// not ordered against still race; tiles that leave its columns unwritten are still an
// uninitialized read; a task without a head range still reads all of q.
TEST(ValidateRaces, AHeadRangedAttentionWaitsOnlyForItsHeadsTiles) {
  struct Tile {
    int64_t n_off, n_tile, counter;  // counter 0 or 1
  };
  const auto program = [](std::vector<Tile> tiles, int64_t waits_on, bool ranged) {
    Program p;
    const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {1, 16});
    const int64_t w = p.new_buffer("w", BufferKind::WEIGHT, DType::F32, {8, 16}, MemSpace::HBM,
                                   "w");
    const int64_t q = p.new_buffer("q", BufferKind::ACTIVATION, DType::F32, {1, 8},
                                   MemSpace::GLOBAL_SCRATCH);
    const int64_t kc = p.new_buffer("k_cache", BufferKind::KV_CACHE, DType::F32, {2, 4, 2});
    const int64_t vc = p.new_buffer("v_cache", BufferKind::KV_CACHE, DType::F32, {2, 4, 2});
    const int64_t out = p.new_buffer("attn", BufferKind::IO_OUTPUT, DType::F32,
                                     {1, ranged ? 4 : 8});
    const int64_t c[2] = {p.new_counter("heads 0-1"), p.new_counter("heads 2-3")};
    for (const Tile& t : tiles)
      p.add_task(Op::GEMV_TILE, {x, w}, {q}, c[t.counter], {}, gemv_params(16, t.n_tile, t.n_off),
                 "q_proj");
    Params a = attention_params(2, 4, 2, 0, 4);
    if (ranged) {
      a.set_int("n_off", 0);
      a.set_int("N_tile", 2);
    }
    int64_t producers = 0;
    for (const Tile& t : tiles) producers += t.counter == waits_on;
    p.add_task(Op::ATTENTION_TILE, {q, kc, vc}, {out}, p.new_counter("attention"),
               {{c[waits_on], producers}}, a, "attention");
    return validate(p);
  };
  const std::vector<Tile> two = {{0, 4, 0}, {4, 4, 1}};
  EXPECT_TRUE(Accepted(program(two, 0, true)));
  EXPECT_TRUE(Rejected(program(two, 1, true),
                       "reads buffer #2 ('q') but writer task(s) [0] are NOT ordered"));
  EXPECT_TRUE(Rejected(program({{0, 2, 0}, {2, 6, 1}}, 0, true),
                       "reads buffer #2 ('q') but writer task(s) [1] are NOT ordered"));
  EXPECT_TRUE(Rejected(program({{0, 2, 0}, {4, 4, 1}}, 0, true),
                       "reads buffer #2 ('q') but its writers write only part of it"));
  EXPECT_TRUE(Rejected(program(two, 0, false),
                       "reads buffer #2 ('q') but writer task(s) [1] are NOT ordered"));
}

// A combine merging heads from m_off (IR 0.12.0) reads those heads' rows of every slab of its
// stack (read_region): it need wait only for those heads' attention partials, and still races
// with the writers of its heads it is not ordered after.
TEST(ValidateRaces, AHeadRangedCombineWaitsOnlyForItsHeadsPartials) {
  const auto program = [](int64_t head1_waits_on, bool ranged) {
    Program p;
    const int64_t q = p.new_buffer("q", BufferKind::IO_INPUT, DType::F32, {1, 4});
    const int64_t kc = p.new_buffer("k_cache", BufferKind::KV_CACHE, DType::F32, {2, 4, 2});
    const int64_t vc = p.new_buffer("v_cache", BufferKind::KV_CACHE, DType::F32, {2, 4, 2});
    const int64_t stack = p.new_buffer("stack", BufferKind::ACTIVATION, DType::F32, {4, 4},
                                       MemSpace::GLOBAL_SCRATCH);
    const int64_t res = p.new_buffer("res", BufferKind::IO_INPUT, DType::F32, {1, 3});
    const int64_t c[2] = {p.new_counter("head 0"), p.new_counter("head 1")};
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t slab = 0; slab < 2; ++slab) {
        Params a = attention_params(2, 2, 2, 2 * slab, 2);
        a.set_int("flags", 2);  // partial
        a.set_int("n_off", h);
        a.set_int("N_tile", 1);
        a.set_int("m_off", slab);
        p.add_task(Op::ATTENTION_TILE, {q, kc, vc}, {stack}, c[h], {}, a, "attention");
      }
    for (int64_t h = 0; h < 2; ++h) {
      const int64_t w = p.new_buffer("w" + std::to_string(h), BufferKind::WEIGHT, DType::F32,
                                     {3, ranged ? 2 : 4}, MemSpace::HBM, "w");
      const int64_t out = p.new_buffer("o" + std::to_string(h), BufferKind::IO_OUTPUT,
                                       DType::F32, {1, 3});
      Params m = gemv_params(ranged ? 2 : 4, 3, 0);
      m.set_int("head_dim", 2);
      m.set_int("n_heads", 2);
      if (ranged) m.set_int("m_off", h);
      const int64_t waits_on = h == 1 ? head1_waits_on : 0;
      p.add_task(Op::COMBINE_GEMV_ADD_TILE, {stack, w, res}, {out}, p.new_counter("o_proj"),
                 {{c[waits_on], 2}}, m, "o_proj");
    }
    return validate(p);
  };
  EXPECT_TRUE(Accepted(program(1, true)));
  EXPECT_TRUE(Rejected(program(0, true),
                       "task 5 (o_proj) reads buffer #3 ('stack') but writer task(s) [2, 3] are "
                       "NOT ordered"));
  EXPECT_TRUE(Rejected(program(1, false), "task 4 (o_proj) reads buffer #3 ('stack') but writer "
                                          "task(s) [2, 3] are NOT ordered"));
}

// ---- thresholds and the all-join rule
// ------------------------------------------------------------
TEST(ValidateThresholds, ZeroAndNegativeAreRejected) {
  for (int64_t bad : {int64_t{0}, int64_t{-3}}) {
    Tiny t = tiny();
    t.p.tasks[1].waits[0].threshold = bad;
    EXPECT_TRUE(Rejected(validate(t.p), "threshold " + std::to_string(bad) +
                                            " on counter 0 is not a positive static int"));
  }
}

TEST(ValidateThresholds, AboveProducerCountIsRejected) {
  Tiny t = tiny();
  const int64_t out = t.p.new_buffer("z", BufferKind::IO_OUTPUT, DType::F16, {1, 16});
  t.p.add_task(Op::COPY, {t.y}, {out}, t.p.new_counter(), {{t.c_proj, 3}}, {}, "copy");
  EXPECT_TRUE(Rejected(validate(t.p), "threshold 3 > 2 producers of counter 1, unsatisfiable"));
  t.p.tasks[3].waits[0].threshold = int64_t{1} << 40;
  EXPECT_TRUE(Rejected(validate(t.p), "threshold 1099511627776 > 2 producers"));
  t.p.tasks[3].waits[0].threshold = 2;
  EXPECT_TRUE(Clean(validate(t.p)));
}

TEST(ValidateThresholds, CounterWithoutProducerIsADeadlock) {
  Program p;
  const int64_t c = p.new_counter("nobody signals me");
  add_nop(p, p.new_counter(), {{c, 1}}, "waiter");
  EXPECT_TRUE(Rejected(validate(p), "task 0 (waiter) waits on counter 0 with NO producer"));
  add_nop(p, c, {}, "signaller");
  EXPECT_TRUE(Clean(validate(p)));
}

TEST(ValidateThresholds, PartialWaitOnSharedCounterIsARace) {
  for (int64_t t : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}}) {
    Program p;
    const int64_t c = p.new_counter("4 producers");
    for (int i = 0; i < 4; ++i) add_nop(p, c);
    add_nop(p, p.new_counter(), {{c, t}}, "consumer");
    const auto r = validate(p);
    if (t == 4)
      EXPECT_TRUE(Clean(r));
    else  // t = 1 is the first-of-N race: any one producer satisfies it
      EXPECT_TRUE(Rejected(
          r, "partial wait threshold " + std::to_string(t) + " on shared counter 0 (4 producers)"));
  }
}

TEST(ValidateThresholds, SingleProducerCounterMayBeWaitedWithOne) {
  Program p;
  const int64_t c = p.new_counter();
  add_nop(p, c);
  add_nop(p, p.new_counter(), {{c, 1}});
  EXPECT_TRUE(Clean(validate(p)));
}

TEST(ValidateThresholds, WaitingOnOwnCounterIsASelfDeadlock) {
  Tiny t = tiny();
  t.p.tasks[1].waits.push_back({t.c_proj, 2});
  const auto r = validate(t.p);
  EXPECT_TRUE(Rejected(r, "task 1 (proj0) waits on its OWN out_counter 1, self-deadlock"));
  EXPECT_TRUE(Rejected(r, "CYCLE"));
  EXPECT_FALSE(r.stats.acyclic);
}

// ---- acyclicity
// ------------------------------------------------------------------------------------ Task i waits
// on the counter of task i-1; task 0 waits on the last one when `closed`.
Program ring(int64_t n, bool closed) {
  Program p;
  for (int64_t i = 0; i < n; ++i) p.new_counter();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<Wait> waits;
    if (i > 0) waits.push_back({i - 1, 1});
    if (i == 0 && closed) waits.push_back({n - 1, 1});
    add_nop(p, i, waits, "r" + std::to_string(i));
  }
  return p;
}

TEST(ValidateCycles, SmallCycleHasAReadableWitness) {
  const auto r = validate(ring(3, true));
  EXPECT_TRUE(Rejected(r, "producer->consumer graph has a CYCLE, structural deadlock. cycle: "));
  EXPECT_TRUE(Rejected(r, "0:r0 -> 1:r1 -> 2:r2 -> 0:r0"));
  EXPECT_FALSE(r.stats.acyclic);
  EXPECT_TRUE(Clean(validate(ring(3, false))));
}

TEST(ValidateCycles, SixThousandTaskCycleIsFoundIteratively) {
  const auto r = validate(ring(6000, true));
  EXPECT_TRUE(Rejected(r, "cycle (6000 tasks): 0:r0 -> 1:r1 -> "));
  EXPECT_TRUE(Rejected(r, "5999:r5999 -> 0:r0"));
  EXPECT_TRUE(Clean(validate(ring(6000, false))));
}

TEST(ValidateCycles, TwoHundredThousandTaskCycleDoesNotOverflowTheStack) {
  const auto r = validate(ring(200000, true));
  EXPECT_TRUE(Rejected(r, "cycle (200000 tasks)"));
  EXPECT_LT(r.report().size(), 4096u);  // the witness keeps its ends, not 200k names
}

TEST(ValidateCycles, CycleBehindAnAcyclicPrefixIsLocalised) {
  // 0 -> 1 -> 2 -> 3 -> 1: the witness names the loop, not the prefix.
  Program p;
  for (int i = 0; i < 4; ++i) p.new_counter();
  add_nop(p, 0, {}, "a");
  add_nop(p, 1, {{0, 1}, {3, 1}}, "b");
  add_nop(p, 2, {{1, 1}}, "c");
  add_nop(p, 3, {{2, 1}}, "d");
  EXPECT_TRUE(Rejected(validate(p), "cycle: 1:b -> 2:c -> 3:d -> 1:b"));
}

// ---- per-SM queues
// ---------------------------------------------------------------------------------
TEST(ValidateSmQueues, ConsumerQueuedBeforeItsProducerOnOneSmDeadlocks) {
  Program p;
  const int64_t ca = p.new_counter(), cb = p.new_counter();
  add_nop(p, cb, {{ca, 1}}, "B");  // listed first on SM 0, waits on A
  add_nop(p, ca, {}, "A");
  p.tasks[0].sm = 0;
  p.tasks[1].sm = 0;
  EXPECT_TRUE(Rejected(validate(p), "SM 0 serial queue order deadlocks"));
  EXPECT_TRUE(Rejected(validate(p), "0:B =[SM 0 queue]=> 1:A -> 0:B"));
  p.tasks[1].sm = 1;  // the twin: A on another SM
  EXPECT_TRUE(Clean(validate(p)));
}

TEST(ValidateSmQueues, TransitiveQueueDeadlockThroughAnotherSm) {
  // SM 0 queue [B, A]; A -> X (SM 1) -> B. No direct same-SM edge, still a deadlock.
  Program p;
  const int64_t ca = p.new_counter(), cx = p.new_counter(), cb = p.new_counter();
  add_nop(p, cb, {{cx, 1}}, "B");
  add_nop(p, ca, {}, "A");
  add_nop(p, cx, {{ca, 1}}, "X");
  p.tasks[0].sm = 0;
  p.tasks[1].sm = 0;
  p.tasks[2].sm = 1;
  const auto r = validate(p);
  EXPECT_TRUE(r.stats.acyclic);
  EXPECT_TRUE(Rejected(r, "SM 0 serial queue order deadlocks"));
  EXPECT_TRUE(Rejected(r, "0:B =[SM 0 queue]=> 1:A -> 2:X -> 0:B"));
  p.tasks[1].sm = 2;
  EXPECT_TRUE(Clean(validate(p)));
}

TEST(ValidateSmQueues, SmMustBeInRangeOfTheTarget) {
  Tiny t = tiny();
  t.p.target = *find_target("h100");
  for (auto& task : t.p.tasks) task.sm = 131;
  EXPECT_TRUE(Accepted(validate(t.p)));
  t.p.tasks[2].sm = 132;
  EXPECT_TRUE(Rejected(validate(t.p), "task 2 (proj1) assigned to SM 132 out of range [0,132)"));
  t.p.tasks[2].sm = -1;
  EXPECT_TRUE(Rejected(validate(t.p), "task 2 (proj1) assigned to negative SM -1"));
  t.p.target.reset();  // without a target only negativity is checked
  t.p.tasks[2].sm = 100000;
  EXPECT_TRUE(Accepted(validate(t.p)));
}

TEST(ValidateSmQueues, PartialAssignmentWarns) {
  Tiny t = tiny();
  t.p.tasks[0].sm = 0;
  const auto r = validate(t.p);
  EXPECT_TRUE(Accepted(r));
  EXPECT_TRUE(Warned(r, "2 of 3 tasks have no SM assigned"));
  EXPECT_TRUE(r.stats.sm_assigned);
}

// ---- RAW races ---------------------------------------------------------------------------------
TEST(ValidateRaces, ReaderNotOrderedAfterWriterIsARace) {
  Tiny t = tiny();
  t.p.tasks[2].waits.clear();
  EXPECT_TRUE(Rejected(validate(t.p),
                       "task 2 (proj1) reads buffer #3 ('h') but writer task(s) [0] are "
                       "NOT ordered before or after it, data RACE"));
  EXPECT_TRUE(Clean(validate(tiny().p)));
}

TEST(ValidateRaces, TransitiveOrderIsEnough) {
  // norm -> a -> b; b reads norm's output three stages later with no direct wait.
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t h = p.new_buffer("h", BufferKind::ACTIVATION, DType::F32, {4});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {4});
  const int64_t c0 = p.new_counter(), c1 = p.new_counter(), c2 = p.new_counter(),
                c3 = p.new_counter();
  p.add_task(Op::GELU, {x}, {h}, c0, {}, {}, "write h");
  add_nop(p, c1, {{c0, 1}}, "a");
  add_nop(p, c2, {{c1, 1}}, "b");
  p.add_task(Op::ADD, {h, x}, {y}, c3, {{c2, 1}}, {}, "read h");
  EXPECT_TRUE(Clean(validate(p)));
  p.tasks[2].waits.clear();  // break the chain in the middle
  EXPECT_TRUE(
      Rejected(validate(p), "task 3 (read h) reads buffer #1 ('h') but writer task(s) [0]"));
}

TEST(ValidateRaces, ReaderMustFollowEveryWriterNotJustOne) {
  // h written by A then B (B ordered after A, whole-buffer writes: totally ordered, no WAW).
  // A reader ordered after A only is racing with B.
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t h = p.new_buffer("h", BufferKind::ACTIVATION, DType::F32, {4});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {4});
  const int64_t ca = p.new_counter(), cb = p.new_counter(), cr = p.new_counter();
  p.add_task(Op::GELU, {x}, {h}, ca, {}, {}, "A");
  p.add_task(Op::GELU, {x}, {h}, cb, {{ca, 1}}, {}, "B");
  p.add_task(Op::COPY, {h}, {y}, cr, {{ca, 1}}, {}, "reader");
  EXPECT_TRUE(Rejected(validate(p),
                       "task 2 (reader) reads buffer #1 ('h') but writer task(s) [1] are NOT"));
  p.tasks[2].waits = {{cb, 1}};
  EXPECT_TRUE(Clean(validate(p)));
}

TEST(ValidateRaces, ReadingAllTilesNeedsTheAllJoin) {
  // 4 tiles write h under one counter; waiting for them all is the only way to read h.
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {1, 8});
  const int64_t w = p.new_buffer("w", BufferKind::WEIGHT, DType::F32, {8, 8});
  const int64_t h = p.new_buffer("h", BufferKind::ACTIVATION, DType::F32, {1, 8});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {1, 8});
  const int64_t c = p.new_counter(), d = p.new_counter(), e = p.new_counter();
  for (int i = 0; i < 4; ++i)
    p.add_task(Op::GEMV_TILE, {x, w}, {h}, c, {}, gemv_params(8, 2, 2 * i));
  add_nop(p, d, {{c, 4}}, "joined");
  p.add_task(Op::COPY, {h}, {y}, e, {{d, 1}}, {}, "reader");
  EXPECT_TRUE(Clean(validate(p)));
  p.tasks[4].waits[0].threshold = 1;  // first-of-4: rejected, and the read is unordered too
  const auto r = validate(p);
  EXPECT_TRUE(Rejected(r, "partial wait threshold 1"));
  EXPECT_TRUE(Rejected(r, "task 5 (reader) reads buffer #2 ('h') but writer task(s) [0, 1, 2, 3]"));
}

TEST(ValidateRaces, NeverProducedActivationIsRejected) {
  Tiny t = tiny();
  t.p.tasks[0].outputs = {t.p.new_buffer("other", BufferKind::ACTIVATION, DType::F16, {1, 16})};
  EXPECT_TRUE(
      Rejected(validate(t.p), "task 1 (proj0) reads buffer #3 ('h') that is never produced"));
}

TEST(ValidateRaces, ReadingOnlyYourOwnOutputIsAnUninitializedRead) {
  // ADD(z) -> z with no earlier writer of z: rejected; with a COPY -> z before it: accepted.
  Tiny t = tiny();
  const int64_t z = t.p.new_buffer("z", BufferKind::ACTIVATION, DType::F16, {1, 16});
  const int64_t c_init = t.p.new_counter("init");
  t.p.add_task(Op::ADD, {t.x, z}, {z}, t.p.new_counter(), {}, {}, "inplace");
  EXPECT_TRUE(Rejected(validate(t.p), "task 3 (inplace) reads buffer #5 ('z') but no writer of it "
                                      "is ordered before it (an uninitialized read), data RACE"));
  t.p.add_task(Op::COPY, {t.x}, {z}, c_init, {}, {}, "init");
  EXPECT_TRUE(Rejected(validate(t.p), "writer task(s) [4] are NOT ordered before or after it"));
  t.p.tasks[3].waits = {{c_init, 1}};
  EXPECT_TRUE(Clean(validate(t.p)));
}

TEST(ValidateRaces, InPlaceIoOutputNeedsAnEarlierWriter) {
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {4});
  const int64_t c0 = p.new_counter(), c1 = p.new_counter();
  p.add_task(Op::ADD, {y, x}, {y}, c1, {}, {}, "acc");
  EXPECT_TRUE(Rejected(validate(p), "task 0 (acc) reads buffer #1 ('y') but no writer of it is "
                                    "ordered before it"));
  p.tasks[0].waits = {{c0, 1}};
  p.add_task(Op::COPY, {x}, {y}, c0, {}, {}, "init");
  EXPECT_TRUE(Clean(validate(p)));
}

TEST(ValidateRaces, ReadOnlyKindsAndPriorKvStateNeedNoWriter) {
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t w = p.new_buffer("w", BufferKind::WEIGHT, DType::F32, {4});
  const int64_t k = p.new_buffer("k", BufferKind::CONST, DType::F32, {4});
  const int64_t kv = p.new_buffer("kv", BufferKind::KV_CACHE, DType::F32, {4});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {4});
  const int64_t c = p.new_counter();
  p.add_task(Op::ALLREDUCE_SHARD, {x, w, k, kv}, {y}, c, {}, {}, "sum");
  EXPECT_TRUE(Clean(validate(p)));
  p.buffers[static_cast<size_t>(kv)].kind = BufferKind::ACTIVATION;  // the same read, transient
  EXPECT_TRUE(Rejected(validate(p), "reads buffer #3 ('kv') that is never produced"));
}

// A -> B -> A: A's second writer is ordered after A's reader (ping-pong reuse).
struct PingPong {
  Program p;
  int64_t c_first, c_mid, c_second, c_last;
};

PingPong ping_pong() {
  PingPong k;
  Program& p = k.p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t a = p.new_buffer("A", BufferKind::ACTIVATION, DType::F32, {4});
  const int64_t b = p.new_buffer("B", BufferKind::ACTIVATION, DType::F32, {4});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {4});
  k.c_first = p.new_counter();
  k.c_mid = p.new_counter();
  k.c_second = p.new_counter();
  k.c_last = p.new_counter();
  p.add_task(Op::GELU, {x}, {a}, k.c_first, {}, {}, "x->A");
  p.add_task(Op::GELU, {a}, {b}, k.c_mid, {{k.c_first, 1}}, {}, "A->B");
  p.add_task(Op::GELU, {b}, {a}, k.c_second, {{k.c_mid, 1}}, {}, "B->A");
  p.add_task(Op::COPY, {a}, {y}, k.c_last, {{k.c_second, 1}}, {}, "A->y");
  return k;
}

TEST(ValidateOrdering, PingPongReuseIsValid) { EXPECT_TRUE(Clean(validate(ping_pong().p))); }

TEST(ValidateOrdering, PingPongWithTheSecondWriterUnorderedIsARace) {
  PingPong k = ping_pong();
  k.p.tasks[2].waits.clear();  // B->A no longer waits for A->B: it may overwrite A under it
  k.p.tasks[2].inputs = {0};   // (and reads x, so that B's read is not the finding)
  k.p.tasks[3].waits = {{k.c_second, 1}, {k.c_first, 1}};
  EXPECT_TRUE(Rejected(validate(k.p), "task 1 (A->B) reads buffer #1 ('A') but writer task(s) [2] "
                                      "are NOT ordered before or after it, data RACE"));
}

TEST(ValidateOrdering, ReaderBetweenTheTwoWritersOfAIsValidAfterTheLastRead) {
  // The final reader of A must follow the second writer: ordered after the first only, it races.
  PingPong k = ping_pong();
  k.p.tasks[3].waits = {{k.c_first, 1}};
  EXPECT_TRUE(Rejected(validate(k.p), "task 3 (A->y) reads buffer #1 ('A') but writer task(s) [2] "
                                      "are NOT ordered before or after it"));
}

// Two GEMV tiles of A [1, 8] (columns 0-3 and 4-7) under two counters, and a reader. Tiles
// under different counters are disjoint, so they do not race with each other; but a reader
// ordered after the first tile only would read columns 4-7 before they are written.
Program split_tiles(bool reader_waits_for_both) {
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {1, 4});
  const int64_t w = p.new_buffer("W", BufferKind::WEIGHT, DType::F32, {8, 4});
  const int64_t a = p.new_buffer("A", BufferKind::ACTIVATION, DType::F32, {1, 8});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {1, 8});
  const int64_t c0 = p.new_counter(), c1 = p.new_counter(), c2 = p.new_counter();
  Params lo, hi;
  for (Params* t : {&lo, &hi}) {
    t->set_int("K", 4);
    t->set_int("N_tile", 4);
  }
  lo.set_int("n_off", 0);
  hi.set_int("n_off", 4);
  p.add_task(Op::GEMV_TILE, {x, w}, {a}, c0, {}, lo, "A[0:4]");
  // The second tile waits for the reader when the reader does not wait for it: ordered after.
  std::vector<Wait> late;
  if (!reader_waits_for_both) late.push_back({c2, 1});
  p.add_task(Op::GEMV_TILE, {x, w}, {a}, c1, late, hi, "A[4:8]");
  std::vector<Wait> reader{{c0, 1}};
  if (reader_waits_for_both) reader.push_back({c1, 1});
  p.add_task(Op::COPY, {a}, {y}, c2, reader, {}, "A->y");
  return p;
}

TEST(ValidateOrdering, TilesUnderTwoCountersAreValidWhenTheReaderFollowsBoth) {
  EXPECT_TRUE(Clean(validate(split_tiles(true))));
}

TEST(ValidateOrdering, AReaderBeforeSomeTilesReadsUnwrittenColumns) {
  EXPECT_TRUE(Rejected(validate(split_tiles(false)),
                       "task 2 (A->y) reads buffer #2 ('A') but the writers ordered before it "
                       "write only part of it"));
}

TEST(ValidateOrdering, TilesThatLeaveColumnsUnwrittenAreAnUninitializedRead) {
  // One tile of 8 columns of a 16-column buffer, then a read of all of it: every writer precedes
  // the read, yet columns [8, 16) are never written (hostile battery, issue 10: was VALID).
  Tiny t = tiny();
  const int64_t z = t.p.new_buffer("z", BufferKind::IO_OUTPUT, DType::F16, {1, 16});
  t.p.buffers[static_cast<size_t>(t.y)].kind = BufferKind::ACTIVATION;
  t.p.tasks.pop_back();  // proj1 gone
  t.p.add_task(Op::COPY, {t.y}, {z}, t.p.new_counter(), {{t.c_proj, 1}}, {}, "read");
  EXPECT_TRUE(Rejected(validate(t.p), "task 2 (read) reads buffer #4 ('y') but its writers write "
                                      "only part of it (the rest is never written"));
  // Its twin with both tiles is valid, and so is a grid of 2-D GEMM tiles.
  Tiny u = tiny();
  const int64_t z2 = u.p.new_buffer("z", BufferKind::IO_OUTPUT, DType::F16, {1, 16});
  u.p.buffers[static_cast<size_t>(u.y)].kind = BufferKind::ACTIVATION;
  u.p.add_task(Op::COPY, {u.y}, {z2}, u.p.new_counter(), {{u.c_proj, 2}}, {}, "read");
  EXPECT_TRUE(Clean(validate(u.p)));
}

// COPY -> A, then n in-place ADD(A) -> A, each ordered after the previous, then A -> y.
Program accumulation(int64_t n) {
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t a = p.new_buffer("A", BufferKind::ACTIVATION, DType::F32, {4});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {4});
  for (int64_t i = 0; i < n + 2; ++i) p.new_counter();
  p.add_task(Op::COPY, {x}, {a}, 0, {}, {}, "init");
  for (int64_t i = 1; i <= n; ++i) p.add_task(Op::ADD, {a, x}, {a}, i, {{i - 1, 1}}, {}, "acc");
  p.add_task(Op::COPY, {a}, {y}, n + 1, {{n, 1}}, {}, "out");
  return p;
}

TEST(ValidateOrdering, InPlaceAccumulationChainIsValid) {
  EXPECT_TRUE(Clean(validate(accumulation(2))));
  Program p = accumulation(2);
  p.tasks[2].waits.clear();  // the second ADD no longer follows the first: both WAW and RAW
  const auto r = validate(p);
  EXPECT_TRUE(Rejected(r, "write-after-write RACE"));
  Program q = accumulation(2);
  q.tasks[3].waits = {{1, 1}};  // the reader skips the last ADD
  EXPECT_TRUE(Rejected(validate(q), "task 3 (out) reads buffer #1 ('A') but writer task(s) [2]"));
}

TEST(ValidateOrdering, KvReadBeforeTheAppendIsValidUnorderedIsNot) {
  // Attention reads prior-step state, then the append writes the cache after it: valid.
  Program p;
  const int64_t q = p.new_buffer("q", BufferKind::IO_INPUT, DType::F16, {1, 4});
  const int64_t k_new = p.new_buffer("k_new", BufferKind::IO_INPUT, DType::F16, {1, 1, 4});
  const int64_t cache = p.new_buffer("kv", BufferKind::KV_CACHE, DType::F16, {1, 8, 4});
  const int64_t out = p.new_buffer("out", BufferKind::IO_OUTPUT, DType::F16, {1, 4});
  const int64_t c_attn = p.new_counter(), c_app = p.new_counter();
  const Params at = attention_params(4, 1, 1, 1, 1);
  p.add_task(Op::ATTENTION_TILE, {q, cache, cache}, {out}, c_attn, {}, at, "attention");
  Params ap;
  ap.set_int("pos", 3);
  p.add_task(Op::KV_APPEND, {k_new, cache}, {cache}, c_app, {{c_attn, 1}}, ap, "append");
  EXPECT_TRUE(Clean(validate(p)));
  p.tasks[1].waits.clear();
  EXPECT_TRUE(Rejected(validate(p), "task 0 (attention) reads KV cache #2 ('kv') but writer "
                                    "task(s) [1] are NOT ordered before or after it, KV cache RACE"));
}

// ---- the race and page checks against a brute-force oracle
// ------------------------------------------ Random acyclic programs: consecutive groups of 1-3
// tasks share a counter; each task waits on a few counters of earlier groups (now and then with a
// partial or unsatisfiable threshold, which orders nothing), reads a few random buffers (earlier,
// same-group or later ones) and writes its own buffer or its group's shared one. Buffers sit on a
// handful of pages. The oracle computes every task's ancestor set explicitly; validate() must flag
// exactly the racy reads and exactly the pages holding an unordered pair.
struct Oracle {
  std::set<std::pair<int64_t, int64_t>> racy_reads;  // (task, buffer)
  std::set<int64_t> clobbered_pages;
};

Program random_program(std::mt19937_64& rng, int64_t n, int64_t n_pages, Oracle& oracle) {
  auto pick = [&](int64_t k) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(k)); };
  Program p;
  std::vector<int64_t> group_start(static_cast<size_t>(n)), counter_of(static_cast<size_t>(n));
  std::vector<int64_t> out_buffer(static_cast<size_t>(n));
  for (int64_t t = 0; t < n;) {
    const int64_t size = std::min<int64_t>(1 + pick(3), n - t);
    const int64_t c = p.new_counter();
    const bool shared = size > 1 && pick(3) == 0;
    const int64_t shared_buf =
        shared ? p.new_buffer("s" + std::to_string(t), BufferKind::ACTIVATION, DType::F32, {4})
               : -1;
    for (int64_t i = t; i < t + size; ++i) {
      group_start[static_cast<size_t>(i)] = t;
      counter_of[static_cast<size_t>(i)] = c;
      out_buffer[static_cast<size_t>(i)] =
          shared ? shared_buf
                 : p.new_buffer("b" + std::to_string(i), BufferKind::ACTIVATION, DType::F32, {4});
    }
    t += size;
  }
  std::vector<int64_t> np(p.counters.size(), 0);
  for (int64_t t = 0; t < n; ++t) ++np[static_cast<size_t>(counter_of[static_cast<size_t>(t)])];
  const auto nb = static_cast<int64_t>(p.buffers.size());
  for (int64_t t = 0; t < n; ++t) {
    std::vector<Wait> waits;
    const int64_t start = group_start[static_cast<size_t>(t)];
    // Usually wait on the previous group too, so that long happens-before chains exist.
    if (start > 0 && pick(10) < 6) {
      const int64_t c = counter_of[static_cast<size_t>(start - 1)];
      waits.push_back({c, np[static_cast<size_t>(c)]});
    }
    for (int64_t k = start > 0 ? pick(3) : 0; k > 0; --k) {
      const int64_t c = counter_of[static_cast<size_t>(pick(start))];
      int64_t th = np[static_cast<size_t>(c)];
      const int64_t roll = pick(40);
      if (roll == 0 && th > 1) th -= 1;
      if (roll == 1) th += 1;
      waits.push_back({c, th});
    }
    std::vector<int64_t> reads;
    for (int64_t k = 1 + pick(3); k > 0; --k) {
      // Mostly the previous group's output or an earlier one, sometimes anything at all.
      const int64_t roll = pick(10);
      if (start == 0 || roll == 0)
        reads.push_back(pick(nb));
      else
        reads.push_back(out_buffer[static_cast<size_t>(roll < 6 ? start - 1 : pick(start))]);
    }
    p.add_task(Op::ALLREDUCE_SHARD, reads, {out_buffer[static_cast<size_t>(t)]},
               counter_of[static_cast<size_t>(t)], waits, {}, "t" + std::to_string(t));
  }
  p.pages = PageAllocation{};
  for (int64_t pg = 0; pg < n_pages; ++pg)
    p.pages->pages.push_back(Page{pg, MemSpace::GLOBAL_SCRATCH, 16});
  for (int64_t b = 0; b < nb; ++b)
    if (pick(3) != 0) p.pages->buffer_to_page.emplace_back(b, pick(n_pages));

  // ---- the oracle: explicit ancestor sets over the sound (all-join) waits ----
  const size_t words = static_cast<size_t>(n + 63) / 64;
  std::vector<std::vector<uint64_t>> anc(static_cast<size_t>(n), std::vector<uint64_t>(words, 0));
  std::vector<std::vector<int64_t>> producers(p.counters.size());
  for (int64_t t = 0; t < n; ++t)
    producers[static_cast<size_t>(counter_of[static_cast<size_t>(t)])].push_back(t);
  auto before = [&](int64_t a, int64_t b) {
    return (anc[static_cast<size_t>(b)][static_cast<size_t>(a) / 64] >> (a % 64)) & 1;
  };
  for (int64_t t = 0; t < n; ++t) {
    std::map<int64_t, int64_t> max_th;
    for (const Wait& w : p.tasks[static_cast<size_t>(t)].waits)
      max_th[w.counter] = std::max(max_th[w.counter], w.threshold);
    for (const auto& [c, th] : max_th) {
      if (th != np[static_cast<size_t>(c)]) continue;
      for (int64_t q : producers[static_cast<size_t>(c)]) {
        for (size_t i = 0; i < words; ++i)
          anc[static_cast<size_t>(t)][i] |= anc[static_cast<size_t>(q)][i];
        anc[static_cast<size_t>(t)][static_cast<size_t>(q) / 64] |= uint64_t{1} << (q % 64);
      }
    }
  }
  std::vector<std::vector<int64_t>> writers(static_cast<size_t>(nb)),
      users(static_cast<size_t>(nb));
  for (int64_t t = 0; t < n; ++t) {
    writers[static_cast<size_t>(out_buffer[static_cast<size_t>(t)])].push_back(t);
    users[static_cast<size_t>(out_buffer[static_cast<size_t>(t)])].push_back(t);
    for (int64_t b : p.tasks[static_cast<size_t>(t)].inputs)
      users[static_cast<size_t>(b)].push_back(t);
  }
  for (int64_t t = 0; t < n; ++t)
    for (int64_t b : p.tasks[static_cast<size_t>(t)].inputs) {
      // The ordering rule: some writer before the read, every other writer before or after.
      const auto& ws = writers[static_cast<size_t>(b)];
      bool some_before = false;
      for (int64_t w : ws) {
        if (w == t) continue;
        if (before(w, t)) some_before = true;
        else if (!before(t, w)) oracle.racy_reads.emplace(t, b);
      }
      if (!some_before) oracle.racy_reads.emplace(t, b);
    }
  auto ordered = [&](int64_t a, int64_t b) {  // every use of a before every write of b
    for (int64_t u : users[static_cast<size_t>(a)])
      for (int64_t w : writers[static_cast<size_t>(b)])
        if (!before(u, w)) return false;
    return true;
  };
  std::map<int64_t, std::vector<int64_t>> occupants;
  for (const auto& [b, pg] : p.pages->buffer_to_page) occupants[pg].push_back(b);
  for (const auto& [pg, occ] : occupants)
    for (size_t i = 0; i < occ.size(); ++i)
      for (size_t j = i + 1; j < occ.size(); ++j)
        if (!ordered(occ[i], occ[j]) && !ordered(occ[j], occ[i])) oracle.clobbered_pages.insert(pg);
  return p;
}

void expect_matches_oracle(const Program& p, const Oracle& oracle) {
  const auto r = validate(p);
  ASSERT_TRUE(r.stats.acyclic);
  std::set<std::pair<int64_t, int64_t>> racy;
  for (const auto& e : r.errors) {
    long long t = 0, b = 0;
    if (e.find("data RACE") != std::string::npos &&
        std::sscanf(e.c_str(), "task %lld (%*[^)]) reads buffer #%lld", &t, &b) == 2)
      racy.emplace(t, b);
  }
  EXPECT_EQ(racy, oracle.racy_reads);
  std::set<int64_t> pages;
  for (const auto& w : r.warnings) {
    long long pg = 0;
    if (std::sscanf(w.c_str(), "page %lld reused by buffers", &pg) == 1) pages.insert(pg);
  }
  EXPECT_EQ(pages, oracle.clobbered_pages);
  if (std::getenv("AMK_ORACLE_STATS"))
    std::printf("tasks=%zu racy=%zu/%lld clobbered=%zu/%zu\n", p.tasks.size(),
                oracle.racy_reads.size(), static_cast<long long>(r.stats.hb_queries),
                oracle.clobbered_pages.size(), p.pages->pages.size());
}

TEST(ValidateOracle, SmallRandomProgramsMatchBruteForce) {
  for (uint64_t seed = 0; seed < 300; ++seed) {
    std::mt19937_64 rng(seed);
    Oracle oracle;
    const int64_t n = 5 + static_cast<int64_t>(seed % 60);
    const Program p = random_program(rng, n, 2 + n / 4, oracle);
    SCOPED_TRACE("seed " + std::to_string(seed));
    expect_matches_oracle(p, oracle);
  }
}

TEST(ValidateOracle, LargeRandomProgramsNeedingManySweepsMatchBruteForce) {
  // Thousands of distinct source counters: several 1,024-source sweeps, each over a window.
  for (uint64_t seed = 1000; seed < 1003; ++seed) {
    std::mt19937_64 rng(seed);
    Oracle oracle;
    const Program p = random_program(rng, 4000, 1500, oracle);
    SCOPED_TRACE("seed " + std::to_string(seed));
    expect_matches_oracle(p, oracle);
    EXPECT_FALSE(oracle.racy_reads.empty());
    EXPECT_FALSE(oracle.clobbered_pages.empty());
    EXPECT_LT(oracle.clobbered_pages.size(), p.pages->pages.size());
  }
}

// ---- KV cache ----------------------------------------------------------------------------------
struct KvProgram {
  Program p;
  int64_t c_append;
};

// append(k_new -> cache), then attention(q, cache, cache) ordered after it.
KvProgram kv_program(bool append) {
  KvProgram k;
  Program& p = k.p;
  const int64_t q = p.new_buffer("q", BufferKind::IO_INPUT, DType::F16, {1, 1, 4});
  const int64_t k_new = p.new_buffer("k_new", BufferKind::IO_INPUT, DType::F16, {1, 1, 4});
  const int64_t cache = p.new_buffer("kv", BufferKind::KV_CACHE, DType::F16, {1, 8, 4});
  const int64_t out = p.new_buffer("out", BufferKind::IO_OUTPUT, DType::F16, {1, 4});
  k.c_append = p.new_counter("append");
  const int64_t c_attn = p.new_counter("attn");
  if (append) {
    Params ap;
    ap.set_int("pos", 3);
    p.add_task(Op::KV_APPEND, {k_new, cache}, {cache}, k.c_append, {}, ap, "append");
  }
  const Params at = attention_params(4, 1, 1, 1, 1);
  std::vector<Wait> waits;
  if (append) waits.push_back({k.c_append, 1});
  p.add_task(Op::ATTENTION_TILE, {q, cache, cache}, {out}, c_attn, waits, at, "attention");
  return k;
}

TEST(ValidateKvCache, ReadAfterTheAppendIsFine) {
  EXPECT_TRUE(Clean(validate(kv_program(true).p)));
}

TEST(ValidateKvCache, ReadBeforeTheAppendIsARace) {
  KvProgram k = kv_program(true);
  k.p.tasks[1].waits.clear();
  EXPECT_TRUE(Rejected(validate(k.p),
                       "task 1 (attention) reads KV cache #2 ('kv') but writer task(s) [0] "
                       "are NOT ordered before or after it, KV cache RACE"));
}

TEST(ValidateKvCache, PriorStepStateWithoutAppendIsFine) {
  EXPECT_TRUE(Clean(validate(kv_program(false).p)));
}

// Two KV_APPENDs of one row each (at pos0 and pos1, flags as given) under one counter, then an
// attention that waits for both.
Program two_appends(int64_t pos0, int64_t pos1, int64_t flags = 0, int64_t rows = 1) {
  Program p;
  const int64_t q = p.new_buffer("q", BufferKind::IO_INPUT, DType::F16, {1, 4});
  const int64_t k0 = p.new_buffer("k0", BufferKind::IO_INPUT, DType::F16, {rows, 1, 4});
  const int64_t k1 = p.new_buffer("k1", BufferKind::IO_INPUT, DType::F16, {1, 4});
  const int64_t cache = p.new_buffer("kv", BufferKind::KV_CACHE, DType::F16, {1, 8, 4});
  const int64_t out = p.new_buffer("out", BufferKind::IO_OUTPUT, DType::F16, {1, 4});
  const int64_t c_app = p.new_counter(), c_attn = p.new_counter();
  for (auto [k, pos] : {std::pair{k0, pos0}, std::pair{k1, pos1}}) {
    Params ap;
    ap.set_int("pos", pos);
    if (flags) ap.set_int("flags", flags);
    p.add_task(Op::KV_APPEND, {k, cache}, {cache}, c_app, {}, ap, "append" + std::to_string(pos));
  }
  const Params at = attention_params(4, 1, 1, 1, 2);
  p.add_task(Op::ATTENTION_TILE, {q, cache, cache}, {out}, c_attn, {{c_app, 2}}, at, "attention");
  return p;
}

TEST(ValidateKvCache, AppendsToDistinctRowsUnderOneCounterAreDisjoint) {
  EXPECT_TRUE(Clean(validate(two_appends(0, 1))));
  EXPECT_TRUE(Rejected(validate(two_appends(1, 1)),
                       "writers 0 (append1) and 1 (append1) share a counter but their tiles "
                       "OVERLAP"));
  // Two rows from pos 0 ([0, 2)) overlap the append at row 1; from pos 2 they do not.
  EXPECT_TRUE(Rejected(validate(two_appends(0, 1, 0, 2)), "OVERLAP"));
  EXPECT_TRUE(Clean(validate(two_appends(2, 1, 0, 2))));
}

TEST(ValidateKvCache, RuntimePositionAppendsWriteTheWholeCache) {
  // flags bit 0: the row is the step's position plus pos, unknown statically: they may collide.
  EXPECT_TRUE(Rejected(validate(two_appends(0, 1, 1)), "OVERLAP"));
}

// ---- params against buffer shapes (each rejected case beside its accepted twin) ----
TEST(ValidateParamShapes, GemvTileMustStayInsideWeightAndOutput) {
  EXPECT_TRUE(Clean(validate(tiny().p)));
  Tiny t = tiny();
  t.p.tasks[2].params = gemv_params(16, 16, 8);  // columns [8, 24) of a 16-row weight
  const auto r = validate(t.p);
  EXPECT_TRUE(Rejected(r, "task 2 (proj1) GEMV_TILE: param n_off 8 + N_tile 16 exceeds the weight "
                          "rows N 16 of input 1 (weight) buffer #2 ('proj.w') shape [16,16]"));
  EXPECT_TRUE(Rejected(r, "exceeds the columns of output 0 buffer #4 ('y') shape [1,16]"));
}

TEST(ValidateParamShapes, GemvKMustMatchXAndWeight) {
  Tiny t = tiny();
  t.p.tasks[1].params = gemv_params(8, 8, 0);
  const auto r = validate(t.p);
  EXPECT_TRUE(Rejected(r, "task 1 (proj0) GEMV_TILE: param K 8 is not the last dimension of input 0 "
                          "(x) buffer #3 ('h') shape [1,16]"));
  EXPECT_TRUE(Rejected(r, "param K 8 is not the columns of input 1 (weight) buffer #2 ('proj.w')"));
}

TEST(ValidateParamShapes, NormHiddenMustMatchX) {
  Tiny t = tiny();
  t.p.tasks[0].params = norm_params(8);
  EXPECT_TRUE(Rejected(validate(t.p), "task 0 (norm) RMSNORM: param hidden 8 is not the last "
                                      "dimension of input 0 (x) buffer #0 ('x') shape [1,16]"));
}

TEST(ValidateParamShapes, KvAppendMustStayInsideTheCache) {
  EXPECT_TRUE(Clean(validate(two_appends(7, 6))));  // the cache has 8 rows
  EXPECT_TRUE(Rejected(validate(two_appends(8, 6)),
                       "task 0 (append8) KV_APPEND: param pos 8 + 1 new row(s) exceeds the rows of "
                       "input 1 (cache) buffer #3 ('kv') shape [1,8,4]"));
  EXPECT_TRUE(Rejected(validate(two_appends(7, 5, 0, 2)), "param pos 7 + 2 new row(s) exceeds"));
  EXPECT_TRUE(Rejected(validate(two_appends(8, 6, 1)), "param pos 8 + 1 new row(s) exceeds"));
}

TEST(ValidateParamShapes, AttentionWindowAndHeadsMustMatchTheCache) {
  EXPECT_TRUE(Clean(validate(kv_program(true).p)));
  KvProgram k = kv_program(true);
  k.p.tasks[1].params.set_int("kv_len", 8);  // [1, 9) of 8 rows
  EXPECT_TRUE(Rejected(validate(k.p), "task 1 (attention) ATTENTION_TILE: params kv_start 1 + "
                                      "kv_len 8 exceed the rows of input 1 (k cache) buffer #2"));
  k = kv_program(true);
  k.p.tasks[1].params.set_int("head_dim", 2);
  EXPECT_TRUE(Rejected(validate(k.p), "param head_dim 2 disagrees with input 1 (k cache)"));
  k = kv_program(true);
  k.p.tasks[1].params.set_int("n_kv_heads", 2);
  k.p.tasks[1].params.set_int("n_heads", 2);
  EXPECT_TRUE(Rejected(validate(k.p), "param n_kv_heads 2 disagrees with input 2 (v cache)"));
}

TEST(ValidateParamShapes, NegativeOffsetsAndEmptyTilesAreRejected) {
  // Each of these passed validate() and failed only in the VM (hostile battery, issue 10).
  Tiny t = tiny();
  t.p.tasks[1].params = gemv_params(16, 4, -4);  // columns [-4, 0): before the output
  EXPECT_TRUE(Rejected(validate(t.p), "task 1 (proj0) GEMV_TILE: param n_off -4 must be >= 0"));
  t = tiny();
  t.p.tasks[1].params = gemv_params(16, 0, 0);
  EXPECT_TRUE(Rejected(validate(t.p), "param N_tile 0 must be >= 1"));
  t = tiny();
  t.p.tasks[1].params = gemv_params(0, 8, 0);
  EXPECT_TRUE(Rejected(validate(t.p), "param K 0 must be >= 1"));
  EXPECT_TRUE(Rejected(validate(two_appends(-1, 6)), "KV_APPEND: param pos -1 must be >= 0"));
  KvProgram k = kv_program(true);
  k.p.tasks[1].params.set_int("kv_start", -1);
  EXPECT_TRUE(Rejected(validate(k.p), "ATTENTION_TILE: param kv_start -1 must be >= 0"));
}

// x [2, 8] -> GEMM tiles of one row x 4 columns at (m_off, n_off) -> A -> COPY -> y.
Program gemm_tiles(const std::vector<std::pair<int64_t, int64_t>>& at) {
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {2, 8});
  const int64_t w = p.new_buffer("w", BufferKind::WEIGHT, DType::F32, {8, 8});
  const int64_t a = p.new_buffer("A", BufferKind::ACTIVATION, DType::F32, {2, 8});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {2, 8});
  const int64_t c = p.new_counter(), done = p.new_counter();
  for (const auto& [m_off, n_off] : at) {
    Params params = gemv_params(8, 4, n_off);
    params.set_int("M_tile", 1);
    params.set_int("m_off", m_off);
    p.add_task(Op::GEMM_TILE, {x, w}, {a}, c, {}, params, "tile");
  }
  p.add_task(Op::COPY, {a}, {y}, done, {{c, static_cast<int64_t>(at.size())}}, {}, "read");
  return p;
}

TEST(ValidateParamShapes, GemmTileRowsMustStayInsideX) {
  EXPECT_TRUE(Clean(validate(gemm_tiles({{0, 0}, {0, 4}, {1, 0}, {1, 4}}))));
  EXPECT_TRUE(Rejected(validate(gemm_tiles({{2, 0}})),
                       "task 0 (tile) GEMM_TILE: param m_off 2 + M_tile 1 exceeds the 2 rows of "
                       "input 0 (x) buffer #0 ('x') shape [2,8]"));
  EXPECT_TRUE(Rejected(validate(gemm_tiles({{-1, 0}})), "param m_off -1 must be >= 0"));
}

TEST(ValidateParamShapes, PartialArgmaxMustStayInsideTheLogitsAndThePairs) {
  const auto argmax = [](int64_t n_off, int64_t n_tile, int64_t m_off) {
    Program p;
    const int64_t logits = p.new_buffer("logits", BufferKind::IO_INPUT, DType::F32, {1, 16});
    const int64_t pairs = p.new_buffer("pairs", BufferKind::IO_OUTPUT, DType::F32, {2, 2});
    Params params;
    params.set_int("n_off", n_off);
    params.set_int("N_tile", n_tile);
    params.set_int("m_off", m_off);
    p.add_task(Op::SAMPLE_ARGMAX, {logits}, {pairs}, p.new_counter(), {}, params, "part");
    return p;
  };
  EXPECT_TRUE(Clean(validate(argmax(8, 8, 1))));
  EXPECT_TRUE(Rejected(validate(argmax(8, 16, 0)),
                       "range n_off 8, N_tile 16 must lie in the 16 logits of input 0"));
  EXPECT_TRUE(Rejected(validate(argmax(0, 8, 2)),
                       "must be [P, 2] (value, index) pairs with a row m_off 2"));
}

TEST(ValidateParamShapes, SamplingTakesALogitsRowAndTheTwoSettingsBuffers) {
  const auto sampling = [](DType floats_dtype, int64_t ints_numel, bool drop_ints) {
    Program p;
    const int64_t logits = p.new_buffer("logits", BufferKind::IO_INPUT, DType::F32, {1, 16});
    const int64_t f = p.new_buffer("sampling_floats", BufferKind::IO_INPUT, floats_dtype, {4});
    const int64_t i = p.new_buffer("sampling_ints", BufferKind::IO_INPUT, DType::I32, {ints_numel});
    const int64_t next = p.new_buffer("next", BufferKind::IO_OUTPUT, DType::I32, {1});
    Params params;
    params.set_int("flags", 2);
    std::vector<int64_t> in{logits, f};
    if (!drop_ints) in.push_back(i);
    p.add_task(Op::SAMPLE_ARGMAX, in, {next}, p.new_counter(), {}, params, "sample");
    return p;
  };
  EXPECT_TRUE(Clean(validate(sampling(DType::F32, 8, false))));
  EXPECT_TRUE(Rejected(validate(sampling(DType::BF16, 8, false)), "must be F32 with at least 4 elements"));
  EXPECT_TRUE(Rejected(validate(sampling(DType::F32, 5, false)), "must be I32 with at least 8 elements"));
  EXPECT_TRUE(Rejected(validate(sampling(DType::F32, 8, true)), "3 inputs, not 2"));
}

TEST(ValidateParamShapes, EmbedHiddenMustDivideTheTableRow) {
  const auto embed = [](int64_t hidden, int64_t out_cols) {
    Program p;
    const int64_t ids = p.new_buffer("ids", BufferKind::IO_INPUT, DType::I32, {1});
    const int64_t table = p.new_buffer("table", BufferKind::WEIGHT, DType::F32, {16, 8});
    const int64_t out = p.new_buffer("e", BufferKind::IO_OUTPUT, DType::F32, {1, out_cols});
    Params params;
    params.set_int("hidden", hidden);
    p.add_task(Op::EMBED, {ids, table}, {out}, p.new_counter(), {}, params, "embed");
    return p;
  };
  EXPECT_TRUE(Clean(validate(embed(8, 8))));
  EXPECT_TRUE(Rejected(validate(embed(3, 8)), "param hidden 3 must be >= 1 and divide the row "
                                              "width 8 of input 1 (table)"));
  EXPECT_TRUE(Rejected(validate(embed(8, 4)), "output 0 buffer #2 ('e') shape [1,4] has 4 "
                                              "elements, 1 ids x row width 8 make 8"));
}

TEST(ValidateParamShapes, AttentionHeadsMustMatchQAndTheHeadRange) {
  KvProgram k = kv_program(true);
  const int64_t n_heads = k.p.tasks[1].params.find("n_heads")->i;
  k.p.tasks[1].params.set_int("n_heads", 2 * n_heads);
  EXPECT_TRUE(Rejected(validate(k.p), "ATTENTION_TILE: input 0 (q)"));
  k = kv_program(true);
  k.p.tasks[1].params.set_int("n_off", 0);
  k.p.tasks[1].params.set_int("N_tile", n_heads + 1);
  EXPECT_TRUE(Rejected(validate(k.p), "head range n_off 0, N_tile " + std::to_string(n_heads + 1) +
                                          " must lie in the " + std::to_string(n_heads) + " heads"));
  k = kv_program(true);
  k.p.tasks[1].params.set_int("n_off", 0);
  EXPECT_TRUE(Rejected(validate(k.p), "params n_off and N_tile (a head range) come together"));
}

TEST(ValidateParamShapes, CombineHeadRangeMustFitItsOutput) {
  const auto combine = [](int64_t n_off) {
    Program p;
    const int64_t p0 = p.new_buffer("p0", BufferKind::IO_INPUT, DType::F32, {12});
    const int64_t p1 = p.new_buffer("p1", BufferKind::IO_INPUT, DType::F32, {12});
    const int64_t out = p.new_buffer("o", BufferKind::IO_OUTPUT, DType::F32, {1, 16});
    Params params;
    params.set_int("head_dim", 4);
    params.set_int("n_off", n_off);
    params.set_int("N_tile", 2);
    p.add_task(Op::ATTENTION_COMBINE, {p0, p1}, {out}, p.new_counter(), {}, params, "combine");
    return p;
  };
  EXPECT_FALSE(Rejected(validate(combine(2)), "head range"));  // heads [2, 4) of 4
  EXPECT_TRUE(Rejected(validate(combine(3)), "head range n_off 3, N_tile 2 (head_dim 4) must lie "
                                             "in the 16 elements of output 0"));
}


// A partial combine (flags bit 1, a level of a combine tree) writes a partial of its inputs'
// size, whole: validate() names a wrong output size, a head range and an unknown flag.
TEST(ValidateParamShapes, PartialCombineWritesAWholePartial) {
  const auto combine = [](int64_t out_numel, int64_t flags, bool ranged) {
    Program p;
    const int64_t p0 = p.new_buffer("p0", BufferKind::IO_INPUT, DType::F32, {2, 6});
    const int64_t p1 = p.new_buffer("p1", BufferKind::IO_INPUT, DType::F32, {2, 6});
    const int64_t out = p.new_buffer("o", BufferKind::IO_OUTPUT, DType::F32, {out_numel});
    Params params;
    params.set_int("head_dim", 4);
    params.set_int("flags", flags);
    if (ranged) {
      params.set_int("n_off", 0);
      params.set_int("N_tile", 2);
    }
    p.add_task(Op::ATTENTION_COMBINE, {p0, p1}, {out}, p.new_counter(), {}, params, "combine");
    return p;
  };
  EXPECT_TRUE(validate(combine(12, 2, false)).ok);
  EXPECT_TRUE(Rejected(validate(combine(8, 2, false)), "writes a partial of its inputs' 12 elements"));
  EXPECT_TRUE(Rejected(validate(combine(12, 2, true)), "takes no head range"));
  EXPECT_TRUE(Rejected(validate(combine(8, 4, false)), "knows only bit 1"));
}


// GLU tiles (GEMV_GLU_TILE, or with `norm` RMSNORM_GEMV_GLU_TILE) of `width` features at the
// given offsets under one counter, into act [1, 16]: x [1, 8], W_gate and W_up [16, 8] F32 (the
// up weight's shape and dtype as given), and `biases` biases of `bias_len` after them. Every
// buffer exists whether read or not, so the ids in the messages stay put.
struct GluSpec {
  std::vector<int64_t> offsets{0, 8};
  int64_t width = 8;
  bool norm = false;
  std::vector<int64_t> up_shape{16, 8};
  DType up_dtype = DType::F32;
  int biases = 0;
  int64_t bias_len = 16;
  int64_t hidden = 8;
};

Program glu_tiles(const GluSpec& s) {
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {1, 8});
  const int64_t nw = p.new_buffer("norm.w", BufferKind::WEIGHT, DType::F32, {8});
  const int64_t wg = p.new_buffer("gate.w", BufferKind::WEIGHT, DType::F32, {16, 8});
  const int64_t wu = p.new_buffer("up.w", BufferKind::WEIGHT, s.up_dtype, s.up_shape);
  const int64_t bg = p.new_buffer("gate.b", BufferKind::WEIGHT, DType::F32, {s.bias_len});
  const int64_t bu = p.new_buffer("up.b", BufferKind::WEIGHT, DType::F32, {s.bias_len});
  const int64_t act = p.new_buffer("act", BufferKind::IO_OUTPUT, DType::F32, {1, 16});
  const int64_t c = p.new_counter();
  std::vector<int64_t> in{x};
  if (s.norm) in.push_back(nw);
  in.insert(in.end(), {wg, wu});
  if (s.biases > 0) in.push_back(bg);
  if (s.biases > 1) in.push_back(bu);
  for (size_t i = 0; i < s.offsets.size(); ++i) {
    Params params = gemv_params(8, s.width, s.offsets[i]);
    if (s.norm) {
      params.set_real("eps", 1e-5);
      params.set_int("hidden", s.hidden);
    }
    p.add_task(s.norm ? Op::RMSNORM_GEMV_GLU_TILE : Op::GEMV_GLU_TILE, in, {act}, c, {}, params,
               "glu" + std::to_string(i));
  }
  return p;
}

// Each rejected case beside its accepted twin, for both GLU ops (the norm moves the weights one
// input on, and the messages number them so).
TEST(ValidateParamShapes, GluTileMustStayInsideItsWeightsAndOutput) {
  for (bool norm : {false, true}) {
    SCOPED_TRACE(norm ? "RMSNORM_GEMV_GLU_TILE" : "GEMV_GLU_TILE");
    const std::string op = norm ? "RMSNORM_GEMV_GLU_TILE" : "GEMV_GLU_TILE";
    const std::string w = norm ? "2" : "1";
    EXPECT_TRUE(Clean(validate(glu_tiles({.norm = norm}))));
    const auto r = validate(glu_tiles({.offsets = {0, 12}, .norm = norm}));
    EXPECT_TRUE(Rejected(r, "task 1 (glu1) " + op + ": param n_off 12 + N_tile 8 exceeds the " +
                                "weight rows N 16 of input " + w + " (weight) buffer #2 ('gate.w')"));
    EXPECT_TRUE(Rejected(r, "exceeds the columns of output 0 buffer #6 ('act') shape [1,16]"));
    EXPECT_TRUE(Rejected(validate(glu_tiles({.offsets = {0, -8}, .norm = norm})),
                         "param n_off -8 must be >= 0"));
  }
  // The norm's hidden is x's last dimension (and so K's).
  EXPECT_TRUE(Rejected(validate(glu_tiles({.norm = true, .hidden = 4})),
                       "RMSNORM_GEMV_GLU_TILE: param hidden 4 is not the last dimension of input "
                       "0 (x) buffer #0 ('x') shape [1,8]"));
}

TEST(ValidateParamShapes, GluUpWeightIsTheGateWeightsTwinAndBiasesComeInPairs) {
  for (bool norm : {false, true}) {
    SCOPED_TRACE(norm ? "RMSNORM_GEMV_GLU_TILE" : "GEMV_GLU_TILE");
    const std::string gate = norm ? "2" : "1", up = norm ? "3" : "2";
    // A taller up weight passes check_gemv's row bound (which reads the gate weight): only the
    // twin check catches it. Another dtype likewise.
    EXPECT_TRUE(Rejected(validate(glu_tiles({.norm = norm, .up_shape = {24, 8}})),
                         "input " + up + " (up weight) buffer #3 ('up.w') shape [24,8] F32 "
                         "differs from input " + gate + " (gate weight) buffer #2 ('gate.w') "
                         "shape [16,8] F32: both must have the same shape and dtype"));
    EXPECT_TRUE(Rejected(validate(glu_tiles({.norm = norm, .up_dtype = DType::BF16})),
                         "shape [16,8] BF16 differs from input " + gate));
    // A pair of [N] biases is fine; one alone, or a pair of the wrong length, is not.
    EXPECT_TRUE(Clean(validate(glu_tiles({.norm = norm, .biases = 2}))));
    EXPECT_TRUE(Rejected(validate(glu_tiles({.norm = norm, .biases = 1})),
                         "a bias for one projection alone"));
    EXPECT_TRUE(Rejected(validate(glu_tiles({.norm = norm, .biases = 2, .bias_len = 8})),
                         "(gate bias) buffer #4 ('gate.b') shape [8] is not [N] for the weights' "
                         "16 rows"));
  }
}


// ---- WAW
// ------------------------------------------------------------------------------------------- `n`
// GEMV tiles of width 8 at the given offsets, all under one counter, into y.
Program tiles_at(const std::vector<int64_t>& offsets, int64_t width = 8) {
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {1, 8});
  const int64_t w = p.new_buffer("w", BufferKind::WEIGHT, DType::F32, {64000, 8});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {1, 64000});
  const int64_t c = p.new_counter();
  for (size_t i = 0; i < offsets.size(); ++i)
    p.add_task(Op::GEMV_TILE, {x, w}, {y}, c, {}, gemv_params(8, width, offsets[i]),
               "tile" + std::to_string(i));
  return p;
}

TEST(ValidateWaw, OverlappingTilesUnderOneCounterRace) {
  EXPECT_TRUE(Rejected(validate(tiles_at({0, 4})),
                       "multi-writer WAW race on buffer #2 ('y'): writers 0 (tile0) and 1 (tile1) "
                       "share a counter but their tiles OVERLAP"));
  EXPECT_TRUE(Clean(validate(tiles_at({0, 8}))));
  EXPECT_TRUE(Rejected(validate(tiles_at({0, 0})), "OVERLAP"));  // the same tile twice
}

TEST(ValidateWaw, ThousandDisjointTilesInAnyOrderAreAccepted) {
  std::vector<int64_t> offs;
  for (int64_t i = 0; i < 1000; ++i) offs.push_back(((i * 7919) % 1000) * 8);
  EXPECT_TRUE(Clean(validate(tiles_at(offs))));
  offs[500] = offs[20] + 3;  // one tile now straddles another
  EXPECT_TRUE(Rejected(validate(tiles_at(offs)), "OVERLAP"));
}

// Sibling GLU tiles write their features' columns of the one output, as GEMV tiles do: disjoint
// tiles under one counter are accepted, overlapping ones are a race.
TEST(ValidateWaw, OverlappingGluTilesUnderOneCounterRace) {
  for (bool norm : {false, true}) {
    SCOPED_TRACE(norm ? "RMSNORM_GEMV_GLU_TILE" : "GEMV_GLU_TILE");
    EXPECT_TRUE(Clean(validate(glu_tiles({.offsets = {0, 4, 8, 12}, .width = 4, .norm = norm}))));
    EXPECT_TRUE(Rejected(validate(glu_tiles({.offsets = {0, 4, 6, 12}, .width = 4, .norm = norm})),
                         "writers 1 (glu1) and 2 (glu2) share a counter but their tiles OVERLAP"));
    EXPECT_TRUE(Rejected(validate(glu_tiles({.offsets = {8, 8}, .norm = norm})), "OVERLAP"));
  }
}

TEST(ValidateWaw, GemmTilesAreDisjointAlongEitherAxis) {
  auto gemm = [](int64_t m_off, int64_t n_off) {
    Params p;
    p.set_int("M_tile", 4);
    p.set_int("K", 8);
    p.set_int("N_tile", 4);
    p.set_int("n_off", n_off);
    p.set_int("m_off", m_off);
    return p;
  };
  auto program = [&](std::vector<std::pair<int64_t, int64_t>> tiles) {
    Program p;
    const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {8, 8});
    const int64_t w = p.new_buffer("w", BufferKind::WEIGHT, DType::F32, {8, 8});
    const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {8, 8});
    const int64_t c = p.new_counter();
    for (auto [m, n] : tiles) p.add_task(Op::GEMM_TILE, {x, w}, {y}, c, {}, gemm(m, n));
    return p;
  };
  EXPECT_TRUE(Clean(validate(program({{0, 0}, {0, 4}, {4, 0}, {4, 4}}))));
  EXPECT_TRUE(Rejected(validate(program({{0, 0}, {0, 4}, {4, 0}, {2, 2}})), "OVERLAP"));
}

// ---- a stack of attention partials [S * n_heads, head_dim + 2] and the tiles that merge it ----
// Partial ATTENTION_TILE block tasks (4 heads in 2 GQA groups of an [2, 8, 4] cache, head_dim 4)
// writing their heads' rows of slab m_off of one stack of partials "parts" of `shape` (2 slabs
// of [4, 6] unless given; its rows are whatever its last dimension makes them). With `merge`,
// two COMBINE_GEMV_ADD_TILE tiles of 8 columns, ordered after every block, read the stack.
struct StackBlock {
  std::optional<int64_t> m_off;                      // absent: no param (slab 0)
  std::optional<std::pair<int64_t, int64_t>> heads;  // n_off, N_tile; absent: every head
  size_t counter = 0;  // blocks under different counters are unordered
};

Program stack_program(const std::vector<StackBlock>& blocks,
                      const std::vector<int64_t>& shape = {8, 6}, bool merge = false) {
  Program p;
  const int64_t q = p.new_buffer("q", BufferKind::IO_INPUT, DType::F32, {1, 16});
  const int64_t cache = p.new_buffer("kv", BufferKind::KV_CACHE, DType::F32, {2, 8, 4});
  const int64_t parts = p.new_buffer(
      "parts", merge ? BufferKind::ACTIVATION : BufferKind::IO_OUTPUT, DType::F32, shape);
  std::vector<int64_t> counters, produced;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const StackBlock& b = blocks[i];
    while (counters.size() <= b.counter) {
      counters.push_back(p.new_counter());
      produced.push_back(0);
    }
    Params at = attention_params(4, 4, 2, 0, 2);
    at.set_int("flags", 2);  // partial
    if (b.m_off) at.set_int("m_off", *b.m_off);
    if (b.heads) {
      at.set_int("n_off", b.heads->first);
      at.set_int("N_tile", b.heads->second);
    }
    p.add_task(Op::ATTENTION_TILE, {q, cache, cache}, {parts}, counters[b.counter], {}, at,
               "block" + std::to_string(i));
    ++produced[b.counter];
  }
  if (merge) {
    const int64_t w = p.new_buffer("o.w", BufferKind::WEIGHT, DType::F32, {16, 16});
    const int64_t res = p.new_buffer("res", BufferKind::IO_INPUT, DType::F32, {1, 16});
    const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {1, 16});
    std::vector<Wait> waits;
    for (size_t i = 0; i < counters.size(); ++i) waits.push_back({counters[i], produced[i]});
    const int64_t c = p.new_counter();
    for (int64_t off : {0, 8}) {
      Params mp = gemv_params(16, 8, off);
      mp.set_int("head_dim", 4);
      mp.set_int("n_heads", 4);
      p.add_task(Op::COMBINE_GEMV_ADD_TILE, {parts, w, res}, {y}, c, waits, mp,
                 "o_proj" + std::to_string(off));
    }
  }
  return p;
}

// The stack's shapes: rows of one head's partial (2-D and 3-D), one flat row, a row a slab.
const std::vector<std::vector<int64_t>> kStackShapes = {{8, 6}, {2, 4, 6}, {48}, {2, 24}};

// Blocks write only their heads' rows of their slab: disjoint slabs or head ranges under one
// counter are accepted, the same rows twice (m_off absent is slab 0; no head range is every
// head) are a race, whatever the stack's shape.
TEST(ValidateWaw, AttentionBlocksWriteTheirRowsOfAStackOfPartials) {
  const std::pair<int64_t, int64_t> lo{0, 2}, hi{2, 2};
  for (const auto& shape : kStackShapes) {
    SCOPED_TRACE("parts [" + std::to_string(shape[0]) + ",...] rank " +
                 std::to_string(shape.size()));
    EXPECT_TRUE(Clean(validate(stack_program({{0, lo}, {0, hi}, {1, lo}, {1, hi}}, shape))));
    EXPECT_TRUE(Clean(validate(stack_program({{1, hi}, {0, lo}, {1, lo}, {0, hi}}, shape))));
    EXPECT_TRUE(Clean(validate(stack_program({{0, {}}, {1, {}}}, shape))));
    EXPECT_TRUE(Clean(validate(stack_program({{{}, lo}, {{}, hi}, {1, {}}}, shape))));
    EXPECT_TRUE(Rejected(validate(stack_program({{0, lo}, {1, lo}, {1, lo}}, shape)),
                         "writers 1 (block1) and 2 (block2) share a counter but their tiles "
                         "OVERLAP"));
    EXPECT_TRUE(Rejected(validate(stack_program({{{}, hi}, {1, lo}, {0, hi}}, shape)), "OVERLAP"));
    EXPECT_TRUE(Rejected(validate(stack_program({{0, {}}, {1, {}}, {1, hi}}, shape)), "OVERLAP"));
    // Unordered writers under two counters: disjoint rows prove them apart, the same rows race.
    EXPECT_TRUE(Clean(validate(stack_program({{0, lo, 0}, {0, hi, 1}, {1, {}, 1}}, shape))));
    EXPECT_TRUE(Rejected(validate(stack_program({{0, lo, 0}, {0, lo, 1}}, shape)),
                         "writers 0 (block0) and 1 (block1) do not share one counter"));
  }
}

// The merge reads the whole stack: every slab's rows must be written before it.
TEST(ValidateRaces, MergingAStackOfPartialsNeedsEverySlabWritten) {
  const std::pair<int64_t, int64_t> lo{0, 2}, hi{2, 2};
  for (const auto& shape : kStackShapes) {
    SCOPED_TRACE("parts [" + std::to_string(shape[0]) + ",...] rank " +
                 std::to_string(shape.size()));
    EXPECT_TRUE(Clean(validate(stack_program({{0, lo}, {0, hi}, {1, lo}, {1, hi}}, shape, true))));
    EXPECT_TRUE(Clean(validate(stack_program({{0, {}}, {1, {}}}, shape, true))));
    EXPECT_TRUE(Rejected(validate(stack_program({{0, {}}}, shape, true)),
                         "task 1 (o_proj0) reads buffer #2 ('parts') but its writers write only "
                         "part of it (the rest is never written"));
    if (shape != std::vector<int64_t>{2, 24})  // a run inside a row: coverage is not decided
      EXPECT_TRUE(Rejected(validate(stack_program({{0, {}}, {1, lo}}, shape, true)),
                           "its writers write only part of it"));
  }
}

TEST(ValidateParamShapes, AttentionStackSlabMustBeInTheStack) {
  const std::pair<int64_t, int64_t> lo{0, 2};
  EXPECT_TRUE(Clean(validate(stack_program({{1, lo}}))));
  EXPECT_TRUE(Rejected(validate(stack_program({{2, lo}})),
                       "task 0 (block0) ATTENTION_TILE: param m_off 2 is not a slab of output 0 "
                       "buffer #2 ('parts') shape [8,6], a stack of 2 partials of n_heads 4 x "
                       "(head_dim + 2) 6"));
  EXPECT_TRUE(
      Rejected(validate(stack_program({{2, {}}}, {2, 4, 6})), "param m_off 2 is not a slab"));
  EXPECT_TRUE(Rejected(validate(stack_program({{-1, lo}})), "param m_off -1 is not a slab"));
  // Not a stack: the block's own partials (its 2 heads, or all 4), where m_off must be 0.
  EXPECT_TRUE(Clean(validate(stack_program({{0, lo}}, {2, 6}))));
  EXPECT_TRUE(Rejected(validate(stack_program({{1, lo}}, {2, 6})),
                       "param m_off 1 needs output 0 to be a stack of partials [S x n_heads, "
                       "head_dim + 2] (flags bit 1), not buffer #2 ('parts') shape [2,6]"));
  EXPECT_TRUE(Rejected(validate(stack_program({{1, {}}}, {4, 6})), "param m_off 1 needs output 0"));
  // Neither a stack nor the block's partials.
  EXPECT_TRUE(Rejected(validate(stack_program({{0, lo}}, {7, 6})), "output 0 buffer #2 ('parts')"));
}

// Two COMBINE_GEMV_ADD_TILE tiles (columns [0, 8) and [8, 16), unless `offsets`) merging a stack
// of partials of 4 heads of head_dim 4 given as an input of `parts_shape`: [parts, W [16, 16],
// residual [1, 16](, bias [16])] -> y [1, 16]; `edit` changes the tiles' params.
Program merge_program(const std::vector<int64_t>& parts_shape, bool bias = false,
                      const std::function<void(Params&)>& edit = {},
                      const std::vector<int64_t>& offsets = {0, 8}, bool residual = true,
                      const std::vector<int64_t>& w_shape = {16, 16}) {
  Program p;
  const int64_t parts = p.new_buffer("parts", BufferKind::IO_INPUT, DType::F32, parts_shape);
  const int64_t w = p.new_buffer("o.w", BufferKind::WEIGHT, DType::BF16, w_shape);
  const int64_t res = p.new_buffer("res", BufferKind::IO_INPUT, DType::F32, {1, 16});
  const int64_t b = p.new_buffer("o.b", BufferKind::WEIGHT, DType::BF16, {16});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {1, 16});
  const int64_t c = p.new_counter();
  for (int64_t off : offsets) {
    Params mp = gemv_params(16, 8, off);
    mp.set_int("head_dim", 4);
    mp.set_int("n_heads", 4);
    if (edit) edit(mp);
    std::vector<int64_t> in{parts, w};
    if (residual) in.push_back(res);
    if (bias) in.push_back(b);
    p.add_task(Op::COMBINE_GEMV_ADD_TILE, in, {y}, c, {}, mp, "o_proj" + std::to_string(off));
  }
  return p;
}

TEST(ValidateParamShapes, CombineGemvAddTileMergesAStackOfEveryHeadsPartials) {
  // S = 1, 2, 3 slabs of [4 heads, 6]; parts' last dimension is not K (x is the merge's row).
  for (const auto& shape : std::vector<std::vector<int64_t>>{{4, 6}, {8, 6}, {3, 4, 6}, {72}})
    for (bool bias : {false, true})
      EXPECT_TRUE(Clean(validate(merge_program(shape, bias)))) << shape.size() << " " << bias;
  EXPECT_TRUE(Clean(validate(merge_program({8, 6}, false, [](Params& m) {
    m.set_int("flags", 4);  // the blocks the step's position reached, of 2 keys each
    m.set_int("kv_len", 2);
  }))));
  EXPECT_TRUE(Rejected(validate(merge_program({7, 6})),
                       "task 0 (o_proj0) COMBINE_GEMV_ADD_TILE: input 0 (partials) buffer #0 "
                       "('parts') shape [7,6] is not a stack of partials of n_heads 4 x "
                       "(head_dim + 2) 6 floats each"));
  EXPECT_TRUE(Rejected(validate(merge_program({2, 6})), "is not a stack of partials"));
  // The two tiles with these params set.
  const auto with = [](std::vector<std::pair<std::string, int64_t>> set) {
    return validate(merge_program({8, 6}, false, [&](Params& m) {
      for (const auto& [key, value] : set) m.set_int(key, value);
    }));
  };
  EXPECT_TRUE(Rejected(with({{"n_heads", 2}}),
                       "COMBINE_GEMV_ADD_TILE: param K 16 must be a whole number of heads of "
                       "head_dim 4 from head m_off 0 within n_heads 2"));
  EXPECT_TRUE(Rejected(with({{"head_dim", 2}}), "param K 16 must be a whole number of heads of "
                                                "head_dim 2 from head m_off 0 within n_heads 4"));
  EXPECT_TRUE(Rejected(with({{"head_dim", 3}}), "param K 16 must be a whole number of heads of "
                                                "head_dim 3"));
  EXPECT_TRUE(Rejected(with({{"m_off", 1}}), "from head m_off 1 within n_heads 4"));
  EXPECT_TRUE(Rejected(with({{"flags", 1}}), "param flags 1 has unknown bits"));
  EXPECT_TRUE(Rejected(with({{"flags", 4}}),
                       "sets bit 2 (runtime window) but param kv_len (the blocks' keys) is "
                       "absent"));
  EXPECT_TRUE(Rejected(with({{"flags", 4}, {"kv_len", 0}}), "param kv_len 0 must be >= 1"));
  // GEMV_ADD_TILE's checks: the weight's rows and columns, the output's columns, the residual.
  EXPECT_TRUE(Rejected(validate(merge_program({8, 6}, false, {}, {0, 12})),
                       "task 1 (o_proj12) COMBINE_GEMV_ADD_TILE: param n_off 12 + N_tile 8 exceeds "
                       "the weight rows N 16 of input 1 (weight)"));
  EXPECT_TRUE(Rejected(validate(merge_program({8, 6}, false, {}, {0, 8}, true, {16, 12})),
                       "param K 16 is not the columns of input 1 (weight)"));
  EXPECT_TRUE(Rejected(validate(merge_program({8, 6}, false, {}, {0, 8}, false)),
                       "COMBINE_GEMV_ADD_TILE arity: 2 inputs, expected [3,4]"));
  // The tiles write their columns of y, as GEMV tiles do.
  EXPECT_TRUE(Rejected(validate(merge_program({8, 6}, false, {}, {0, 4})),
                       "writers 0 (o_proj0) and 1 (o_proj4) share a counter but their tiles "
                       "OVERLAP"));
}

TEST(ValidateWaw, WholeBufferWritersUnderOneCounterRace) {
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {4});
  const int64_t c = p.new_counter();
  p.add_task(Op::GELU, {x}, {y}, c, {}, {}, "g0");
  p.add_task(Op::GELU, {x}, {y}, c, {}, {}, "g1");
  EXPECT_TRUE(
      Rejected(validate(p), "writers 0 (g0) and 1 (g1) share a counter but their tiles OVERLAP"));
}

TEST(ValidateWaw, WritersOnDifferentCountersMustBeTotallyOrdered) {
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {4});
  const int64_t c0 = p.new_counter(), c1 = p.new_counter(), c2 = p.new_counter(),
                c3 = p.new_counter();
  p.add_task(Op::GELU, {x}, {y}, c0, {}, {}, "first");
  add_nop(p, c1, {{c0, 1}}, "between");
  p.add_task(Op::GELU, {x}, {y}, c2, {{c1, 1}}, {}, "second");  // transitively after `first`
  p.add_task(Op::GELU, {x}, {y}, c3, {{c2, 1}}, {}, "third");
  EXPECT_TRUE(Clean(validate(p)));
  p.tasks[3].waits.clear();  // third now races with both
  EXPECT_TRUE(Rejected(validate(p), "writers 0 (first) and 3 (third) do not share one counter"));
}

TEST(ValidateWaw, ReadersOfAWriterChainMustFollowItsLastWriter) {
  // y is written by A -> B -> C (a chain: no WAW race). A read is ordered only after all three.
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t y = p.new_buffer("y", BufferKind::ACTIVATION, DType::F32, {4});
  const int64_t z = p.new_buffer("z", BufferKind::IO_OUTPUT, DType::F32, {4});
  const int64_t ca = p.new_counter(), cb = p.new_counter(), cc = p.new_counter(),
                cr = p.new_counter();
  p.add_task(Op::GELU, {x}, {y}, ca, {}, {}, "A");
  p.add_task(Op::GELU, {x}, {y}, cb, {{ca, 1}}, {}, "B");
  p.add_task(Op::GELU, {x}, {y}, cc, {{cb, 1}}, {}, "C");
  p.add_task(Op::COPY, {y}, {z}, cr, {{cc, 1}}, {}, "reader");
  EXPECT_TRUE(Clean(validate(p)));
  p.tasks[3].waits = {{cb, 1}};  // between B and C: C is not ordered before the read
  EXPECT_TRUE(Rejected(
      validate(p), "task 3 (reader) reads buffer #1 ('y') but writer task(s) [2] are NOT ordered"));
  p.tasks[3].waits = {};
  EXPECT_TRUE(Rejected(
      validate(p), "task 3 (reader) reads buffer #1 ('y') but writer task(s) [0, 1] are NOT"));
}

TEST(ValidateWaw, LongInPlaceChainStaysFast) {
  // 100k tasks each reading and rewriting one accumulator, each after the previous: a writer
  // chain with a read inside it everywhere, each read ordered between two writes (valid).
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t acc = p.new_buffer("acc", BufferKind::IO_OUTPUT, DType::F32, {4});
  constexpr int64_t n = 100000;
  for (int64_t i = 0; i < n; ++i) p.new_counter();
  p.add_task(Op::GELU, {x}, {acc}, 0, {}, {}, "init");
  for (int64_t i = 1; i < n; ++i) p.add_task(Op::ADD, {acc, x}, {acc}, i, {{i - 1, 1}}, {}, "acc");
  EXPECT_TRUE(Clean(validate(p)));
}

TEST(ValidateWaw, ManyMutuallyUnorderedWritersStayBounded) {
  // 3,000 writers on distinct counters, unordered (a WAW error), each read by 3,000 readers.
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {4});
  constexpr int64_t n = 3000;
  std::vector<Wait> none;
  for (int64_t i = 0; i < n; ++i) p.add_task(Op::GELU, {x}, {y}, p.new_counter(), none, {}, "w");
  for (int64_t i = 0; i < n; ++i)
    p.add_task(Op::COPY, {y}, {y}, p.new_counter(), {{i, 1}}, {}, "r");
  const auto r = validate(p);
  EXPECT_TRUE(Rejected(r, "write-after-write RACE"));
  EXPECT_TRUE(Rejected(r, "data-race check skipped for"));
}

// ---- read-only kinds, on-chip buffers, outputs
// ------------------------------------------------------
TEST(ValidateBuffers, WritingAReadOnlyKindIsRejected) {
  for (BufferKind k : {BufferKind::WEIGHT, BufferKind::CONST, BufferKind::IO_INPUT}) {
    Tiny t = tiny();
    t.p.buffers[static_cast<size_t>(t.h)].kind = k;
    EXPECT_TRUE(Rejected(validate(t.p), "task 0 (norm) writes read-only " +
                                            std::string(name_of(k)) + " buffer #3 ('h')"));
  }
}

TEST(ValidateBuffers, OnChipBufferMustStayOnOneSm) {
  Tiny t = tiny();
  t.p.buffers[static_cast<size_t>(t.h)].space = MemSpace::SMEM;
  for (auto& task : t.p.tasks) task.sm = 3;
  EXPECT_TRUE(Clean(validate(t.p)));
  t.p.tasks[2].sm = 4;
  EXPECT_TRUE(Rejected(validate(t.p), "on-chip buffer #3 ('h') (SMEM) is used across SMs [3, 4]"));
  t.p.buffers[static_cast<size_t>(t.h)].space = MemSpace::REGISTER;
  EXPECT_TRUE(Rejected(validate(t.p), "(REGISTER) is used across SMs [3, 4]"));
  for (auto& task : t.p.tasks) task.sm.reset();
  const auto r = validate(t.p);
  EXPECT_TRUE(Accepted(r));
  EXPECT_TRUE(Warned(r, "on-chip buffer #3 ('h') (REGISTER) requires same-SM placement"));
}

TEST(ValidateBuffers, OutputMustBeProduced) {
  Tiny t = tiny();
  t.p.new_buffer("logits", BufferKind::IO_OUTPUT, DType::F32, {8});
  EXPECT_TRUE(Rejected(validate(t.p), "IO_OUTPUT buffer #5 ('logits') is never produced"));
  EXPECT_TRUE(Clean(validate(tiny().p)));
}

// ---- pages
// ----------------------------------------------------------------------------------------- x -A->
// a -B-> b -D-> d -Y-> y. B reads a while writing b, so a and b are live together; d is written
// after a's last use, so a and d may share a page.
struct PagedProgram {
  Program p;
  int64_t a, b, d;
};

PagedProgram paged() {
  PagedProgram pp;
  Program& p = pp.p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  pp.a = p.new_buffer("a", BufferKind::ACTIVATION, DType::F32, {4}, MemSpace::GLOBAL_SCRATCH);
  pp.b = p.new_buffer("b", BufferKind::ACTIVATION, DType::F32, {4}, MemSpace::GLOBAL_SCRATCH);
  pp.d = p.new_buffer("d", BufferKind::ACTIVATION, DType::F32, {4}, MemSpace::GLOBAL_SCRATCH);
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {4});
  const int64_t ca = p.new_counter(), cb = p.new_counter(), cd = p.new_counter(),
                cy = p.new_counter();
  p.add_task(Op::GELU, {x}, {pp.a}, ca, {}, {}, "A");
  p.add_task(Op::GELU, {pp.a}, {pp.b}, cb, {{ca, 1}}, {}, "B");
  p.add_task(Op::GELU, {pp.b}, {pp.d}, cd, {{cb, 1}}, {}, "D");
  p.add_task(Op::GELU, {pp.d}, {y}, cy, {{cd, 1}}, {}, "Y");
  p.pages = PageAllocation{};
  p.pages->pages.push_back(Page{0, MemSpace::GLOBAL_SCRATCH, 16, 0, 2});
  p.pages->pages.push_back(Page{1, MemSpace::GLOBAL_SCRATCH, 16, 1, 1});
  return pp;
}

TEST(ValidatePages, OrderedReuseIsSilent) {
  PagedProgram pp = paged();
  pp.p.pages->buffer_to_page = {{pp.a, 0}, {pp.b, 1}, {pp.d, 0}};  // a dies (B) before D writes d
  EXPECT_TRUE(Clean(validate(pp.p)));
}

TEST(ValidatePages, OverlappingLiveRangesWarnOfAClobber) {
  PagedProgram pp = paged();
  pp.p.pages->buffer_to_page = {{pp.a, 0}, {pp.b, 0}, {pp.d, 1}};  // B reads a while writing b
  const auto r = validate(pp.p);
  EXPECT_TRUE(Accepted(r));
  EXPECT_TRUE(Warned(
      r, "page 0 reused by buffers #1 ('a') and #2 ('b') whose live ranges are NOT ordered"));
  EXPECT_TRUE(Warned(r, "possible clobber"));
}

TEST(ValidatePages, UnorderedTasksSharingAPageWarn) {
  // Two independent chains x -> a -> y1 and x -> d2 -> y2 with a and d2 on one page.
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t a = p.new_buffer("a", BufferKind::ACTIVATION, DType::F32, {4});
  const int64_t e = p.new_buffer("e", BufferKind::ACTIVATION, DType::F32, {4});
  const int64_t y1 = p.new_buffer("y1", BufferKind::IO_OUTPUT, DType::F32, {4});
  const int64_t y2 = p.new_buffer("y2", BufferKind::IO_OUTPUT, DType::F32, {4});
  const int64_t c0 = p.new_counter(), c1 = p.new_counter(), c2 = p.new_counter(),
                c3 = p.new_counter();
  p.add_task(Op::GELU, {x}, {a}, c0, {}, {}, "wa");
  p.add_task(Op::GELU, {a}, {y1}, c1, {{c0, 1}}, {}, "ra");
  p.add_task(Op::GELU, {x}, {e}, c2, {}, {}, "we");
  p.add_task(Op::GELU, {e}, {y2}, c3, {{c2, 1}}, {}, "re");
  p.pages = PageAllocation{{{a, 7}, {e, 7}}, {Page{7, MemSpace::GLOBAL_SCRATCH, 16}}};
  EXPECT_TRUE(Warned(validate(p), "page 7 reused by buffers"));
  p.tasks[2].waits = {{c1, 1}};  // e is written only after a's reader finished
  EXPECT_TRUE(Clean(validate(p)));
}

TEST(ValidatePages, PageTableItselfIsChecked) {
  PagedProgram pp = paged();
  pp.p.pages->buffer_to_page = {{99, 0}};
  EXPECT_TRUE(Rejected(validate(pp.p), "page table maps missing buffer 99"));
  pp.p.pages->buffer_to_page = {{pp.a, 5}};
  EXPECT_TRUE(Rejected(validate(pp.p), "page table maps buffer #1 ('a') to missing page 5"));
  pp.p.pages->buffer_to_page = {{pp.a, 0}};
  pp.p.pages->pages[0].nbytes = 8;
  EXPECT_TRUE(
      Rejected(validate(pp.p), "page 0 (8 bytes) is smaller than buffer #1 ('a') (16 bytes)"));
  pp = paged();
  pp.p.pages->buffer_to_page = {{0, 0}};  // x is IO_INPUT
  const auto r = validate(pp.p);
  EXPECT_TRUE(Accepted(r));
  EXPECT_TRUE(Warned(r, "buffer #0 ('x') of kind IO_INPUT is bound to page 0"));
}

// ---- meta --------------------------------------------------------------------------------------
TEST(ValidateMeta, GpuLabelMustMatchTheTarget) {
  Tiny t = tiny();
  t.p.target = *find_target("h200");
  t.p.meta.emplace_back("gpu", "\"h100\"");
  if (!t.p.meta_string("gpu")) GTEST_SKIP() << "Program::meta_string is not implemented yet";
  const auto r = validate(t.p);
  EXPECT_TRUE(Accepted(r));
  EXPECT_TRUE(Warned(r, "meta['gpu']='h100' != target.name='h200'"));
  t.p.meta.back().second = "\"h200\"";
  EXPECT_TRUE(Clean(validate(t.p)));
}

TEST(ValidateReport, ManyErrorsAreCappedAndCounted) {
  // 200 readers of a buffer nothing writes: 200 errors, 50 listed, the rest counted.
  Program p;
  const int64_t a = p.new_buffer("A", BufferKind::ACTIVATION, DType::F32, {4});
  const int64_t c = p.new_counter();
  for (int i = 0; i < 200; ++i) {
    const int64_t y = p.new_buffer("y" + std::to_string(i), BufferKind::IO_OUTPUT, DType::F32, {4});
    p.add_task(Op::COPY, {a}, {y}, c, {}, {}, "read");
  }
  const ValidationResult r = validate(p);
  ASSERT_EQ(r.errors.size(), 200u) << r.report();
  const std::string text = r.report();
  size_t lines = 0;
  for (size_t at = text.find("ERROR: "); at != std::string::npos; at = text.find("ERROR: ", at + 1))
    ++lines;
  EXPECT_EQ(lines, ValidationResult::kReportLines);
  EXPECT_NE(text.find("... and 150 more errors (200 in all"), std::string::npos) << text;
}

TEST(ValidateMeta, ATargetNeedsAPositiveBandwidth) {
  Tiny t = tiny();
  t.p.target = *find_target("h100");
  EXPECT_TRUE(Clean(validate(t.p)));
  for (double bad : {0.0, -1.0, std::nan("")}) {
    t.p.target->hbm_bandwidth_gbs = bad;
    EXPECT_TRUE(Rejected(validate(t.p), "target 'h100': hbm_bandwidth_gbs must be > 0")) << bad;
  }
  t.p.target->hbm_bandwidth_gbs = 3350.0;
  t.p.target->measured_bw_gbs = -5.0;
  EXPECT_TRUE(Rejected(validate(t.p), "measured_bw_gbs must be >= 0"));
}

TEST(ValidateMeta, ByteTotalsThatOverflowAreAnError) {
  Tiny t = tiny();
  // Two weights of 2^61 F32 elements each: 2^63 bytes apiece, past int64.
  const int64_t huge = int64_t(1) << 61;
  t.p.new_buffer("w1", BufferKind::WEIGHT, DType::F32, {huge});
  t.p.new_buffer("w2", BufferKind::WEIGHT, DType::F32, {huge});
  EXPECT_TRUE(Rejected(validate(t.p), "the program's weight bytes overflow 64 bits"));
  Tiny u = tiny();
  u.p.tasks[0].est_bytes = std::numeric_limits<int64_t>::max();
  u.p.tasks[1].est_bytes = 1;
  EXPECT_TRUE(Rejected(validate(u.p), "est_bytes are negative or overflow 64 bits"));
}

// ---- robustness
// ------------------------------------------------------------------------------------ One random
// edit of a field validate() reads, including ones no builder would produce.
void mutate(Program& p, std::mt19937_64& rng) {
  auto pick = [&](int64_t n) {
    return static_cast<int64_t>(rng() % static_cast<uint64_t>(std::max<int64_t>(n, 1)));
  };
  const int64_t wild[] = {-1,
                          0,
                          1,
                          2,
                          3,
                          7,
                          1000,
                          int64_t{1} << 40,
                          std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max()};
  auto any = [&] {
    return rng() % 2 ? wild[pick(10)] : pick(static_cast<int64_t>(p.tasks.size()) + 3) - 1;
  };
  if (p.tasks.empty()) return;
  Task& t = p.tasks[static_cast<size_t>(pick(static_cast<int64_t>(p.tasks.size())))];
  switch (pick(22)) {
    case 0:
      if (!t.inputs.empty())
        t.inputs[static_cast<size_t>(pick(static_cast<int64_t>(t.inputs.size())))] = any();
      break;
    case 1:
      t.outputs.push_back(any());
      break;
    case 2:
      t.out_counter = any();
      break;
    case 3:
      t.waits.push_back({any(), any()});
      break;
    case 4:
      if (!t.waits.empty()) t.waits[0].threshold = any();
      break;
    case 5:
      if (!t.waits.empty()) t.waits[0].counter = any();
      break;
    case 6:
      t.waits.clear();
      break;
    case 7:
      t.op = static_cast<Op>(pick(25) - 3);
      break;
    case 8:
      t.sm = any();
      break;
    case 9:
      t.params.set("n_off", rng() % 2 ? ParamValue::integer(any()) : ParamValue::real(0.5));
      break;
    case 10:
      t.params.set("N_tile", ParamValue::other("[1]"));
      break;
    case 11:
      t.id = any();
      break;
    case 12:
      if (!p.buffers.empty())
        p.buffers[static_cast<size_t>(pick(static_cast<int64_t>(p.buffers.size())))].kind =
            static_cast<BufferKind>(pick(8) - 1);
      break;
    case 13:
      if (!p.buffers.empty())
        p.buffers[static_cast<size_t>(pick(static_cast<int64_t>(p.buffers.size())))].shape = {
            any(), any(), 2, 2, 2};
      break;
    case 14:
      if (!p.buffers.empty())
        p.buffers[static_cast<size_t>(pick(static_cast<int64_t>(p.buffers.size())))].space =
            static_cast<MemSpace>(pick(6) - 1);
      break;
    case 15:
      p.counters.push_back(Counter{any(), any(), ""});
      break;
    case 16:
      if (!p.counters.empty()) p.counters.pop_back();
      break;
    case 17:
      p.tasks.push_back(t);
      break;
    case 18:
      if (!p.pages) p.pages = PageAllocation{};
      p.pages->buffer_to_page.emplace_back(any(), any());
      break;
    case 19:
      if (!p.pages) p.pages = PageAllocation{};
      p.pages->pages.push_back(Page{any(), static_cast<MemSpace>(pick(5)), any()});
      break;
    case 20:
      if (!p.target) p.target = *find_target("h100");
      p.target->num_sms = any();
      break;
    default:
      std::swap(p.tasks.front(), p.tasks.back());
      break;
  }
}

TEST(ValidateRobustness, NeverThrowsOnRandomlyMutatedPrograms) {
  testing::DecoderGenOptions o = testing::small_decoder_options(1);
  o.num_sms = 8;
  const Program base = testing::make_decoder(o);
  ASSERT_TRUE(Clean(validate(base)));
  int rejected = 0;
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    std::mt19937_64 rng(seed);
    Program p = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) mutate(p, rng);
    ValidationResult r;
    ASSERT_NO_THROW(r = validate(p)) << "seed " << seed;
    ASSERT_EQ(r.ok, r.errors.empty()) << "seed " << seed;
    (void)r.report();
    rejected += r.ok ? 0 : 1;
  }
  EXPECT_GT(rejected, 1500);  // the mutations mostly break something, and validate() notices
}

TEST(ValidateRobustness, HostileValuesEverywhere) {
  Program p;
  p.buffers.push_back(
      Buffer{0, "huge", BufferKind::ACTIVATION, DType::F32, {int64_t{1} << 40, int64_t{1} << 40}});
  p.counters.push_back(Counter{0, -7, ""});
  Task t;
  t.op = Op::GEMV_TILE;
  t.inputs = {0, 0, std::numeric_limits<int64_t>::min()};
  t.outputs = {0};
  t.out_counter = std::numeric_limits<int64_t>::max();
  t.waits = {{0, int64_t{1} << 40}, {-1, -1}};
  t.params.set("n_off", ParamValue::integer(std::numeric_limits<int64_t>::max()));
  t.params.set("N_tile", ParamValue::integer(std::numeric_limits<int64_t>::max()));
  t.sm = std::numeric_limits<int64_t>::min();
  p.tasks = {t, t};
  p.tasks[1].id = 1;
  p.pages =
      PageAllocation{{{0, 0}, {0, 1}}, {Page{0, MemSpace::SMEM, -1}, Page{0, MemSpace::SMEM, 1}}};
  p.target = *find_target("h100");
  p.target->num_sms = 0;
  ValidationResult r;
  ASSERT_NO_THROW(r = validate(p));
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(Rejected(r, "page table lists page id 0 more than once"));
}

// ---- scale -------------------------------------------------------------------------------------
testing::DecoderGenOptions twenty_thousand() {
  testing::DecoderGenOptions o = testing::decoder_options_for_tasks(20000);
  return o;
}

TEST(ValidateScale, TwentyThousandTaskDecoderIsValid) {
  const Program p = testing::make_decoder(twenty_thousand());
  ASSERT_GT(p.tasks.size(), 19000u);
  const auto r = validate(p);
  EXPECT_TRUE(Clean(r));
  EXPECT_TRUE(r.stats.sm_assigned);
  EXPECT_GT(r.stats.hb_queries, static_cast<int64_t>(p.tasks.size()));
}

TEST(ValidateScale, OnePlantedRaceFarFromTheStartIsFound) {
  // The last layer's first down-projection tile waits on the gate/up join instead of the SiLU:
  // it reads the SiLU output unordered. Everything else stays ordered.
  Program p = testing::make_decoder(twenty_thousand());
  int64_t victim = -1;
  for (size_t t = p.tasks.size(); t-- > 0;)
    if (p.tasks[t].op == Op::GEMV_TILE && p.tasks[t].label.find(".down[0]") != std::string::npos) {
      victim = static_cast<int64_t>(t);
      break;
    }
  ASSERT_GT(victim, 15000);
  const int64_t silu = victim - 1;
  ASSERT_EQ(p.tasks[static_cast<size_t>(silu)].op, Op::SILU_MUL);
  p.tasks[static_cast<size_t>(victim)].waits = p.tasks[static_cast<size_t>(silu)].waits;
  const auto r = validate(p);
  ASSERT_EQ(r.errors.size(), 1u) << r.report().substr(0, 4000);
  EXPECT_TRUE(Rejected(r, "task " + std::to_string(victim) + " ("));
  EXPECT_TRUE(Rejected(
      r, "writer task(s) [" + std::to_string(silu) + "] are NOT ordered before or after it, data RACE"));
}

TEST(ValidateScale, ManyErrorsStillFormatQuickly) {
  Program p;
  for (int i = 0; i < 300000; ++i) p.add_task(Op::COPY, {7}, {8}, 0, {}, {}, "t");
  const auto r = validate(p);
  const std::string rep = r.report();
  EXPECT_GE(r.errors.size(), 900000u);  // reads, writes and increments a missing thing each
  // The text lists the first errors and counts the rest: short, whatever the program.
  EXPECT_LT(rep.size(), 64u * 1024u);
  EXPECT_NE(rep.find(" more errors (" + std::to_string(r.errors.size()) + " in all"),
            std::string::npos);
}

}  // namespace
}  // namespace amk

namespace amk {
namespace {

// Two fused attention tasks under one counter whose strided windows (kv_stride, runs of one key
// every 2 positions) interleave in a cache of `max_seq` rows: proved disjoint run by run, and
// shifted onto each other an overlap; with 2^20 rows, 2^20 runs in all, more than the validator
// expands, which it names instead of guessing an overlap (or spending memory on them).
Program strided_pair(int64_t max_seq, int64_t second_start) {
  const std::string cache = "[2, " + std::to_string(max_seq) + ", 4]";
  const auto task = [&](int id, int64_t start) {
    return "{\"id\": " + std::to_string(id) +
           ", \"op\": \"ROPE_KV_ATTENTION_TILE\", \"inputs\": [0, 1, 2, 3, 4], \"outputs\": [5, 3, "
           "4], \"out_counter\": 0, \"waits\": [], \"params\": {\"head_dim\": 4, \"kv_start\": " +
           std::to_string(start) +
           ", \"kv_len\": 1, \"kv_stride\": 2, \"scale\": 0.5, \"n_heads\": 2, \"n_kv_heads\": 2, "
           "\"flags\": 6, \"theta\": 10000.0, \"m_off\": " +
           std::to_string(id) + "}, \"sm\": " + std::to_string(id) + "}";
  };
  const std::string json =
      "{\"ir_version\": \"0.11.0\", \"buffers\": ["
      "{\"id\": 0, \"name\": \"q\", \"kind\": \"IO_INPUT\", \"dtype\": \"F32\", \"shape\": [1, 8]},"
      "{\"id\": 1, \"name\": \"k\", \"kind\": \"IO_INPUT\", \"dtype\": \"F32\", \"shape\": [1, 8]},"
      "{\"id\": 2, \"name\": \"v\", \"kind\": \"IO_INPUT\", \"dtype\": \"F32\", \"shape\": [1, 8]},"
      "{\"id\": 3, \"name\": \"k_cache\", \"kind\": \"KV_CACHE\", \"dtype\": \"F32\", \"shape\": " +
      cache + "},"
      "{\"id\": 4, \"name\": \"v_cache\", \"kind\": \"KV_CACHE\", \"dtype\": \"F32\", \"shape\": " +
      cache + "},"
      "{\"id\": 5, \"name\": \"parts\", \"kind\": \"IO_OUTPUT\", \"dtype\": \"F32\", \"shape\": [2, 12]}],"
      "\"counters\": [{\"id\": 0}], \"tasks\": [" +
      task(0, 0) + ", " + task(1, second_start) + "]}";
  LoadResult r = program_from_json(json);
  if (!r) throw std::runtime_error(r.error);
  return *r.program;
}

TEST(RaceCheck, StridedWindowsAreProvedRunByRun) {
  EXPECT_TRUE(validate(strided_pair(16, 1)).ok) << validate(strided_pair(16, 1)).report();
  const ValidationResult overlap = validate(strided_pair(16, 2));  // runs 2, 4, ... are task 0's
  EXPECT_FALSE(overlap.ok);
  EXPECT_TRUE(contains_any(overlap.errors, "share a counter but their tiles OVERLAP")) << overlap.report();
  const ValidationResult many = validate(strided_pair(int64_t(1) << 20, 1));
  EXPECT_FALSE(many.ok);
  EXPECT_TRUE(contains_any(many.errors, "have more than 262144 runs in all, too many to prove "
                                        "disjoint"))
      << many.report();
  EXPECT_FALSE(contains_any(many.errors, "OVERLAP")) << many.report();
}

}  // namespace
}  // namespace amk
