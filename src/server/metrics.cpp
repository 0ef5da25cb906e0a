// Prometheus text exposition (server/metrics.h).
#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace amk::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 0; i < bounds_.size(); ++i)
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1]))
      throw std::invalid_argument("histogram bounds must be finite and ascending");
}

void Histogram::observe(double value) {
  // A value equal to a bound belongs to that bucket (le: less than or equal).
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  ++counts_[i];
  ++count_;
  sum_ += value;
}

std::string Histogram::render(std::string_view name, std::string_view labels) const {
  std::string out;
  const std::string sep = labels.empty() ? "" : std::string(labels) + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? format_metric_value(bounds_[i]) : "+Inf";
    out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, sep, le, cumulative);
  }
  const std::string braces = labels.empty() ? "" : "{" + std::string(labels) + "}";
  out += fmt::format("{}_sum{} {}\n", name, braces, format_metric_value(sum_));
  out += fmt::format("{}_count{} {}\n", name, braces, count_);
  return out;
}

std::string escape_label_value(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

namespace {

// TTFT on 2 CPU cores runs from tens of ms to seconds (a long prompt); a GPU's from ms.
const std::vector<double> kTtftBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
const std::vector<double> kInterTokenBounds = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05,
                                               0.075, 0.1, 0.25, 0.5, 1};
const std::vector<double> kDurationBounds = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

Metrics::Metrics() : ttft_(kTtftBounds), inter_token_(kInterTokenBounds), duration_(kDurationBounds) {}

void Metrics::count_request(std::string_view endpoint, std::string_view outcome) {
  std::lock_guard lock(mutex_);
  ++requests_[{std::string(endpoint), std::string(outcome)}];
}

void Metrics::add_tokens(int64_t prompt, int64_t generated) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += static_cast<uint64_t>(std::max<int64_t>(prompt, 0));
  generated_tokens_ += static_cast<uint64_t>(std::max<int64_t>(generated, 0));
}

void Metrics::observe_time_to_first_token(double s) {
  std::lock_guard lock(mutex_);
  ttft_.observe(s);
}

void Metrics::observe_inter_token(double s) {
  std::lock_guard lock(mutex_);
  inter_token_.observe(s);
}

void Metrics::observe_request_duration(double s) {
  std::lock_guard lock(mutex_);
  duration_.observe(s);
}

void Metrics::set_queue_depth(int64_t waiting) {
  std::lock_guard lock(mutex_);
  queue_depth_ = waiting;
}

void Metrics::set_running(int64_t running) {
  std::lock_guard lock(mutex_);
  running_ = running;
}

void Metrics::set_ready(bool ready) {
  std::lock_guard lock(mutex_);
  ready_ = ready;
}

uint64_t Metrics::requests(std::string_view endpoint, std::string_view outcome) const {
  std::lock_guard lock(mutex_);
  const auto it = requests_.find({std::string(endpoint), std::string(outcome)});
  return it == requests_.end() ? 0 : it->second;
}

std::string Metrics::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  header(out, "amk_requests_total", "counter", "Requests answered, by endpoint and outcome.");
  for (const auto& [key, n] : requests_)
    out += fmt::format("amk_requests_total{{endpoint=\"{}\",outcome=\"{}\"}} {}\n", escape_label_value(key.first),
                       escape_label_value(key.second), n);
  header(out, "amk_prompt_tokens_total", "counter", "Prompt tokens of the requests run.");
  out += fmt::format("amk_prompt_tokens_total {}\n", prompt_tokens_);
  header(out, "amk_generated_tokens_total", "counter", "Tokens generated.");
  out += fmt::format("amk_generated_tokens_total {}\n", generated_tokens_);
  header(out, "amk_time_to_first_token_seconds", "histogram",
         "From a request's arrival (queueing included) to its first generated token.");
  out += ttft_.render("amk_time_to_first_token_seconds");
  header(out, "amk_inter_token_latency_seconds", "histogram", "Between consecutive generated tokens of a request.");
  out += inter_token_.render("amk_inter_token_latency_seconds");
  header(out, "amk_request_duration_seconds", "histogram", "From a request's arrival to its last token.");
  out += duration_.render("amk_request_duration_seconds");
  header(out, "amk_queue_depth", "gauge", "Requests waiting for the worker.");
  out += fmt::format("amk_queue_depth {}\n", queue_depth_);
  header(out, "amk_requests_running", "gauge", "Requests being generated (0 or 1).");
  out += fmt::format("amk_requests_running {}\n", running_);
  header(out, "amk_model_ready", "gauge", "1 once the model is loaded.");
  out += fmt::format("amk_model_ready {}\n", ready_ ? 1 : 0);
  return out;
}

}  // namespace amk::server
