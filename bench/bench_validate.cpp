// validate() and the simulators on decoder-shaped programs of about 10k, 100k and 300k tasks:
// tiled GEMVs joined by all-join counters, residual reads reaching back several stages, SMs
// assigned round-robin over 132 SMs, and a page allocation (tests/support/program_gen.h).
// Program generation is outside the timed loop. Acceptance: the 100k full check under 2 s.
#include <benchmark/benchmark.h>

#include "amk/validate.h"
#include "support/program_gen.h"

namespace {

const amk::Program& decoder(int64_t tasks) {
  // One program per size, built once: generating the 300k one costs more than validating it.
  static std::vector<std::pair<int64_t, amk::Program>> cache;
  for (const auto& [n, p] : cache)
    if (n == tasks) return p;
  cache.emplace_back(tasks,
                     amk::testing::make_decoder(amk::testing::decoder_options_for_tasks(tasks)));
  return cache.back().second;
}

void BM_Validate(benchmark::State& state) {
  const amk::Program& p = decoder(state.range(0));
  amk::ValidationStats stats;
  for (auto _ : state) {
    amk::ValidationResult r = amk::validate(p);
    if (!r.ok || !r.warnings.empty()) {
      state.SkipWithError("generated program is not clean");
      break;
    }
    stats = r.stats;
    benchmark::DoNotOptimize(r);
  }
  state.counters["tasks"] = static_cast<double>(stats.tasks);
  state.counters["edges"] = static_cast<double>(stats.edges);
  state.counters["hb_queries"] = static_cast<double>(stats.hb_queries);
  state.counters["pages"] = static_cast<double>(p.pages ? p.pages->pages.size() : 0);
}
BENCHMARK(BM_Validate)->Arg(10000)->Arg(100000)->Arg(300000)->Unit(benchmark::kMillisecond);

void BM_SimulateCounters(benchmark::State& state) {
  const amk::Program& p = decoder(state.range(0));
  for (auto _ : state) {
    auto sim = amk::simulate_counters(p);
    benchmark::DoNotOptimize(sim);
  }
  state.counters["tasks"] = static_cast<double>(p.tasks.size());
}
BENCHMARK(BM_SimulateCounters)->Arg(10000)->Arg(100000)->Arg(300000)->Unit(benchmark::kMillisecond);

void BM_SimulateAdversarialOneSeed(benchmark::State& state) {
  const amk::Program& p = decoder(state.range(0));
  for (auto _ : state) {
    auto v = amk::simulate_adversarial(p, 1);
    benchmark::DoNotOptimize(v);
  }
  state.counters["tasks"] = static_cast<double>(p.tasks.size());
}
BENCHMARK(BM_SimulateAdversarialOneSeed)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(300000)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
