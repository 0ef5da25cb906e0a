#include "amk/gpu_measure.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "amk/decoder.h"
#include "amk/kv_row_check.h"

namespace amk::eval {

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

// The GPU has just run check step `failed` (and the ones before it) and failed it: the same steps
// on the ReferenceVM, then each layer's K and V rows at that position, side by side.
void log_kv_divergence(const Checkpoint& checkpoint, const Program& program, CudaDecoder& cuda,
                       std::span<const int64_t> positions, std::span<const int64_t> tokens,
                       size_t failed, std::ostream& log) {
  const auto start = std::chrono::steady_clock::now();
  ReferenceDecoder reference(checkpoint, program);
  reference.step_timeout_s = 1800;  // an 8B step takes minutes on the CPU
  for (size_t i = 0; i <= failed; ++i) {
    if (positions[i] != reference.position())
      reference.seek(positions[i], uint64_t(positions[i]) + 1);  // as the check seeks
    reference.step(tokens[i]);
  }
  const std::vector<KvRowError> errors = kv_row_errors(
      program, [&](int64_t id) { return cuda.vm().read_buffer(id); },
      [&](int64_t id) { return reference.vm().buffer(id); }, positions[failed]);
  // The caches hold BF16 (or F32) rows of a computation whose sums run in other orders: one
  // rounding step of BF16 apart is noise, an error that entered a layer is far beyond it.
  constexpr double kRowTolerance = 2e-2;
  log << fmt::format("diagnosis position {}: the GPU's KV rows against the ReferenceVM's on the "
                     "same program ({:.1f} s)\n",
                     positions[failed],
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  log << kv_row_report(errors, kRowTolerance);
}

}  // namespace

GpuRun check_and_time_on_gpu(const Checkpoint& checkpoint, const Program& program,
                             const GpuRunOptions& opt, const ReferenceLogits& reference,
                             std::ostream& log) {
  using Clock = std::chrono::steady_clock;
  GpuRun run;
  CudaDecoder cuda(checkpoint, program, opt.vm);
  const int tpl = std::max(opt.tokens_per_launch, 1);
  cuda.tokens_per_launch = tpl;
  {
    const auto start = Clock::now();
    const std::vector<int64_t> prompt =
        check_prompt(int(opt.check_positions.size()), cuda.vocab_size());
    bool diagnosed = false;
    for (size_t i = 0; i < opt.check_positions.size(); ++i) {
      const int64_t position = opt.check_positions[i], token = prompt[i];
      if (position != cuda.position()) cuda.seek(position, uint64_t(position) + 1);
      const std::vector<float> ref = reference(position, token);
      StepCheck c = compare_logits(ref, cuda.step(token), kGpuLogitTolerance);
      c.position = position;
      c.token = token;
      run.checks.push_back(c);
      log << fmt::format(
          "check     position {} token {}: max|gpu - ref| / max|ref| = {:.2e}, argmax {} vs {}{}"
          ": {}\n",
          c.position, c.token, c.relative_error, c.our_argmax, c.ref_argmax,
          c.argmax_decisive ? "" : " (near-tie, not compared)", c.pass ? "ok" : "MISMATCH");
      if (!c.pass && opt.diagnose_failed_check && !diagnosed) {
        diagnosed = true;
        log_kv_divergence(checkpoint, program, cuda, opt.check_positions, prompt, i, log);
      }
    }
    run.check_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    log << fmt::format("check     {} steps on the CPU reference in {:.1f} s\n", run.checks.size(),
                       run.check_seconds);
  }
  run.pass = !run.checks.empty() &&
             std::all_of(run.checks.begin(), run.checks.end(), [](const StepCheck& c) { return c.pass; });
  if (!run.pass) return run;

  // Timing: whole launches of greedy steps with no host round trip inside a launch.
  if (opt.start_position > 0)
    cuda.seek(opt.start_position, uint64_t(opt.start_position) + 1);
  else
    cuda.reset();
  int64_t token = check_prompt(1, cuda.vocab_size())[0];
  for (int launch = 0; launch < opt.warm_launches + opt.timed_launches; ++launch) {
    const auto start = Clock::now();
    const std::vector<int32_t> out = cuda.generate_on_device(token, tpl);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (out.size() != size_t(tpl))
      throw DecodeError(fmt::format("a launch of {} steps returned {} tokens", tpl, out.size()));
    token = out.back();
    if (launch >= opt.warm_launches) {
      run.us_per_token.push_back(us / tpl);
      run.tokens += tpl;
    }
  }
  // Where the time goes: one more launch with per-task stamps (not part of the timing).
  if (opt.profile_steps > 0) {
    cuda.vm().set_profiling(true);
    cuda.generate_on_device(token, std::min(tpl, opt.profile_steps));
    run.profile = cuda.vm().last_profile();
    cuda.vm().set_profiling(false);
  }
  return run;
}

}  // namespace amk::eval
