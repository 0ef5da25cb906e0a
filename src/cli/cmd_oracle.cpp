// `amk oracle MODEL_DIR --expected FILE [--device cpu|cpu-ref|cuda] [--gpu h100|auto] [--weights
// fp32|bf16]`: the whole-model correctness check against transformers' outputs (amk/oracle.h), on
// the fast CPU decoder, the reference VM or the CUDA VM. Exit 0 PASS, 1 FAIL, 2 invalid input (or no usable CUDA).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <memory>
#include <numeric>
#include <string>

#include "amk/cpu_decoder.h"
#include "amk/cuda_vm.h"
#include "amk/decoder.h"
#include "amk/lowering.h"
#include "amk/oracle.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "cli/options.h"

namespace amk::cli {

namespace {

constexpr size_t kShownWorst = 5;

struct OracleOptions {
  std::string model_dir, expected, device = "cpu", config, gpu = "h100", weights;
  double tolerance = kOracleTolerance;
  double timeout_s = 10.0;      // the CUDA VM's watchdog per launch
  bool no_weight_ring = false;  // CUDA: weights from global memory (for racecheck)
};

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

int run_oracle_command(const OracleOptions& opt) {
  const bool on_cuda = opt.device == "cuda";
  if (!check_device(opt.device, /*runs_cuda=*/true)) return kExitBadInput;
  const GpuTarget* target = resolve_target(opt.gpu);
  if (target == nullptr) return kExitBadInput;
  const auto in = open_model_inputs(opt.model_dir, opt.config);
  if (!in) return kExitBadInput;
  const auto weight_dtype = resolve_weight_dtype(opt.weights, in->weight_dtype);
  if (!weight_dtype) return kExitBadInput;
  OracleReport r;
  try {
    const ExpectedOutputs e = load_expected(opt.expected);
    if (!check_positions(in->checkpoint.config(), int64_t(e.sequence_ids.size()),
                         fmt::format("--expected's sequence_ids ({} tokens)", e.sequence_ids.size())))
      return kExitBadInput;
    const auto context = int64_t(e.sequence_ids.size());
    if (opt.device == "cpu") {  // the fast CPU decoder: nothing to lower
      CpuDecoderOptions cpu_options;
      // --weights as the reference applies it: fp32 widens, bf16 rounds; neither: as stored.
      if (!opt.weights.empty())
        cpu_options.weights = *weight_dtype == DType::F32 ? CpuWeights::F32 : CpuWeights::BF16;
      FastCpuDecoder decoder(in->checkpoint, context, cpu_options);
      r = run_oracle(decoder, e, opt.tolerance);
    } else {
      Program p = lower(in->checkpoint.config(), in->schedule(*target, context), *target, context,
                        *weight_dtype);
      if (!on_cuda)
        if (const std::string problem = host_memory_problem(p); !problem.empty()) {
          std::cerr << "amk: invalid input: " << problem << "\n";
          return kExitBadInput;
        }
      if (on_cuda) {
        CudaVmOptions vm_options;
        vm_options.timeout_s = opt.timeout_s;
        vm_options.weight_ring = !opt.no_weight_ring;
        CudaDecoder decoder(in->checkpoint, std::move(p), vm_options);
        r = run_oracle(decoder, e, opt.tolerance);
      } else {
        r = run_oracle(in->checkpoint, p, e, opt.tolerance);
      }
    }
  } catch (const DecodeError& e) {
    std::cerr << "amk: " << e.what() << "\n";
    return kExitFailed;
  } catch (const CudaVmError& e) {
    return report_cuda_error(e);
  } catch (const std::exception& e) {
    std::cerr << "amk: invalid input: " << e.what() << "\n";
    return kExitBadInput;
  }

  std::vector<size_t> order(r.errors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return r.errors[a] > r.errors[b]; });
  std::cout << fmt::format("logits    {} positions, max|ours - theirs| / max|theirs| <= {:g}: {}\n",
                           r.errors.size(), opt.tolerance, r.logits_ok ? "ok" : "EXCEEDED");
  for (size_t i = 0; i < std::min(kShownWorst, order.size()); ++i)
    std::cout << fmt::format("  position {:>4}  error {:.3e}\n", order[i], r.errors[order[i]]);
  if (r.nonfinite_expected > 0)
    std::cout << fmt::format("  {} of the expected logits are NaN or infinite ({}): nothing can "
                             "be compared against them\n",
                             r.nonfinite_expected, opt.expected);
  if (r.nonfinite_ours > 0)
    std::cout << fmt::format("  {} of our logits are NaN or infinite (non-finite weights in the "
                             "checkpoint, or an overflow)\n",
                             r.nonfinite_ours);
  if (r.nonfinite_ours > 0) {
    std::cout << fmt::format("greedy    {} tokens: not run (our logits are not finite)\n",
                             r.expected_continuation.size());
  } else {
    std::cout << fmt::format(
        "greedy    {} tokens: {}\n", r.continuation.size(),
        r.continuation_ok ? "identical" : fmt::format("diverges at token {}", r.first_divergence));
  }
  if (!r.continuation_ok && r.nonfinite_ours == 0) {
    std::cout << "  expected " << ids_text(r.expected_continuation) << "\n";
    std::cout << "  ours     " << ids_text(r.continuation) << "\n";
  }
  std::cout << (r.pass() ? "PASS" : "FAIL") << "\n";
  return r.pass() ? kExitOk : kExitFailed;
}

}  // namespace

void add_oracle_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<OracleOptions>();
  CLI::App* cmd = app.add_subcommand(
      "oracle", "Check a checkpoint's decode against transformers' expected outputs");
  cmd->add_option("model_dir", opt->model_dir, "Checkpoint folder or .gguf file")->required();
  cmd->add_option("--expected", opt->expected,
                  "expected.safetensors (prompt_ids, sequence_ids, logits)")
      ->required();
  cmd->add_option("--device", opt->device,
                  "cpu (the fast CPU decoder), cpu-ref (the reference VM) or cuda")->capture_default_str();
  cmd->add_option("--config", opt->config,
                  "ScheduleConfig JSON file (default: derived from the model and the target)");
  cmd->add_option("--gpu", opt->gpu,
                  "Target to lower for: a built-in name or auto (the GPU this process sees)")
      ->capture_default_str();
  cmd->add_option("--weights", opt->weights,
                  "WEIGHT dtype: fp32 or bf16 (default: the checkpoint's own)");
  cmd->add_option("--tolerance", opt->tolerance, "Largest relative logit error allowed")
      ->check(finite_number(/*positive=*/false))
      ->capture_default_str();
  cmd->add_option("--timeout", opt->timeout_s,
                  "CUDA: watchdog seconds per launch (raise it under compute-sanitizer)")
      ->check(finite_number(/*positive=*/true))
      ->capture_default_str();
  cmd->add_flag("--no-weight-ring", opt->no_weight_ring,
                "CUDA: read GEMV weights from global memory instead of the shared-memory ring "
                "(racecheck cannot follow the ring's bulk-copy/mbarrier ordering)");
  cmd->callback([opt, &action] { action = [opt] { return run_oracle_command(*opt); }; });
}

}  // namespace amk::cli
