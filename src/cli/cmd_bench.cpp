// `amk bench MODEL_DIR | --preset NAME`: single-stream decode latency on the GPU, always paired
// with a correctness verdict and the distance to the bandwidth floor (PROGRAM.md §6, §7).
//
// One run: (1) refuse without a usable GPU (exit 2, no numbers); (2) measure the device's
// streaming-read ceiling; (3) count the bytes a decode step must move; (4) check the CUDA VM's
// logits against the CPU reference on the same program (FAIL: exit 1, no latency); (5) time
// greedy generation on the device in launches of --tokens-per-launch steps; (6) optionally run
// the PyTorch peer (bench/peers/torch_gptfast.py, or --peer-script) on the same checkpoint;
// (7) print the table, write --json and append a results.tsv row.
#include <fmt/format.h>
#include <unistd.h>
#include <sys/wait.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "amk/cuda_vm.h"
#include "amk/decoder.h"
#include "amk/evaluate.h"
#include "amk/hash.h"
#include "amk/hf_export.h"
#include "amk/json.h"
#include "amk/lowering.h"
#include "amk/model_config.h"
#include "amk/model_presets.h"
#include "amk/random_checkpoint.h"
#include "amk/reference_cache.h"
#include "amk/gpu_measure.h"
#include "amk/logit_check.h"
#include "amk/results_tsv.h"
#include "amk/schedule_config_io.h"
#include "amk/step_trace.h"
#include "amk/torch_peer.h"
#include "amk/weight_traffic.h"
#include "cli/commands.h"
#include "cli/input_files.h"
#include "cli/model_args.h"
#include "cli/profile_report.h"
#include "cli/table.h"

namespace amk::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string model_dir, preset, preset_dir, gpu = "auto", config, weights, json_path, tp;
  std::string results = "results.tsv", tag, peer_script, python = "python3";
  int tokens = 256, warmup = 32, tokens_per_launch = 64, check_steps = 0;
  int64_t start_position = 0;
  // Positions whose step is compared with the CPU reference: 0 and 1 from an empty cache, then
  // 65 and 300 after seek()ing both decoders to the same seeded cache, so the check crosses
  // split-KV blocks (64 keys by default) without decoding hundreds of steps on the CPU.
  std::vector<int64_t> check_positions{0, 1, 65, 300};
  int64_t context = 0;
  bool peer = false;
  bool profile = false;
  std::string profile_tsv;  // raw per-task stamps, when set
  std::string trace;        // Chrome trace of one step + a layer's per-level table, when set
  int64_t trace_layer = -1;  // that layer (-1: the middle one)
  bool ring_probe = false;  // also measure the bulk-copy ring alone
  bool no_weight_ring = false;
  bool cluster_launch = false;
  std::string reference_cache;  // a folder of the plain lowering's reference logits, when set
  // Only fill --reference-cache with the check's reference logits and stop: no GPU needed, so
  // the build machine can compute them for the device runs (the same preset, context and check
  // positions give the same key there).
  bool reference_only = false;
};

// ---- the checkpoint -------------------------------------------------------------------------

// A checkpoint folder that is deleted on scope exit when it was a temporary one.
struct ModelFolder {
  fs::path path;
  bool temporary = false;
  ModelFolder() = default;
  ModelFolder(const ModelFolder&) = delete;
  ModelFolder& operator=(const ModelFolder&) = delete;
  ~ModelFolder() {
    std::error_code ignored;
    if (temporary) fs::remove_all(path, ignored);
  }
};

// Written last into a generated preset folder: a folder without it is a half-written one (an
// interrupted run) and is generated again rather than trusted.
constexpr const char* kCompleteMarker = ".amk_bench_complete";

// A small regular file's text, "" when it is absent or not one (a FIFO would block).
std::string read_small_text(const fs::path& path) {
  std::string why;
  return read_input_text(path.string(), uint64_t{1} << 20, &why).value_or("");
}

// Fills `folder` with preset `name` (BF16, seed 0), or reuses a complete earlier one in
// --preset-dir. Returns false after printing why.
bool prepare_preset(const BenchOptions& opt, ModelFolder& folder) {
  std::string config_text;
  try {
    config_text = model_preset_config(opt.preset, "bfloat16");
  } catch (const std::invalid_argument& e) {
    std::cerr << "amk: " << e.what() << "\n";
    return false;
  }
  if (opt.preset_dir.empty()) {
    folder.path = fs::temp_directory_path() / fmt::format("amk_bench_{}_{}", opt.preset, getpid());
    folder.temporary = true;
  } else {
    folder.path = opt.preset_dir;
    const bool marked = fs::exists(folder.path / kCompleteMarker);
    const bool same_preset = read_small_text(folder.path / "config.json") == config_text;
    if (marked && same_preset) {
      std::cout << fmt::format("model     reusing {} in {}\n", opt.preset, folder.path.string());
      return true;
    }
    // An earlier bench folder (complete, or a half-written one of this preset) is written again;
    // any other folder that is not empty is someone's data and is never written over.
    if (const std::string problem = output_folder_problem(folder.path.string());
        !problem.empty() && !marked && !same_preset) {
      std::cerr << "amk: --preset-dir '" << folder.path.string() << "' " << problem
                << " and holds no earlier bench preset; name a new or empty folder\n";
      return false;
    }
  }
  const auto start = Clock::now();
  try {
    fs::remove(folder.path / kCompleteMarker);
    write_random_checkpoint(folder.path, opt.preset, DType::BF16, /*seed=*/0);
    std::ofstream(folder.path / kCompleteMarker) << "ok\n";
  } catch (const std::exception& e) {
    std::cerr << "amk: cannot write preset '" << opt.preset << "' to '" << folder.path.string()
              << "': " << e.what() << "\n";
    return false;
  }
  std::cout << fmt::format("model     generated {} (BF16, random weights) in {:.1f} s\n",
                           opt.preset,
                           std::chrono::duration<double>(Clock::now() - start).count());
  return true;
}

// ---- reporting ------------------------------------------------------------------------------

// The schedule_or_kernel_id of the row: the config's content hash (amk/schedule_config_io.h).
std::string config_id(const ScheduleConfig& config) { return schedule_id(config); }

std::string params_text(int64_t n) {
  if (n >= 1'000'000'000) return fmt::format("{:.2f} B", double(n) / 1e9);
  if (n >= 1'000'000) return fmt::format("{:.1f} M", double(n) / 1e6);
  return fmt::format("{:.1f} K", double(n) / 1e3);
}

// ---- the command ----------------------------------------------------------------------------

int fail_usage(const std::string& why) {
  std::cerr << "amk: bench: " << why << "\n";
  return kExitBadInput;
}

int run_bench(const BenchOptions& opt) {
  // Progress lines reach a log file even when a time box kills the run mid-way.
  std::cout << std::unitbuf;
  // (1) No GPU, no numbers: say why and stop before any other input is looked at, anything is
  // generated or measured.
  if (opt.reference_only && opt.reference_cache.empty())
    return fail_usage("--reference-only fills --reference-cache: name the folder");
  const CudaAvailability gpu = opt.reference_only ? CudaAvailability{} : cuda_availability();
  if (!gpu.usable && !opt.reference_only) {
    std::cerr << "amk: bench: no usable GPU: " << gpu.message << "\n";
    return kExitBadInput;
  }
  if (opt.model_dir.empty() == opt.preset.empty())
    return fail_usage("name a checkpoint folder or --preset NAME (exactly one)");
  if (opt.tokens < 1 || opt.warmup < 0 || opt.tokens_per_launch < 1 || opt.check_steps < 0)
    return fail_usage("--tokens and --tokens-per-launch must be >= 1, --warmup and --check-steps >= 0");
  if (opt.start_position < 0) return fail_usage("--start-position must be >= 0");
  // The peer decodes from an empty cache: timing it against a seeked start would not be a race.
  if (opt.start_position > 0 && opt.peer)
    return fail_usage("--start-position and --peer: the peer times decode from position 0 only");
  std::vector<int64_t> positions = opt.check_positions;
  if (opt.check_steps > 0) {  // the first N positions from an empty cache
    positions.clear();
    for (int64_t p = 0; p < opt.check_steps; ++p) positions.push_back(p);
  }
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  if (positions.empty() || positions.front() < 0)
    return fail_usage("--check-positions needs at least one position, each >= 0");
  // Never write over an input (the checkpoint folder, the config, the preset folder).
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--json", opt.json_path},
                                   {"--results", opt.results},
                                   {"--trace", opt.trace},
                                   {"--profile-tsv", opt.profile_tsv}})
    if (const std::string problem =
            overwrite_problem(path, {opt.model_dir, opt.config, opt.preset_dir});
        !problem.empty())
      return fail_usage(fmt::format("refusing to write {} '{}': it {}", flag, path, problem));
  // The reference's key holds the plain lowering for the target: --reference-only names it
  // (auto asks the GPU, which that mode does not use).
  if (opt.reference_only && opt.gpu == "auto")
    return fail_usage("--reference-only needs --gpu NAME (the target the device run resolves, "
                      "e.g. h200): the reference's key holds the plain lowering for it");
  const GpuTarget* target = resolve_target(opt.gpu);
  if (target == nullptr) return kExitBadInput;
  if (opt.reference_only)
    std::cout << fmt::format("device    none (--reference-only), target {}\n", target->name);
  else
    std::cout << fmt::format("device    {} ({} SMs, sm_{}{}), target {}\n", gpu.device_name,
                             gpu.sm_count, gpu.cc_major, gpu.cc_minor, target->name);

  ModelFolder folder;
  if (!opt.preset.empty()) {
    if (!prepare_preset(opt, folder)) return kExitBadInput;
  } else {
    folder.path = opt.model_dir;
  }
  auto in = open_model_inputs(folder.path.string(), opt.config);
  if (!in) return kExitBadInput;
  // BF16 weights unless asked otherwise: the dtype the GPU path is built and judged for.
  const auto weight_dtype = resolve_weight_dtype(opt.weights.empty() ? "bf16" : opt.weights,
                                                 in->weight_dtype);
  if (!weight_dtype) return kExitBadInput;
  const ModelConfig& model = in->checkpoint.config();
  const std::string model_name =
      !opt.preset.empty() ? opt.preset : fs::absolute(folder.path).lexically_normal().filename().string();

  // Launch plan: warm-up launches, then enough timed launches for --tokens, all from position 0
  // (or --start-position) in one KV cache, so the program's context must hold every step.
  const int tpl = opt.tokens_per_launch;
  const int warm_launches = (opt.warmup + tpl - 1) / tpl;
  const int timed_launches = (opt.tokens + tpl - 1) / tpl;
  const int64_t steps_needed = std::max<int64_t>(
      positions.back() + 1, opt.start_position + int64_t(warm_launches + timed_launches) * tpl);
  int64_t max_context = opt.context;
  if (max_context == 0) max_context = (steps_needed + 255) / 256 * 256;
  if (max_context < steps_needed)
    return fail_usage(fmt::format("--context {} is shorter than the {} steps the run needs "
                                  "(warm-up and timed launches of {} tokens)",
                                  max_context, steps_needed, tpl));
  if (model.max_position_embeddings > 0)
    max_context = std::min(max_context, std::max(model.max_position_embeddings, steps_needed));

  Program program;
  std::optional<TensorParallelShape> tp;
  if (!opt.tp.empty() && !(tp = parse_tp_option(opt.tp, !opt.config.empty(), "bench")))
    return kExitBadInput;
  if (opt.cluster_launch && !tp)
    return fail_usage("--cluster-launch launches a tensor-parallel step's clusters: it needs --tp");
  ScheduleConfig schedule;
  try {
    schedule = tp ? tensor_parallel_schedule_config(model, *target, max_context, tp->clusters,
                                                    tp->size, tp->attention)
                  : in->schedule(*target, max_context);
  } catch (const std::exception& e) {
    std::cerr << "amk: bench: --tp " << opt.tp << ": " << e.what() << "\n";
    return kExitBadInput;
  }
  std::cout << "schedule  "
            << (tp ? fmt::format("tensor-parallel, {} clusters of {} SMs, attention on {} "
                                 "(derived: --tp)",
                                 tp->clusters, tp->size, tp->attention)
                   : opt.config.empty() ? std::string("derived from the model and the target (no --config)")
                                        : opt.config)
            << "\n";
  try {
    program = lower(model, schedule, *target, max_context, *weight_dtype);
  } catch (const std::exception& e) {
    std::cerr << "amk: bench: cannot lower '" << folder.path.string() << "': " << e.what() << "\n";
    return kExitBadInput;
  }
  if (!opt.trace.empty() && opt.trace_layer >= eval::layer_count(program))
    return fail_usage(fmt::format("--trace-layer {}: the program has {} layers", opt.trace_layer,
                                  eval::layer_count(program)));
  if (opt.reference_only) {
    try {
      Program plain = lower(model, eval::plain_schedule_config(), *target, max_context, *weight_dtype);
      eval::ReferenceCache cache(
          opt.reference_cache,
          eval::reference_cache_key(folder.path, *weight_dtype, max_context, plain));
      const std::vector<int64_t> tokens =
          eval::check_prompt(int(positions.size()), model.vocab_size);
      const auto start = Clock::now();
      const eval::ReferenceCheckLogits kept = eval::reference_check_logits(
          in->checkpoint, std::move(plain), positions, tokens, &cache, /*step_timeout_s=*/1800);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      std::cout << fmt::format(
          "reference {} check steps of the plain lowering {} {}\n", positions.size(),
          kept.from_cache ? "read from" : fmt::format("computed in {:.1f} s, kept in", seconds),
          opt.reference_cache);
      if (!kept.not_kept.empty()) {
        std::cerr << "amk: bench: --reference-cache: " << kept.not_kept << " (not kept)\n";
        return kExitFailed;
      }
    } catch (const std::exception& e) {
      std::cerr << "amk: bench: --reference-only: " << e.what() << "\n";
      return kExitFailed;
    }
    return 0;
  }

  // (2) + (3) The floor: the bytes a step must move over the measured read ceiling.
  const int64_t mean_position =
      opt.start_position + int64_t(warm_launches) * tpl + int64_t(timed_launches) * tpl / 2;
  const eval::TrafficEstimate traffic = eval::estimate_traffic(program, mean_position);
  double ceiling_gbs = 0;
  try {
    ceiling_gbs = cuda_stream_read_gbs();
  } catch (const std::exception& e) {
    std::cerr << "amk: bench: cannot measure the read ceiling: " << e.what() << "\n";
    return kExitFailed;
  }
  if (opt.ring_probe) {
    // What the megakernel's weight ring can deliver by itself, per stage size and depth: the
    // streaming rate its GEMV tiles can reach at best (the ceiling above is 16-byte loads).
    Table probe({"ring chunk KiB", "stages", "GB/s", "% of ceiling"},
                {Table::Align::Right, Table::Align::Right, Table::Align::Right, Table::Align::Right});
    try {
      for (int chunk_kib : {8, 16, 32, 64})
        for (int stages : {2, 4, 6, 12}) {
          if (chunk_kib * stages > 200) continue;  // beyond one SM's shared memory
          const double gbs = cuda_stream_read_gbs(int64_t{2} << 30, 10,
                                                  StreamReadMethod{chunk_kib * 1024, stages});
          probe.add_row({std::to_string(chunk_kib), std::to_string(stages),
                         fmt::format("{:.0f}", gbs), fmt::format("{:.1f}", 100 * gbs / ceiling_gbs)});
        }
    } catch (const std::exception& e) {
      std::cerr << "amk: bench: ring probe: " << e.what() << "\n";
      return kExitFailed;
    }
    std::cout << "bulk-copy ring read (one CTA per SM, 8 consumer warps)\n" << probe.render() << "\n";
  }
  const double floor_us = double(traffic.weight_bytes) / ceiling_gbs * 1e-3;
  const double floor_kv_us = double(traffic.weight_bytes + traffic.kv_bytes) / ceiling_gbs * 1e-3;
  std::cout << fmt::format(
      "floor     {:.1f} MB of weights per token ({:.1f} MB KV at position {}) / {:.0f} GB/s "
      "measured = {:.1f} us ({:.1f} us with KV)\n",
      double(traffic.weight_bytes) / 1e6, double(traffic.kv_bytes) / 1e6, mean_position,
      ceiling_gbs, floor_us, floor_kv_us);

  eval::ResultsRow row;
  row.tag = opt.tag.empty() ? fmt::format("bench-{}-{}", model_name, target->name) : opt.tag;
  row.model = model_name;
  row.gpu = target->name;
  row.schedule_id = config_id(schedule);

  nlohmann::ordered_json report;
  report["model"] = model_name;
  report["model_dir"] = folder.temporary ? "" : folder.path.string();
  report["params"] = parameter_count(model);
  report["weight_dtype"] = std::string(name_of(*weight_dtype));
  report["weight_ring"] = !opt.no_weight_ring;
  report["cluster_launch"] = opt.cluster_launch;
  report["weight_bytes"] = program.total_weight_bytes();
  report["floor_weight_bytes"] = traffic.weight_bytes;
  report["kv_bytes_at_mean_position"] = traffic.kv_bytes;
  report["mean_position"] = mean_position;
  report["start_position"] = opt.start_position;
  report["device"] = gpu.device_name;
  report["target"] = target->name;
  report["ceiling_gbs"] = ceiling_gbs;
  report["floor_us"] = floor_us;
  report["floor_with_kv_us"] = floor_kv_us;
  report["max_context"] = max_context;
  report["schedule_id"] = row.schedule_id;
  const auto write_json = [&] {
    if (opt.json_path.empty()) return;
    std::ofstream(opt.json_path) << report.dump(2) << "\n";
  };
  const auto log_failure = [&](const std::string& correctness, const std::string& why) {
    row.correctness = correctness;
    row.description = "amk bench: " + why;
    report["check"] = correctness;
    report["error"] = why;
    write_json();
    if (std::string why; !eval::append_results_row(opt.results, row, &why))
      std::cerr << "amk: bench: " << why << "\n";
  };
  const auto status_label = [](CudaStatus s) {
    return s == CudaStatus::Timeout ? "TIMEOUT" : s == CudaStatus::Rejected ? "REJECTED" : "CRASH";
  };

  // --reference-cache: the key of this run's reference logits (the checkpoint's files, the
  // weight dtype, the context and the plain lowering itself).
  std::optional<eval::ReferenceCache> cache;
  Program plain;
  if (!opt.reference_cache.empty()) {
    try {
      plain = lower(model, eval::plain_schedule_config(), *target, max_context, *weight_dtype);
      cache.emplace(opt.reference_cache,
                    eval::reference_cache_key(folder.path, *weight_dtype, max_context, plain));
    } catch (const std::exception& e) {
      std::cerr << "amk: bench: --reference-cache: " << e.what() << "\n";
      return kExitBadInput;
    }
  }

  // (4) Correctness first: the same program on the CPU reference and on the GPU, then (5) the
  // timed launches; both in amk/gpu_measure.h, the path `amk eval --device cuda` takes too.
  eval::GpuRun m;
  eval::PeerResult peer;
  std::string trace_table;  // --trace: printed after the results
  try {
    eval::GpuRunOptions g;
    g.check_positions = positions;
    g.tokens_per_launch = tpl;
    g.warm_launches = warm_launches;
    g.timed_launches = timed_launches;
    g.start_position = opt.start_position;
    g.vm.weight_ring = !opt.no_weight_ring;
    if (opt.cluster_launch) g.vm.cluster_size = int(tp->size);
    g.profile_steps = opt.profile || !opt.trace.empty() ? std::min(tpl, 8) : 0;
    // A failing check step is followed by where its error entered: each layer's KV rows against
    // the ReferenceVM's (a human reads the bench; the search's evaluations do not diagnose).
    g.diagnose_failed_check = true;
    // With --reference-cache the check compares with the plain lowering's logits (amk eval's
    // oracle), read whole from the cache or computed here and kept there; without it the
    // reference decodes the same program, step by step beside the GPU. Either way it is dropped
    // after the last check position, so its memory is free again before the timed launches.
    const std::vector<int64_t> tokens = eval::check_prompt(int(positions.size()), model.vocab_size);
    std::optional<eval::ReferenceCheckLogits> kept;
    if (cache) {
      const auto start = Clock::now();
      // llama-3.1-8b: ~2 minutes a step on 16 cores.
      kept = eval::reference_check_logits(in->checkpoint, std::move(plain), positions, tokens,
                                          &*cache, /*step_timeout_s=*/1800);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      std::cout << fmt::format(
          "reference {} check steps of the plain lowering {} {}\n", positions.size(),
          kept->from_cache ? "read from" : fmt::format("computed in {:.1f} s, kept in", seconds),
          opt.reference_cache);
      if (!kept->not_kept.empty())
        std::cerr << "amk: bench: --reference-cache: " << kept->not_kept << " (not kept)\n";
    }
    auto reference = std::make_shared<std::unique_ptr<ReferenceDecoder>>();
    auto step = std::make_shared<size_t>(0);  // the check step being asked for (in list order)
    const int64_t last_position = positions.back();
    m = eval::check_and_time_on_gpu(
        in->checkpoint, program, g,
        [&, reference, step](int64_t position, int64_t token) {
          if (kept) {
            const size_t i = (*step)++;
            if (i >= positions.size() || positions[i] != position || tokens[i] != token)
              throw std::logic_error(fmt::format(
                  "the check asked for position {} token {} out of the list's order", position,
                  token));
            return kept->logits[i];
          }
          if (!*reference) {
            *reference = std::make_unique<ReferenceDecoder>(in->checkpoint, program);
            (*reference)->step_timeout_s = 1800;  // llama-3.1-8b: ~2 minutes a step on 16 cores
          }
          ReferenceDecoder& r = **reference;
          if (position != r.position()) r.seek(position, uint64_t(position) + 1);
          std::vector<float> logits = r.step(token);
          if (position == last_position) reference->reset();
          return logits;
        },
        std::cout);
    nlohmann::json steps = nlohmann::json::array();
    for (const eval::StepCheck& c : m.checks)
      steps.push_back({{"position", c.position}, {"token", c.token},
                       {"relative_error", c.relative_error}, {"ref_argmax", c.ref_argmax},
                       {"gpu_argmax", c.our_argmax}, {"argmax_compared", c.argmax_decisive},
                       {"pass", c.pass}});
    report["check_steps"] = steps;
    if (!m.pass) {
      std::cout << "FAIL\n";
      log_failure("FAIL", fmt::format("CUDA logits differ from the CPU reference beyond {:g} "
                                      "(or a decisive argmax differs); no latency reported",
                                      eval::kGpuLogitTolerance));
      return kExitFailed;
    }
    // Where the time goes: the profiled launch after the timing (not part of it).
    if (!m.profile.empty()) {
      const std::vector<CudaVM::TaskTiming>& timing = m.profile;
      const std::string text = profile_report(program, timing);
      if (!opt.profile_tsv.empty()) {
        std::ofstream f(opt.profile_tsv);
        f << profile_tsv(program, timing);
        if (!f) throw DecodeError(fmt::format("cannot write {}", opt.profile_tsv));
      }
      if (!opt.trace.empty()) {
        std::vector<eval::TaskStamps> stamps;
        for (const auto& x : timing)
          stamps.push_back({x.wait_begin, x.op_begin, x.op_end, x.body_begin, x.body_end});
        trace_table = eval::write_step_trace(
            opt.trace, program, stamps, ceiling_gbs,
            opt.trace_layer >= 0 ? std::optional<int64_t>(opt.trace_layer) : std::nullopt);
      }
      if (opt.profile)
        std::cout << "\nprofile of one decode step (the last of a launch of " << std::min(tpl, 8)
                  << ")\n" << text << "\n";
    }
  } catch (const CudaVmError& e) {
    std::cerr << "amk: bench: " << name_of(e.status()) << ": " << e.what() << "\n";
    log_failure(status_label(e.status()), fmt::format("{}: {}", name_of(e.status()), e.what()));
    return e.status() == CudaStatus::Rejected ? kExitBadInput : kExitFailed;
  } catch (const std::exception& e) {  // DecodeError, CheckpointError
    std::cerr << "amk: bench: " << e.what() << "\n";
    log_failure("CRASH", e.what());
    return kExitFailed;
  }

  const double median_us = eval::median(m.us_per_token);
  const double pct_floor = floor_us / median_us * 100;
  // PROGRAM.md §6's column: the spec-sheet floor of all weight bytes (the embedding included).
  const double pct_roofline =
      target->bandwidth_bound_us(program.total_weight_bytes()) / median_us * 100;

  // (6) The peer runs after our VM has released the GPU.
  if (opt.peer) {
    // The peer reads HF folders: a GGUF's weights reach it as AMK dequantised them (bf16), in
    // a temporary folder removed afterwards.
    ModelFolder peer_folder;
    fs::path peer_path = folder.path;
    if (in->checkpoint.is_gguf()) {
      peer_folder.path = peer_path = fs::temp_directory_path() / fmt::format("amk_bench_peer_hf_{}", getpid());
      peer_folder.temporary = true;
      try {
        write_hf_folder(in->checkpoint, peer_folder.path, DType::BF16);
        std::cout << "peer      reads " << peer_folder.path.string()
                  << " (the GGUF's dequantised weights as bf16, config.json from its metadata)\n";
      } catch (const std::exception& e) {
        peer.error = std::string("cannot write the GGUF's weights as an HF folder: ") + e.what();
      }
    }
    if (peer.error.empty()) peer = eval::run_peer({opt.peer_script, opt.python, opt.warmup}, peer_path, int(m.tokens), std::cout);
    if (!peer.ran) std::cerr << "amk: bench: peer failed: " << peer.error << "\n";
  }
  const double speedup = peer.ran ? peer.us_per_token / median_us : NAN;

  // (7) The table, the JSON and the results row.
  Table table({"model", "params", "weights GB", "device", "ceiling GB/s", "floor µs", "µs/token",
               "tok/s", "% floor", "peer µs/token", "speed-up", "check"},
              {Table::Align::Left, Table::Align::Right, Table::Align::Right, Table::Align::Left,
               Table::Align::Right, Table::Align::Right, Table::Align::Right, Table::Align::Right,
               Table::Align::Right, Table::Align::Right, Table::Align::Right, Table::Align::Left});
  table.add_row({model_name, params_text(parameter_count(model)),
                 fmt::format("{:.2f}", double(program.total_weight_bytes()) / 1e9), target->name,
                 fmt::format("{:.0f}", ceiling_gbs), fmt::format("{:.1f}", floor_us),
                 fmt::format("{:.1f}", median_us), fmt::format("{:.1f}", 1e6 / median_us),
                 pct_floor >= 1 ? fmt::format("{:.1f}", pct_floor) : fmt::format("{:.2g}", pct_floor),
                 peer.ran ? fmt::format("{:.1f}", peer.us_per_token) : opt.peer ? "failed" : "-",
                 peer.ran ? fmt::format("{:.2f}x", speedup) : "-", "PASS"});
  std::cout << "\n" << table.render() << "\n";
  std::cout << fmt::format("{} tokens in {} launches of {} (after {} warm-up launches{}), median "
                           "over launches; floor = weight bytes / measured read ceiling\n",
                           m.tokens, timed_launches, tpl, warm_launches,
                           opt.start_position > 0
                               ? fmt::format(", from position {} of a seeded cache",
                                             opt.start_position)
                               : std::string());
  if (!trace_table.empty()) std::cout << "\n" << trace_table;

  report["check"] = "PASS";
  report["tokens"] = m.tokens;
  report["warmup_launches"] = warm_launches;
  report["tokens_per_launch"] = tpl;
  report["us_per_token_per_launch"] = m.us_per_token;
  report["median_us_per_token"] = median_us;
  report["tokens_per_s"] = 1e6 / median_us;
  report["pct_of_floor"] = pct_floor;
  report["pct_of_roofline_spec"] = pct_roofline;
  if (opt.peer) {
    nlohmann::json p = peer.report.is_null() ? nlohmann::json::object() : peer.report;
    if (!peer.ran) p["error"] = peer.error;
    report["peer"] = p;
    report["peer_us_per_token"] = peer.ran ? nlohmann::json(peer.us_per_token) : nlohmann::json();
    report["speedup"] = peer.ran ? nlohmann::json(speedup) : nlohmann::json();
  }
  write_json();

  row.correctness = "PASS";
  row.latency_us = median_us;
  row.pct_of_roofline = pct_roofline;
  row.description = fmt::format(
      "amk bench {} {}: {} tok in launches of {}; {:.1f}% of the measured floor ({:.1f} us at "
      "{:.0f} GB/s){}",
      model_name, name_of(*weight_dtype), m.tokens, tpl, pct_floor, floor_us, ceiling_gbs,
      peer.ran ? fmt::format("; torch peer {:.1f} us/token, speed-up {:.2f}x", peer.us_per_token,
                             speedup)
               : "");
  if (std::string why; !eval::append_results_row(opt.results, row, &why))
    std::cerr << "amk: bench: " << why << "\n";
  return kExitOk;
}

}  // namespace

void add_bench_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time single-stream decode on the GPU, checked against the CPU reference first");
  std::string names;
  for (std::string_view n : model_preset_names())
    names += (names.empty() ? "" : ", ") + std::string(n);
  cmd->add_option("model_dir", opt->model_dir, "Checkpoint folder or .gguf file (or use --preset)");
  cmd->add_option("--preset", opt->preset,
                  "Generate a random BF16 checkpoint of this shape first: " + names);
  cmd->add_option("--preset-dir", opt->preset_dir,
                  "Keep the generated preset here (and reuse it on the next run)");
  cmd->add_option("--gpu", opt->gpu, "Built-in target (h100, h200, ...) or auto")
      ->capture_default_str();
  cmd->add_option("--config", opt->config,
                  "ScheduleConfig JSON file (default: derived from the model and the target)");
  cmd->add_option("--tp", opt->tp,
                  "CLUSTERS,SIZE,ATTENTION: lower the derived config of a tensor-parallel step "
                  "(tiling.tp, docs/CLUSTER_TP.md) instead of --config or the default");
  cmd->add_flag("--cluster-launch", opt->cluster_launch,
                "With --tp: launch the CTAs in thread-block clusters of its size (refused when "
                "they do not all stay resident); nothing hands off inside them yet");
  cmd->add_option("--weights", opt->weights, "WEIGHT dtype: bf16 (default) or fp32");
  cmd->add_option("--tokens", opt->tokens, "Timed tokens (at least)")->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "Warm-up tokens, rounded up to whole launches")
      ->capture_default_str();
  cmd->add_option("--tokens-per-launch", opt->tokens_per_launch,
                  "Greedy steps per megakernel launch")
      ->capture_default_str();
  cmd->add_option("--context", opt->context,
                  "KV cache length of the program (default: the run's steps, rounded up to 256)");
  cmd->add_option("--start-position", opt->start_position,
                  "Position the timed decode starts at (after a seek with a seeded KV cache "
                  "below it): a long context's per-token time without decoding up to it")
      ->capture_default_str();
  cmd->add_option("--check-positions", opt->check_positions,
                  "Positions whose step is compared with the CPU reference before timing; a "
                  "position not reached by stepping is seek()ed to on both sides with the same "
                  "seeded KV cache; the first step that fails is followed by each layer's K and V "
                  "rows at its position against the ReferenceVM's (where the error entered)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--check-steps", opt->check_steps,
                  "Instead: compare the first N steps from an empty cache");
  cmd->add_option("--reference-cache", opt->reference_cache,
                  "Folder of reference logits kept between runs on this machine: the check "
                  "compares with the plain lowering's logits (amk eval's oracle), computed once "
                  "per checkpoint, context and check list (an A/B repeats the same checks)");
  cmd->add_flag("--reference-only", opt->reference_only,
               "Only compute the check's reference logits into --reference-cache and stop (no "
               "GPU needed: the build machine prepares them for a device run with the same "
               "preset, --gpu, --context and check positions)");
  cmd->add_option("--json", opt->json_path, "Write the full report here");
  cmd->add_option("--results", opt->results, "results.tsv to append a row to")
      ->capture_default_str();
  cmd->add_option("--tag", opt->tag, "Campaign tag of the results row");
  cmd->add_flag("--no-weight-ring", opt->no_weight_ring,
                "Consumers read GEMV weights from global memory (no producer-warp ring): an "
                "ablation of the weight streaming");
  cmd->add_flag("--profile", opt->profile,
                "Also print where one decode step's time goes (per-task GPU timestamps)");
  cmd->add_option("--profile-tsv", opt->profile_tsv,
                  "With --profile: also write every task's raw stamps here (TSV)");
  cmd->add_option("--trace", opt->trace,
                  "Write one decode step as a Chrome/Perfetto trace (JSON, one track per SM) and "
                  "print one layer's per-level table (bytes, floor, span, GB/s, exposed latency)");
  cmd->add_option("--trace-layer", opt->trace_layer,
                  "With --trace: the layer of the per-level table (default: the middle one)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--ring-probe", opt->ring_probe,
                "Also measure the read rate of the weight ring's bulk copies alone, per stage size "
                "and depth");
  cmd->add_flag("--peer", opt->peer,
                "Also time the PyTorch peer (bench/peers/torch_gptfast.py: fused q/k/v and "
                "gate/up, SDPA, torch.compile + one CUDA graph per step)");
  cmd->add_option("--peer-script", opt->peer_script,
                  "Another peer script with the same CLI and JSON (e.g. the legacy "
                  "bench/peers/torch_llama.py; default: torch_gptfast.py, found in the repo)");
  cmd->add_option("--python", opt->python, "Python interpreter for the peer")
      ->capture_default_str();
  cmd->callback([opt, &action] { action = [opt] { return run_bench(*opt); }; });
}

}  // namespace amk::cli
