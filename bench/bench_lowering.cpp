// lower() and validate() of published model shapes (the presets' config.json, no checkpoint
// needed) with the default ScheduleConfig on h100 at max_context 4096, and the memory claim:
// opening a real checkpoint with Checkpoint::open, lowering its decode step and binding every
// WEIGHT buffer to its tensor (a view into the mmap, shape checked, no copy) keeps the process's
// peak RSS far below the checkpoint's size.
//
// Acceptance (issue 3): lowering and validating llama-3.1-8b each under 3 s.
//
// The memory benchmark needs a checkpoint written beforehand, e.g.
//   amk make-model --preset qwen2.5-0.5b --dtype bf16 -o /tmp/amk_bench_qwen2.5-0.5b
// and its folder in AMK_BENCH_CHECKPOINT (default: that path); it is skipped when absent.
// Run it alone (--benchmark_filter=BM_OpenLowerBind) for a clean peak-RSS figure: the lowering
// benchmarks' own peak would otherwise be included.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "amk/checkpoint.h"
#include "amk/lowering.h"
#include "amk/model_config.h"
#include "amk/model_presets.h"
#include "amk/validate.h"

namespace {

constexpr int64_t kMaxContext = 4096;
const char* const kPresets[] = {"llama-3.1-8b", "llama-3.2-1b"};

const amk::GpuTarget& h100() {
  const amk::GpuTarget* t = amk::find_target("h100");
  if (t == nullptr) std::abort();
  return *t;
}

amk::ModelConfig preset_config(int64_t index) {
  return amk::parse_model_config(amk::model_preset_config(kPresets[index], "bfloat16"),
                                 kPresets[index]);
}

void BM_Lower(benchmark::State& state) {
  const amk::ModelConfig m = preset_config(state.range(0));
  state.SetLabel(kPresets[state.range(0)]);
  size_t tasks = 0;
  for (auto _ : state) {
    // lower() validates what it returns (LOWERING.md); this is lower() end to end.
    amk::Program p = amk::lower(m, amk::ScheduleConfig{}, h100(), kMaxContext);
    tasks = p.tasks.size();
    benchmark::DoNotOptimize(p);
  }
  state.counters["tasks"] = static_cast<double>(tasks);
}
BENCHMARK(BM_Lower)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_ValidateLowered(benchmark::State& state) {
  const amk::ModelConfig m = preset_config(state.range(0));
  state.SetLabel(kPresets[state.range(0)]);
  const amk::Program p = amk::lower(m, amk::ScheduleConfig{}, h100(), kMaxContext);
  for (auto _ : state) {
    amk::ValidationResult r = amk::validate(p);
    if (!r.ok) {
      state.SkipWithError("lowered program does not validate");
      break;
    }
    benchmark::DoNotOptimize(r);
  }
  state.counters["tasks"] = static_cast<double>(p.tasks.size());
  state.counters["counters"] = static_cast<double>(p.counters.size());
  state.counters["buffers"] = static_cast<double>(p.buffers.size());
}
BENCHMARK(BM_ValidateLowered)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// Peak resident set of the process so far, in bytes (Linux: ru_maxrss is in KiB).
double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;
}

// Current resident set, in bytes (/proc/self/statm; 0 where unavailable).
double current_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

void BM_OpenLowerBind(benchmark::State& state) {
  const char* env = std::getenv("AMK_BENCH_CHECKPOINT");
  const std::filesystem::path folder = env ? env : "/tmp/amk_bench_qwen2.5-0.5b";
  if (!std::filesystem::exists(folder / "config.json")) {
    state.SkipWithError(("no checkpoint at " + folder.string() +
                         " (amk make-model --preset qwen2.5-0.5b -o it, or set AMK_BENCH_CHECKPOINT)")
                            .c_str());
    return;
  }
  const double rss_before = current_rss_bytes();
  double checkpoint_bytes = 0, bound_bytes = 0;
  size_t tasks = 0;
  for (auto _ : state) {
    const amk::Checkpoint ck = amk::Checkpoint::open(folder);
    checkpoint_bytes = 0;
    for (const amk::SafetensorsFile& f : ck.files())
      checkpoint_bytes += static_cast<double>(f.file_bytes());
    amk::Program p = amk::lower(ck.config(), amk::ScheduleConfig{}, h100(), kMaxContext);
    // Bind: every WEIGHT buffer to its tensor, shape checked; the binding is the mmap'd view.
    bound_bytes = 0;
    for (const amk::Buffer& b : p.buffers) {
      if (b.kind != amk::BufferKind::WEIGHT || !b.source) continue;
      const amk::TensorView& t = ck.tensor(*b.source, b.shape);
      bound_bytes += static_cast<double>(t.bytes.size());
      benchmark::DoNotOptimize(t.bytes.data());
    }
    tasks = p.tasks.size();
    benchmark::DoNotOptimize(p);
  }
  state.SetLabel(folder.filename().string());
  state.counters["tasks"] = static_cast<double>(tasks);
  state.counters["checkpoint_MB"] = checkpoint_bytes / 1e6;
  state.counters["bound_weight_MB"] = bound_bytes / 1e6;
  state.counters["rss_before_MB"] = rss_before / 1e6;
  state.counters["peak_rss_MB"] = peak_rss_bytes() / 1e6;
  state.counters["peak_rss_over_checkpoint"] = peak_rss_bytes() / checkpoint_bytes;
}
BENCHMARK(BM_OpenLowerBind)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
