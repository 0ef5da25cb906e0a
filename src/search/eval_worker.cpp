// The worker's side of amk/eval_worker.h: set up once, then one verdict per request line.
#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "amk/eval_worker.h"
#include "amk/model_config.h"
#include "amk/schedule_config_io.h"

namespace amk::search {

std::string worker_setup_to_json(const WorkerSetup& s) {
  const eval::EvalOptions& o = s.options;
  nlohmann::json j = {{"model_path", s.model_path},
                      {"model_name", s.model_name},
                      {"gpu", s.gpu},
                      {"weights", s.weights},
                      {"device", std::string(eval::name_of(o.device))},
                      {"max_context", o.max_context},
                      {"check_positions", o.check_positions},
                      {"check_layers", o.check_layers},
                      {"tokens", o.tokens},
                      {"warmup", o.warmup},
                      {"tokens_per_launch", o.tokens_per_launch},
                      {"launch_timeout_s", o.launch_timeout_s},
                      {"weight_ring", o.weight_ring},
                      {"profile", o.profile},
                      {"reference_cache", o.reference_cache_dir}};
  return j.dump();
}

WorkerSetup worker_setup_from_json(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    WorkerSetup s;
    s.model_path = j.at("model_path").get<std::string>();
    s.model_name = j.at("model_name").get<std::string>();
    s.gpu = j.at("gpu").get<std::string>();
    s.weights = j.value("weights", "");
    const auto device = eval::eval_device_from_name(j.at("device").get<std::string>());
    if (!device) throw std::invalid_argument("unknown device");
    s.options.device = *device;
    s.options.max_context = j.at("max_context").get<int64_t>();
    s.options.check_positions = j.at("check_positions").get<std::vector<int64_t>>();
    s.options.check_layers = j.at("check_layers").get<int64_t>();
    s.options.tokens = j.at("tokens").get<int>();
    s.options.warmup = j.at("warmup").get<int>();
    s.options.tokens_per_launch = j.at("tokens_per_launch").get<int>();
    s.options.launch_timeout_s = j.at("launch_timeout_s").get<double>();
    s.options.weight_ring = j.at("weight_ring").get<bool>();
    s.options.profile = j.at("profile").get<bool>();
    s.options.reference_cache_dir = j.value("reference_cache", "");
    return s;
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("malformed worker setup: ") + e.what());
  }
}

InjectedFault injected_fault(const char* env, int64_t experiment) {
  if (env == nullptr) return InjectedFault::None;
  const std::string_view all(env);
  size_t start = 0;
  while (start < all.size()) {
    size_t comma = all.find(',', start);
    if (comma == std::string_view::npos) comma = all.size();
    const std::string_view item = all.substr(start, comma - start);
    start = comma + 1;
    const size_t at = item.find('@');
    if (at == std::string_view::npos) continue;
    const std::string_view kind = item.substr(0, at);
    const std::string n(item.substr(at + 1));
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos) continue;
    if (std::stoll(n) != experiment) continue;
    if (kind == "hang") return InjectedFault::Hang;
    if (kind == "crash") return InjectedFault::Crash;
    if (kind == "fail") return InjectedFault::Fail;
    if (kind == "reject") return InjectedFault::Reject;
  }
  return InjectedFault::None;
}

namespace {

std::optional<DType> weights_dtype(const std::string& w) {
  if (w == "bf16") return DType::BF16;
  if (w == "fp32") return DType::F32;
  if (w.empty()) return std::nullopt;
  throw std::invalid_argument(fmt::format("--weights '{}': use bf16 or fp32", w));
}

}  // namespace

int run_eval_worker(const std::string& setup_json, std::istream& in, std::ostream& out) {
  std::unique_ptr<eval::Evaluator> evaluator;
  try {
    WorkerSetup s = worker_setup_from_json(setup_json);
    const GpuTarget* target = find_target(s.gpu);
    if (target == nullptr) throw std::invalid_argument(fmt::format("unknown target '{}'", s.gpu));
    if (!s.weights.empty()) s.options.weight_dtype = weights_dtype(s.weights);
    evaluator = std::make_unique<eval::Evaluator>(Checkpoint::open(s.model_path), s.model_name,
                                                  *target, s.options);
    evaluator->prepare_reference();
  } catch (const std::exception& e) {
    out << nlohmann::json({{"error", e.what()}}).dump() << std::endl;
    return 2;
  }
  out << nlohmann::json({{"ready", true},
                         {"pid", int64_t(getpid())},
                         {"check_layers", evaluator->check_layers()}})
             .dump()
      << std::endl;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    int64_t experiment = 0;
    ConfigParse parsed;
    try {
      // Ordered: the config's tiling map keeps its order, so its schedule id is the parent's.
      const nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);
      experiment = j.value("experiment", int64_t{0});
      parsed = parse_schedule_config(j.at("config").dump());
    } catch (const std::exception& e) {
      out << nlohmann::json({{"error", std::string("malformed request: ") + e.what()}}).dump()
          << std::endl;
      continue;
    }
    eval::Verdict v;
    if (!parsed.config) {
      v = eval::failed_verdict(eval::Correctness::REJECTED, "", "config: " + parsed.error);
    } else {
      eval::EvalFaults faults;
      switch (injected_fault(std::getenv(kInjectEnv), experiment)) {
        case InjectedFault::Hang:
          std::cerr << "amk eval-worker: injected hang at experiment " << experiment << std::endl;
          for (;;) pause();
        case InjectedFault::Crash:
          std::cerr << "amk eval-worker: injected crash at experiment " << experiment << std::endl;
          std::signal(SIGABRT, SIG_DFL);
          std::abort();
        case InjectedFault::Fail:
          faults.perturb_logits = true;
          break;
        case InjectedFault::Reject:
          faults.corrupt_program = true;
          break;
        case InjectedFault::None:
          break;
      }
      v = evaluator->evaluate(*parsed.config, faults);
    }
    out << "{\"verdict\": " << eval::verdict_to_json(v) << "}" << std::endl;
  }
  return 0;
}

}  // namespace amk::search
