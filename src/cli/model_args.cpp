#include "cli/model_args.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "amk/cuda_vm.h"
#include "amk/json.h"
#include "amk/lowering.h"
#include "amk/model_config.h"
#include "amk/schedule_config_io.h"
#include "amk/reference_vm.h"
#include "amk/safetensors.h"
#include "cli/commands.h"
#include "cli/input_files.h"

namespace amk::cli {

std::optional<Checkpoint> open_checkpoint(const std::string& folder) {
  try {
    return Checkpoint::open(folder);
  } catch (const std::exception& e) {  // CheckpointError, SafetensorsError, ModelConfigError
    std::cerr << "amk: cannot open checkpoint '" << folder << "': " << e.what() << "\n";
    return std::nullopt;
  }
}

std::optional<ScheduleConfig> load_schedule_config(const std::string& path) {
  if (path.empty()) return ScheduleConfig{};
  const auto invalid = [&](const std::string& why) -> std::optional<ScheduleConfig> {
    std::cerr << "amk: invalid config '" << path << "': " << why << "\n";
    return std::nullopt;
  };
  std::string why;
  const std::optional<std::string> text = read_input_text(path, kMaxConfigFileBytes, &why);
  if (!text) {
    std::cerr << "amk: cannot read config '" << path << "': " << why << "\n";
    return std::nullopt;
  }
  // Parsing and the knob ranges live in the library (amk/schedule_config_io.h), shared with the
  // search; unknown keys are a warning, as in programs: printed, and the rest is used.
  ConfigParse parsed = parse_schedule_config(*text);
  if (!parsed.config) return invalid(parsed.error);
  for (const std::string& w : parsed.warnings)
    std::cerr << "amk: warning: config '" << path << "': " << w << "\n";
  return std::move(*parsed.config);
}

std::optional<DType> checkpoint_weight_dtype(const Checkpoint& ck) {
  const TensorView* t = ck.find("model.embed_tokens.weight");
  if (t == nullptr) {
    std::cerr << "amk: " << ck.folder().string()
              << ": missing tensor 'model.embed_tokens.weight'\n";
    return std::nullopt;
  }
  switch (t->dtype) {
    case StDType::F32:
      return DType::F32;
    case StDType::F16:
      return DType::F16;
    case StDType::BF16:
      return DType::BF16;
    default:
      std::cerr << "amk: " << ck.folder().string() << ": weights of dtype " << name_of(t->dtype)
                << " are not supported (F32, F16, BF16)\n";
      return std::nullopt;
  }
}

bool check_positions(const ModelConfig& model, int64_t positions, const std::string& what) {
  if (positions <= model.max_position_embeddings) return true;
  std::cerr << fmt::format(
      "amk: {} need{} a context of {} positions, more than the model's max_position_embeddings "
      "{} (config.json)\n",
      what, what.find(" and ") == std::string::npos ? "s" : "", positions,
      model.max_position_embeddings);
  return false;
}

std::string host_memory_problem(const Program& program) {
  int64_t total = 0, kv = 0;
  for (const Buffer& b : program.buffers) {
    const int64_t n = b.nbytes();
    if (n > kVmMaxBufferBytes)
      return fmt::format("buffer '{}' needs {} bytes, over the reference VM's cap of {} for one "
                         "buffer",
                         b.name, n, kVmMaxBufferBytes);
    total += n;
    if (b.kind == BufferKind::KV_CACHE) kv += n;
  }
  int64_t limit = kVmMaxTotalBytes;
  std::string limit_name = "the reference VM's cap";
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 && int64_t(pages) <= std::numeric_limits<int64_t>::max() / page &&
      int64_t(pages) * page < limit) {
    limit = int64_t(pages) * page;
    limit_name = "this machine's physical memory";
  }
  if (total <= limit) return {};
  return fmt::format("the program's buffers need {} bytes of host memory ({} of them KV cache), "
                     "more than {} ({} bytes)",
                     total, kv, limit_name, limit);
}

namespace {

// `p` with symlinks resolved as far as it exists (the rest lexically normalised), absolute.
std::filesystem::path resolved(const std::string& p) {
  std::error_code ec;
  std::filesystem::path r = std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
  return ec ? std::filesystem::absolute(p).lexically_normal() : r;
}

bool inside(const std::filesystem::path& child, const std::filesystem::path& parent) {
  auto c = child.begin(), p = parent.begin();
  for (; p != parent.end(); ++p, ++c) {
    if (p->empty() && std::next(p) == parent.end()) break;  // a trailing separator
    if (c == child.end() || *c != *p) return false;
  }
  return true;
}

}  // namespace

std::string overwrite_problem(const std::string& output, const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  if (output.empty() || output == "-") return {};
  const fs::path out = resolved(output);
  std::error_code ec;
  for (const std::string& in : inputs) {
    if (in.empty() || in == "-") continue;
    const fs::path input = resolved(in);
    if (fs::equivalent(output, in, ec) || out == input)
      return fmt::format("is the input '{}'", in);
    // A new file beside a checkpoint's files harms nothing; an existing one is the folder's
    // content, and a name the checkpoint reader looks for would change the checkpoint.
    if (fs::is_directory(input, ec) && inside(out, input)) {
      const std::string name = out.filename().string();
      if (fs::exists(out, ec))
        return fmt::format("would replace '{}', which is part of the input folder '{}'",
                           out.string(), in);
      if (name == "config.json" || name == "generation_config.json" ||
          name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json"))
        return fmt::format("would add '{}' to the input folder '{}', where the checkpoint reader "
                           "would read it",
                           out.string(), in);
    }
  }
  return {};
}

std::string output_folder_problem(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) return {};
  if (!fs::is_directory(st)) return "exists and is not a folder";
  size_t entries = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++entries;
  if (ec) return fmt::format("cannot be listed: {}", ec.message());
  if (entries > 0)
    return fmt::format("is not empty ({} entr{})", entries, entries == 1 ? "y" : "ies");
  return {};
}

bool check_device(const std::string& device, bool runs_cuda) {
  if (device == "cpu" || device == "cpu-ref") return true;
  if (device != "cuda") {
    std::cerr << "amk: unknown --device '" << device << "' (cpu, cpu-ref or cuda)\n";
    return false;
  }
  if (!runs_cuda) {
    std::cerr << "amk: --device cuda: this command does not drive the CUDA VM yet; use --device "
                 "cpu\n";
    return false;
  }
  const CudaAvailability a = cuda_availability();
  if (!a.usable) {
    std::cerr << "amk: --device cuda: " << a.message << "\n";
    return false;
  }
  return true;
}

CpuDecoderKind cpu_decoder_kind(const std::string& device) {
  return device == "cpu-ref" ? CpuDecoderKind::Reference : CpuDecoderKind::Fast;
}

std::string auto_target_name() {
  const CudaAvailability a = cuda_availability();
  if (!a.usable) throw std::runtime_error("--gpu auto needs a usable GPU: " + a.message);
  const GpuTarget* best = nullptr;
  auto distance = [&](const GpuTarget& t) {
    return std::llabs(static_cast<long long>(t.hbm_bytes - a.global_mem_bytes));
  };
  for (const GpuTarget& t : builtin_targets()) {
    if (t.num_sms != a.sm_count) continue;
    // The SM count alone cannot tell an H100 (80 GB) from an H200 (141 GB): the memory can.
    if (best == nullptr || distance(t) < distance(*best)) best = &t;
  }
  if (best == nullptr) {
    std::string names;
    for (const GpuTarget& t : builtin_targets())
      names += (names.empty() ? "" : ", ") + t.name + " (" + std::to_string(t.num_sms) + " SMs)";
    throw std::runtime_error("--gpu auto: no built-in target has the " +
                             std::to_string(a.sm_count) + " SMs of " + a.device_name +
                             "; name one with --gpu (" + names + ")");
  }
  return best->name;
}

const GpuTarget* resolve_target(const std::string& name) {
  std::string resolved = name;
  if (name == "auto") {
    try {
      resolved = auto_target_name();
    } catch (const std::exception& e) {
      std::cerr << "amk: " << e.what() << "\n";
      return nullptr;
    }
  }
  const GpuTarget* target = find_target(resolved);
  if (target == nullptr) {
    std::string names;
    for (const GpuTarget& t : builtin_targets()) names += (names.empty() ? "" : ", ") + t.name;
    std::cerr << "amk: unknown --gpu '" << name << "' (built-in: " << names << ", or auto)\n";
  }
  return target;
}

std::optional<DType> resolve_weight_dtype(const std::string& weights, DType checkpoint_dtype) {
  if (weights.empty()) return checkpoint_dtype;
  if (weights == "fp32") return DType::F32;
  if (weights == "bf16") return DType::BF16;
  std::cerr << "amk: unknown --weights '" << weights << "' (fp32 or bf16)\n";
  return std::nullopt;
}

std::optional<TensorParallelShape> parse_tp_option(const std::string& value, bool config_given,
                                                   const std::string& command) {
  TensorParallelShape tp;
  char tail = 0;
  if (config_given || std::sscanf(value.c_str(), "%" SCNd64 ",%" SCNd64 ",%" SCNd64 "%c",
                                  &tp.clusters, &tp.size, &tp.attention, &tail) != 3) {
    std::cerr << "amk: " << command
              << ": --tp takes CLUSTERS,SIZE,ATTENTION (e.g. 15,8,8) and derives the config "
                 "itself (not with --config), got '"
              << value << "'\n";
    return std::nullopt;
  }
  return tp;
}

std::optional<ModelInputs> open_model_inputs(const std::string& folder,
                                             const std::string& config_path) {
  auto config = load_schedule_config(config_path);
  if (!config) return std::nullopt;
  auto checkpoint = open_checkpoint(folder);
  if (!checkpoint) return std::nullopt;
  const auto dtype = checkpoint_weight_dtype(*checkpoint);
  if (!dtype) return std::nullopt;
  return ModelInputs{std::move(*config), std::move(*checkpoint), *dtype, !config_path.empty()};
}

ScheduleConfig ModelInputs::schedule(const GpuTarget& target, int64_t max_context) const {
  return config_given ? config : default_schedule_config(checkpoint.config(), target, max_context);
}

int report_cuda_error(const CudaVmError& e) {
  std::cerr << "amk: --device cuda: " << name_of(e.status()) << ": " << e.what() << "\n";
  return e.status() == CudaStatus::Rejected ? kExitBadInput : kExitFailed;
}

}  // namespace amk::cli
