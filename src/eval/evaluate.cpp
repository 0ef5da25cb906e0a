#include "amk/evaluate.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <sstream>

#include "amk/critical_path.h"
#include "amk/cuda_vm.h"
#include "amk/decoder.h"
#include "amk/gpu_measure.h"
#include "amk/knob_space.h"
#include "amk/logit_check.h"
#include "amk/lowering.h"
#include "amk/model_config.h"
#include "amk/reference_cache.h"
#include "amk/schedule_config_io.h"
#include "amk/timing_sim.h"
#include "amk/validate.h"
#include "amk/weight_traffic.h"

namespace amk::eval {

namespace {

using Clock = std::chrono::steady_clock;

ModelConfig with_layers(ModelConfig m, int64_t layers) {
  m.num_hidden_layers = layers;
  if (int64_t(m.layer_types.size()) > layers) m.layer_types.resize(size_t(layers));
  return m;
}

Simplicity simplicity_of(const Program& p, const ScheduleConfig& c) {
  Simplicity s;
  s.tasks = int64_t(p.tasks.size());
  if (p.pages) {
    s.pages = int64_t(p.pages->pages.size());
    s.scratch_bytes = p.pages->total_scratch_bytes();
  } else {
    for (const Buffer& b : p.buffers)
      if (b.kind == BufferKind::ACTIVATION) s.scratch_bytes += b.nbytes();
  }
  s.pipelining_depth = c.pipelining_depth;
  s.fusion_groups = int64_t(c.fusion_grouping.size());
  return s;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

std::string_view name_of(EvalDevice d) {
  switch (d) {
    case EvalDevice::Cpu: return "cpu";
    case EvalDevice::Sim: return "sim";
    case EvalDevice::Cuda: return "cuda";
  }
  return "sim";
}

std::optional<EvalDevice> eval_device_from_name(std::string_view n) {
  for (EvalDevice d : {EvalDevice::Cpu, EvalDevice::Sim, EvalDevice::Cuda})
    if (name_of(d) == n) return d;
  return std::nullopt;
}

ScheduleConfig plain_schedule_config() {
  ScheduleConfig c;
  c.sm_assignment = std::string("round_robin");
  c.page_allocation = "linear";
  c.pipelining_depth = 0;
  return c;
}

Evaluator::Evaluator(Checkpoint checkpoint, std::string model_name, GpuTarget target,
                     EvalOptions options)
    : checkpoint_(std::move(checkpoint)),
      model_name_(std::move(model_name)),
      target_(std::move(target)),
      options_(std::move(options)) {
  const ModelConfig& m = checkpoint_.config();
  if (options_.max_context < 1) throw std::invalid_argument("the context must be >= 1");
  std::sort(options_.check_positions.begin(), options_.check_positions.end());
  options_.check_positions.erase(
      std::unique(options_.check_positions.begin(), options_.check_positions.end()),
      options_.check_positions.end());
  // Positions the context cannot hold are dropped; at least position 0 is always checked.
  std::erase_if(options_.check_positions,
                [&](int64_t p) { return p < 0 || p >= options_.max_context; });
  if (options_.check_positions.empty()) options_.check_positions = {0};
  int64_t layers = options_.check_layers;
  if (layers <= 0)
    layers = parameter_count(m) <= kTwinParameterLimit ? m.num_hidden_layers
                                                       : std::min(kTwinLayers, m.num_hidden_layers);
  check_model_ = with_layers(m, std::min(layers, m.num_hidden_layers));
  weight_dtype_ = options_.weight_dtype;
  if (options_.device == EvalDevice::Cuda) {
    if (!weight_dtype_) weight_dtype_ = DType::BF16;  // what the GPU path is built and judged for
    const CudaAvailability gpu = cuda_availability();
    if (!gpu.usable) throw EvalSetupError("no usable GPU: " + gpu.message);
    try {
      ceiling_gbs_ = cuda_stream_read_gbs();
    } catch (const std::exception& e) {
      throw EvalSetupError(std::string("cannot measure the read ceiling: ") + e.what());
    }
  }
  // The reference must lower, or nothing can be judged.
  try {
    (void)lower(check_model_, plain_schedule_config(), target_, options_.max_context, weight_dtype_);
  } catch (const std::exception& e) {
    throw EvalSetupError(fmt::format("the model does not lower even with the plain schedule: {}",
                                     e.what()));
  }
  reference_.resize(options_.check_positions.size());
}

Evaluator::~Evaluator() = default;

ScheduleConfig Evaluator::default_config() const {
  return default_schedule_config(checkpoint_.config(), target_, options_.max_context);
}

void Evaluator::prepare_reference() {
  for (size_t i = 0; i < options_.check_positions.size(); ++i)
    (void)reference_logits(i, options_.device == EvalDevice::Cuda);
}

// The plain lowering's logits at check position `index`, computed once (the whole model for the
// GPU check, the checked depth for the data mode; never both in one Evaluator). The GPU check's
// come from options_.reference_cache_dir when a worker before this one kept them there.
const std::vector<float>& Evaluator::reference_logits(size_t index, bool full_depth) {
  if (!reference_[index].empty()) return reference_[index];
  const ModelConfig& m = full_depth ? checkpoint_.config() : check_model_;
  Program plain = lower(m, plain_schedule_config(), target_, options_.max_context, weight_dtype_);
  const std::vector<int64_t> prompt =
      check_prompt(int(options_.check_positions.size()), m.vocab_size);
  std::optional<ReferenceCache> cache;
  if (full_depth && weight_dtype_ && !options_.reference_cache_dir.empty()) {
    try {
      cache.emplace(options_.reference_cache_dir,
                    reference_cache_key(checkpoint_.folder(), *weight_dtype_, options_.max_context,
                                        plain));
    } catch (const std::exception&) {
      // An unreadable checkpoint fails below with its own message; no cache is no error.
    }
  }
  // An 8B model's step takes minutes on the CPU.
  reference_ = reference_check_logits(checkpoint_, std::move(plain), options_.check_positions,
                                      prompt, cache ? &*cache : nullptr, /*step_timeout_s=*/3600)
                   .logits;
  return reference_[index];
}

// The data mode: the schedule's lowering of the checked model on the reference VM against the
// plain lowering. Returns a verdict when the check fails; fills v's check fields either way.
std::optional<Verdict> Evaluator::check_data_mode(const ScheduleConfig& config,
                                                  const EvalFaults& faults, Verdict& v) {
  v.check_layers = check_model_.num_hidden_layers;
  v.check_reduced_depth = check_model_.num_hidden_layers < checkpoint_.config().num_hidden_layers;
  if (!faults.perturb_logits)
    if (auto it = data_cache_.find(v.schedule_id); it != data_cache_.end()) {
      v.check_error = it->second.check_error;
      if (!it->second.pass()) return it->second;
      return std::nullopt;
    }
  Program program = lower(check_model_, config, target_, options_.max_context, weight_dtype_);
  ReferenceDecoder ours(checkpoint_, std::move(program));
  ours.step_timeout_s = 3600;
  const std::vector<int64_t> prompt =
      check_prompt(int(options_.check_positions.size()), ours.vocab_size());
  double worst = 0;
  std::optional<StepCheck> failed;
  for (size_t i = 0; i < options_.check_positions.size(); ++i) {
    const int64_t position = options_.check_positions[i];
    if (position != ours.position()) ours.seek(position, uint64_t(position) + 1);
    std::vector<float> logits = ours.step(prompt[i]);
    if (faults.perturb_logits && !logits.empty()) logits[logits.size() / 2] += 1.0f + std::abs(logits[0]);
    StepCheck c = compare_logits(reference_logits(i, false), logits, kDataModeLogitTolerance);
    c.position = position;
    worst = std::max(worst, c.relative_error);
    if (!c.pass && !failed) failed = c;
  }
  v.check_error = worst;
  const std::string depth = v.check_reduced_depth
                                ? fmt::format("a {}-layer twin", v.check_layers)
                                : fmt::format("all {} layers", v.check_layers);
  Verdict result = v;
  if (failed) {
    result.correctness = Correctness::FAIL;
    result.details = fmt::format(
        "reference VM check on {}: position {} differs from the plain lowering by {:.2e} "
        "relative (tolerance {:g}), argmax {} vs {}",
        depth, failed->position, failed->relative_error, kDataModeLogitTolerance,
        failed->our_argmax, failed->ref_argmax);
  } else {
    result.correctness = Correctness::PASS;
    result.details = fmt::format("reference VM check on {} at {} positions: worst {:.1e}", depth,
                                 options_.check_positions.size(), worst);
  }
  if (!faults.perturb_logits) data_cache_[v.schedule_id] = result;
  if (failed) return result;
  v.details = result.details;
  return std::nullopt;
}

Verdict Evaluator::evaluate(const ScheduleConfig& config, const EvalFaults& faults) {
  const auto start = Clock::now();
  last_stamps_.clear();
  last_program_.reset();
  Verdict v;
  v.schedule_id = schedule_id(config);
  const auto finish = [&](Verdict r) {
    r.eval_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!r.pass()) {  // never a latency without a PASS
      r.latency_us.reset();
      r.pct_of_roofline.reset();
      r.pct_of_measured_floor.reset();
      r.latency_kind = LatencyKind::None;
    }
    return r;
  };
  // 1. The knob space's ranges and the target's caps.
  if (const auto problems = knob_range_problems(config, &target_); !problems.empty())
    return finish(failed_verdict(Correctness::REJECTED, v.schedule_id, problems.front()));
  // 2. Lower and validate(); a REJECTED program is never run.
  Program program;
  try {
    program = lower(checkpoint_.config(), config, target_, options_.max_context, weight_dtype_);
  } catch (const LoweringError& e) {
    return finish(failed_verdict(Correctness::REJECTED, v.schedule_id,
                                 "lowering: " + first_line(e.what())));
  } catch (const std::exception& e) {
    return finish(failed_verdict(Correctness::REJECTED, v.schedule_id,
                                 "lowering: " + first_line(e.what())));
  }
  if (faults.corrupt_program && program.tasks.size() > 1)
    program.tasks.front().waits.push_back({program.tasks.back().out_counter, 1});
  if (const ValidationResult r = validate(program); !r.ok)
    return finish(failed_verdict(Correctness::REJECTED, v.schedule_id,
                                 "validate(): " + (r.errors.empty() ? "rejected" : r.errors.front())));
  v.simplicity = simplicity_of(program, config);
  v.roofline_us = target_.bandwidth_bound_us(program.total_weight_bytes());

  try {
    if (options_.device != EvalDevice::Cuda) {
      // 3. Correctness in the data mode.
      if (auto failed = check_data_mode(config, faults, v)) {
        Verdict f = *failed;
        f.simplicity = v.simplicity;
        f.roofline_us = v.roofline_us;
        return finish(f);
      }
      v.correctness = Correctness::PASS;
      if (options_.device == EvalDevice::Cpu) {
        v.details += "; --device cpu checks correctness only (no latency)";
        return finish(v);
      }
      // 4. The timing mode: a predicted latency.
      const sim::SimResult s = sim::simulate_step(program, target_, sim::constants_for(target_));
      if (!(s.step_us > 0) || !std::isfinite(s.step_us))
        return finish(failed_verdict(Correctness::CRASH, v.schedule_id,
                                     fmt::format("the simulator predicted {} us", s.step_us)));
      v.latency_kind = LatencyKind::Predicted;
      v.latency_us = s.step_us;
      v.pct_of_roofline = v.roofline_us / s.step_us * 100;
      v.shares = critical_path_shares(program, s.stamps);
      last_stamps_ = s.stamps;
      last_program_ = std::move(program);
      return finish(v);
    }
    // cuda: the CUDA VM against the reference VM (the plain lowering of the whole model), then
    // timed launches.
    v.check_layers = checkpoint_.config().num_hidden_layers;
    GpuRunOptions g;
    g.check_positions = options_.check_positions;
    g.tokens_per_launch = std::max(1, options_.tokens_per_launch);
    g.warm_launches = (options_.warmup + g.tokens_per_launch - 1) / g.tokens_per_launch;
    g.timed_launches = std::max(1, (options_.tokens + g.tokens_per_launch - 1) / g.tokens_per_launch);
    g.vm.timeout_s = options_.launch_timeout_s;
    g.vm.weight_ring = options_.weight_ring;
    g.profile_steps = options_.profile ? std::min(8, g.tokens_per_launch) : 0;
    std::ostringstream log;
    const GpuRun run = check_and_time_on_gpu(
        checkpoint_, program, g,
        [&](int64_t position, int64_t) {
          const auto& pos = options_.check_positions;
          const size_t i = size_t(std::find(pos.begin(), pos.end(), position) - pos.begin());
          return reference_logits(i, true);
        },
        log);
    double worst = 0;
    for (const StepCheck& c : run.checks) worst = std::max(worst, c.relative_error);
    v.check_error = worst;
    if (faults.perturb_logits || !run.pass) {
      v.correctness = Correctness::FAIL;
      v.details = fmt::format("CUDA logits differ from the reference VM beyond {:g} (worst "
                              "{:.2e}) or a decisive argmax differs",
                              kGpuLogitTolerance, worst);
      return finish(v);
    }
    const double us = median(run.us_per_token);
    v.correctness = Correctness::PASS;
    v.latency_kind = LatencyKind::MeasuredGpu;
    v.latency_us = us;
    v.pct_of_roofline = v.roofline_us / us * 100;
    const TrafficEstimate traffic = estimate_traffic(program, options_.max_context / 2);
    const double floor_us = double(traffic.weight_bytes) / ceiling_gbs_ * 1e-3;
    v.pct_of_measured_floor = floor_us / us * 100;
    v.details = fmt::format("CUDA VM vs reference VM at {} positions (worst {:.1e}); median of {} "
                            "launches of {} tokens; {:.1f}% of the measured floor ({:.1f} us at "
                            "{:.0f} GB/s)",
                            run.checks.size(), worst, run.us_per_token.size(),
                            g.tokens_per_launch, *v.pct_of_measured_floor, floor_us, ceiling_gbs_);
    if (run.profile.size() == program.tasks.size()) {
      for (const auto& t : run.profile)
        last_stamps_.push_back({t.wait_begin, t.op_begin, t.op_end, t.body_begin, t.body_end});
      v.shares = critical_path_shares(program, last_stamps_);
    }
    last_program_ = std::move(program);
    return finish(v);
  } catch (const CudaVmError& e) {
    const Correctness c = e.status() == CudaStatus::Timeout    ? Correctness::TIMEOUT
                          : e.status() == CudaStatus::Rejected ? Correctness::REJECTED
                                                               : Correctness::CRASH;
    return finish(failed_verdict(c, v.schedule_id,
                                 fmt::format("{}: {}", name_of(e.status()), first_line(e.what()))));
  } catch (const DecodeError& e) {
    // The reference VM's watchdog (a stalled step) is the software TIMEOUT of §4.
    const std::string what = e.what();
    const bool stalled = what.find("Timeout") != std::string::npos ||
                         what.find("Deadlock") != std::string::npos ||
                         what.find("watchdog") != std::string::npos;
    return finish(failed_verdict(stalled ? Correctness::TIMEOUT : Correctness::CRASH,
                                 v.schedule_id, first_line(what)));
  } catch (const std::exception& e) {
    return finish(failed_verdict(Correctness::CRASH, v.schedule_id, first_line(e.what())));
  }
}

}  // namespace amk::eval
