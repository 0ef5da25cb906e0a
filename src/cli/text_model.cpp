#include "cli/text_model.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <csignal>
#include <iostream>

#include "amk/chat_template.h"
#include "amk/cuda_vm.h"
#include "amk/lowering.h"
#include "cli/model_args.h"

namespace amk::cli {

namespace {

std::atomic<bool> g_interrupt{false};

void on_sigint(int) {
  if (g_interrupt.load()) _exit(130);  // a second Ctrl-C: the user wants out now
  g_interrupt.store(true);
}

}  // namespace

std::optional<DeviceChoice> resolve_text_device(const std::string& device) {
  if (device == "cpu") return DeviceChoice{};
  if (device == "auto") return DeviceChoice{cuda_availability().usable, 0};
  if (device == "cuda" || device.starts_with("cuda:")) {
    DeviceChoice choice{true, 0};
    if (device.size() > 5) {
      const std::string_view n = std::string_view(device).substr(5);
      const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), choice.index);
      if (ec != std::errc() || end != n.data() + n.size() || choice.index < 0) {
        std::cerr << "amk: --device '" << device << "': expected cuda:N with N a GPU index\n";
        return std::nullopt;
      }
    }
    const CudaAvailability a = cuda_availability();
    if (!a.usable) {
      std::cerr << "amk: --device " << device << ": " << a.message << "\n";
      return std::nullopt;
    }
    return choice;
  }
  std::cerr << "amk: unknown --device '" << device << "' (auto, cpu, cuda or cuda:N)\n";
  return std::nullopt;
}

std::optional<ModelText> open_model_text(const std::string& model) {
  try {
    return load_model_text(model);
  } catch (const std::exception& e) {  // TokenizerError, TemplateError
    std::cerr << "amk: cannot read the tokenizer of '" << model << "': " << e.what() << "\n";
    return std::nullopt;
  }
}

std::optional<TextModel> open_text_model(const std::string& model, ModelText text, const DeviceChoice& device,
                                         int64_t* context) {
  progress("loading " + model + " ...");
  auto in = open_model_inputs(model, "");
  progress_done();
  if (!in) return std::nullopt;
  const ModelConfig& config = in->checkpoint.config();
  *context = std::min(*context, config.max_position_embeddings);
  try {
    const GpuTarget* target = find_target(device.cuda ? auto_target_name() : "h100");
    if (target == nullptr) throw std::runtime_error("no built-in target");
    // The GPU streams bf16 weights (a GGUF is dequantised to f32 at load); the CPU reference
    // keeps the checkpoint's own dtype.
    const DType weights = device.cuda ? DType::BF16 : in->weight_dtype;
    Program program = lower(config, in->schedule(*target, *context), *target, *context, weights);
    if (!device.cuda)
      if (const std::string problem = host_memory_problem(program); !problem.empty()) {
        std::cerr << "amk: cannot run '" << model << "' with a context of " << *context << " tokens: " << problem << "\n";
        return std::nullopt;
      }
    progress("preparing the decoder ...");
    std::unique_ptr<Decoder> decoder;
    if (device.cuda) {
      CudaVmOptions options;
      options.device = device.index;
      decoder = std::make_unique<CudaDecoder>(in->checkpoint, std::move(program), options);
    } else {
      // The fast CPU decoder (amk/cpu_decoder.h), checked against the ReferenceVM in its tests.
      decoder = make_cpu_decoder(in->checkpoint, *context, CpuDecoderKind::Fast);
    }
    progress_done();
    std::vector<int64_t> eos = in->checkpoint.eos_token_ids();
    for (int64_t id : text.eos_ids)
      if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
    return TextModel{std::move(text), std::move(in->checkpoint), device, std::move(decoder), std::move(eos)};
  } catch (const CudaVmError& e) {
    progress_done();
    report_cuda_error(e);
    return std::nullopt;
  } catch (const std::exception& e) {
    progress_done();
    std::cerr << "amk: cannot run '" << model << "': " << e.what() << "\n";
    return std::nullopt;
  }
}

std::atomic<bool>& install_interrupt_flag() {
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a read of the terminal returns, so `amk chat` can leave
  sigaction(SIGINT, &action, nullptr);
  return g_interrupt;
}

bool stderr_is_terminal() {
  static const bool terminal = isatty(STDERR_FILENO) == 1;
  return terminal;
}

void progress(const std::string& line) {
  if (stderr_is_terminal()) std::cerr << "\r\033[K" << line << std::flush;
}

void progress_done() {
  if (stderr_is_terminal()) std::cerr << "\r\033[K" << std::flush;
}

}  // namespace amk::cli
