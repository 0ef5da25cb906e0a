#include "cli/search_args.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "amk/cuda_vm.h"
#include "cli/model_args.h"

namespace amk::cli {

void add_search_options(CLI::App* cmd, SearchArgs& a, const std::string& devices) {
  cmd->add_option("model", a.model, "Checkpoint folder or .gguf file")->required();
  cmd->add_option("--gpu", a.gpu, "Built-in target (h100, h200, b200, a100, rtx5090)")
      ->capture_default_str();
  cmd->add_option("--device", a.device,
                  devices + ": cpu checks correctness on the reference VM only; sim adds the "
                            "timing simulator's predicted latency; cuda measures on the GPU")
      ->capture_default_str();
  cmd->add_option("--context", a.context, "KV cache length of the lowered program")
      ->capture_default_str();
  cmd->add_option("--check-layers", a.check_layers,
                  "Layers of the reference-VM check (0: the whole model up to 60 M parameters, "
                  "else a 2-layer twin with the same per-layer shapes)")
      ->capture_default_str();
  cmd->add_option("--check-positions", a.check_positions,
                  "Positions whose logits are compared with the reference (beyond the context: "
                  "dropped)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--weights", a.weights, "WEIGHT dtype: bf16 or fp32 (default: the checkpoint's; "
                                          "bf16 on cuda)");
  cmd->add_option("--tokens", a.tokens, "cuda: timed tokens")->capture_default_str();
  cmd->add_option("--warmup", a.warmup, "cuda: warm-up tokens")->capture_default_str();
  cmd->add_option("--tokens-per-launch", a.tokens_per_launch, "cuda: greedy steps per launch")
      ->capture_default_str();
  cmd->add_option("--launch-timeout", a.launch_timeout_s, "cuda: the watchdog per launch (s)")
      ->capture_default_str();
  cmd->add_flag("--no-weight-ring", a.no_weight_ring, "cuda: no producer-warp weight ring");
  cmd->add_flag("--json", a.json, "Print one JSON object instead of text");
}

std::string model_name_of(const std::string& path) {
  std::filesystem::path p = std::filesystem::absolute(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

std::optional<eval::EvalOptions> eval_options(const SearchArgs& a,
                                              const std::vector<std::string>& devices) {
  const auto bad = [](const std::string& why) -> std::optional<eval::EvalOptions> {
    std::cerr << "amk: " << why << "\n";
    return std::nullopt;
  };
  if (std::find(devices.begin(), devices.end(), a.device) == devices.end()) {
    std::string list;
    for (const auto& d : devices) list += (list.empty() ? "" : ", ") + d;
    return bad("--device '" + a.device + "' is not one of " + list);
  }
  if (find_target(a.gpu) == nullptr) {
    std::string known;
    for (const GpuTarget& t : builtin_targets()) known += (known.empty() ? "" : ", ") + t.name;
    return bad("--gpu '" + a.gpu + "' is not a built-in target (" + known + ")");
  }
  if (!a.weights.empty() && a.weights != "bf16" && a.weights != "fp32")
    return bad("--weights '" + a.weights + "': use bf16 or fp32");
  if (a.context < 1) return bad("--context must be >= 1");
  if (a.check_layers < 0) return bad("--check-layers must be >= 0");
  if (a.tokens < 1 || a.warmup < 0 || a.tokens_per_launch < 1 || !(a.launch_timeout_s > 0))
    return bad("--tokens and --tokens-per-launch must be >= 1, --warmup >= 0, --launch-timeout > 0");
  for (int64_t p : a.check_positions)
    if (p < 0) return bad("--check-positions must be >= 0");
  if (a.device == "cuda") {
    const CudaAvailability gpu = cuda_availability();
    if (!gpu.usable) return bad("--device cuda: no usable GPU: " + gpu.message);
  }
  eval::EvalOptions o;
  o.device = *eval::eval_device_from_name(a.device);
  o.max_context = a.context;
  o.check_positions = a.check_positions;
  o.check_layers = a.check_layers;
  if (a.weights == "bf16") o.weight_dtype = DType::BF16;
  if (a.weights == "fp32") o.weight_dtype = DType::F32;
  o.tokens = a.tokens;
  o.warmup = a.warmup;
  o.tokens_per_launch = a.tokens_per_launch;
  o.launch_timeout_s = a.launch_timeout_s;
  o.weight_ring = !a.no_weight_ring;
  return o;
}

std::string self_executable() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("amk") : p.string();
}

}  // namespace amk::cli
