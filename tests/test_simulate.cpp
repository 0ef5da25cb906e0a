// The dynamic backstops: simulate_counters (who can ever fire) and simulate_adversarial (random
// interleavings that expose a read before its producer).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "amk/validate.h"
#include "support/program_gen.h"

namespace amk {
namespace {

int64_t add_nop(Program& p, int64_t counter, std::vector<Wait> waits = {},
                std::string label = "nop") {
  p.add_task(Op::NOP, {}, {}, counter, std::move(waits), {}, std::move(label));
  return static_cast<int64_t>(p.tasks.size()) - 1;
}

testing::DecoderGenOptions small_decoder() { return testing::small_decoder_options(2); }

// The writer sits behind a chain of NOPs; the reader reads its output with or without waiting.
Program writer_reader(bool reader_waits) {
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t h = p.new_buffer("h", BufferKind::ACTIVATION, DType::F32, {4});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {4});
  int64_t prev = -1;
  for (int i = 0; i < 5; ++i) {
    const int64_t c = p.new_counter();
    add_nop(p, c, prev < 0 ? std::vector<Wait>{} : std::vector<Wait>{{prev, 1}},
            "chain" + std::to_string(i));
    prev = c;
  }
  const int64_t cw = p.new_counter("writer");
  p.add_task(Op::GELU, {x}, {h}, cw, {{prev, 1}}, {}, "writer");
  std::vector<Wait> waits;
  if (reader_waits) waits.push_back({cw, 1});
  p.add_task(Op::COPY, {h}, {y}, p.new_counter("reader"), waits, {}, "reader");
  return p;
}

// ---- simulate_counters
// ---------------------------------------------------------------------------
TEST(SimulateCounters, ValidProgramFiresEveryTaskAfterItsProducers) {
  const Program p = testing::make_decoder(small_decoder());
  ASSERT_TRUE(validate(p).ok);
  const auto sim = simulate_counters(p);
  EXPECT_TRUE(sim.stuck.empty());
  ASSERT_EQ(sim.order.size(), p.tasks.size());
  std::vector<int64_t> at(p.tasks.size(), -1);
  for (size_t i = 0; i < sim.order.size(); ++i)
    at[static_cast<size_t>(sim.order[i])] = static_cast<int64_t>(i);
  for (size_t t = 0; t < p.tasks.size(); ++t)
    for (const Wait& w : p.tasks[t].waits)
      for (size_t q = 0; q < p.tasks.size(); ++q)
        if (p.tasks[q].out_counter == w.counter) EXPECT_LT(at[q], at[t]) << q << " before " << t;
}

TEST(SimulateCounters, UnsatisfiableWaitLeavesTheWaiterAndItsDependentsStuck) {
  Program p;
  const int64_t a = p.new_counter(), b = p.new_counter(), c = p.new_counter();
  add_nop(p, a, {}, "free");
  add_nop(p, b, {{a, 2}}, "too greedy");  // a has one producer
  add_nop(p, c, {{b, 1}}, "downstream");
  const auto sim = simulate_counters(p);
  EXPECT_EQ(sim.order, (std::vector<int64_t>{0}));
  EXPECT_EQ(sim.stuck, (std::vector<int64_t>{1, 2}));
  p.tasks[1].waits[0].threshold = 1;  // the satisfiable twin
  const auto ok = simulate_counters(p);
  EXPECT_TRUE(ok.stuck.empty());
  EXPECT_EQ(ok.order, (std::vector<int64_t>{0, 1, 2}));
}

TEST(SimulateCounters, WaitOnAMissingCounterIsStuck) {
  Program p;
  const int64_t a = p.new_counter();
  add_nop(p, a);
  add_nop(p, 99, {{99, 1}}, "ghost");  // increments and waits on a counter that does not exist
  add_nop(p, a, {{-4, 0}}, "ghost2");
  const auto sim = simulate_counters(p);
  EXPECT_EQ(sim.order, (std::vector<int64_t>{0}));
  EXPECT_EQ(sim.stuck, (std::vector<int64_t>{1, 2}));
}

TEST(SimulateCounters, CycleIsStuckAndSharedCounterReleasesOnlyAtItsThreshold) {
  Program p;
  const int64_t a = p.new_counter(), b = p.new_counter();
  add_nop(p, a, {{b, 1}});
  add_nop(p, b, {{a, 1}});
  EXPECT_EQ(simulate_counters(p).stuck, (std::vector<int64_t>{0, 1}));

  Program q;
  const int64_t c = q.new_counter(), d = q.new_counter();
  add_nop(q, d, {{c, 3}}, "join");  // listed first: fires only after all three producers
  for (int i = 0; i < 3; ++i) add_nop(q, c);
  const auto sim = simulate_counters(q);
  EXPECT_TRUE(sim.stuck.empty());
  EXPECT_EQ(sim.order.back(), 0);
}

TEST(SimulateCounters, HundredThousandTasksInOnePass) {
  const Program p = testing::make_decoder(testing::decoder_options_for_tasks(100000));
  const auto sim = simulate_counters(p);
  EXPECT_TRUE(sim.stuck.empty());
  EXPECT_EQ(sim.order.size(), p.tasks.size());
}

// ---- simulate_adversarial
// --------------------------------------------------------------------------
TEST(SimulateAdversarial, CatchesAReaderThatDoesNotWaitForItsWriter) {
  const auto v = simulate_adversarial(writer_reader(false));
  ASSERT_FALSE(v.empty());
  const std::string seed = v.front().substr(0, v.front().find(']') + 1);
  for (const auto& msg : v) {
    EXPECT_EQ(msg.rfind(seed, 0), 0u) << "stops after the first seed with violations: " << msg;
    EXPECT_NE(msg.find("task 6 (reader) reads buffer #1 ('h') before any producer wrote it"),
              std::string::npos)
        << msg;
  }
  EXPECT_TRUE(std::is_sorted(v.begin(), v.end()));
  EXPECT_FALSE(validate(writer_reader(false)).ok);  // the static check agrees
}

TEST(SimulateAdversarial, ValidTwinReportsNothing) {
  EXPECT_TRUE(simulate_adversarial(writer_reader(true), 64).empty());
  EXPECT_TRUE(validate(writer_reader(true)).ok);
}

TEST(SimulateAdversarial, NonPositiveSeedCountStillRunsOneSeed) {
  const Program p = writer_reader(false);
  const auto one = simulate_adversarial(p, 1);
  EXPECT_EQ(simulate_adversarial(p, 0), one);
  EXPECT_EQ(simulate_adversarial(p, -5), one);
}

TEST(SimulateAdversarial, KvCacheRules) {
  auto program = [](bool append, bool ordered) {
    Program p;
    const int64_t k_new = p.new_buffer("k_new", BufferKind::IO_INPUT, DType::F16, {1, 1, 4});
    const int64_t cache = p.new_buffer("kv", BufferKind::KV_CACHE, DType::F16, {1, 8, 4});
    const int64_t out = p.new_buffer("out", BufferKind::IO_OUTPUT, DType::F16, {1, 4});
    const int64_t ca = p.new_counter();
    std::vector<Wait> waits;
    if (append) {
      // Reads the cache it writes: prior-step state, never a violation.
      p.add_task(Op::KV_APPEND, {k_new, cache}, {cache}, ca, {}, {}, "append");
      if (ordered) waits.push_back({ca, 1});
    }
    p.add_task(Op::COPY, {cache}, {out}, p.new_counter(), waits, {}, "reader");
    return p;
  };
  EXPECT_TRUE(simulate_adversarial(program(false, false)).empty());  // prior state only
  EXPECT_TRUE(simulate_adversarial(program(true, true)).empty());
  const auto v = simulate_adversarial(program(true, false));
  ASSERT_FALSE(v.empty());
  EXPECT_NE(v.front().find("task 1 (reader) reads buffer #1 ('kv') before any producer wrote it"),
            std::string::npos);
}

TEST(SimulateAdversarial, LargeDecoderIsCleanAndAPlantedRaceIsFound) {
  Program p = testing::make_decoder(testing::decoder_options_for_tasks(20000));
  EXPECT_TRUE(simulate_adversarial(p, 4).empty());
  // The last down tile waits on the gate/up join instead of the SiLU that writes its input.
  size_t victim = 0;
  for (size_t t = p.tasks.size(); t-- > 0;)
    if (p.tasks[t].label.find(".down[0]") != std::string::npos) {
      victim = t;
      break;
    }
  ASSERT_EQ(p.tasks[victim - 1].op, Op::SILU_MUL);
  p.tasks[victim].waits = p.tasks[victim - 1].waits;
  const auto v = simulate_adversarial(p);
  ASSERT_FALSE(v.empty());
  EXPECT_NE(v.front().find("task " + std::to_string(victim) + " ("), std::string::npos)
      << v.front();
}

}  // namespace
}  // namespace amk
