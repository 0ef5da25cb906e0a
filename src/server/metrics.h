// The server's metrics in Prometheus' text exposition format (version 0.0.4), written here:
// counters, gauges and histograms (cumulative `_bucket{le=...}` lines, `+Inf`, `_sum`,
// `_count`). Thread-safe: handlers and the worker update them concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace amk::server {

class Histogram {
 public:
  // `bounds`: the buckets' upper bounds, ascending and finite (+Inf is added).
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // `name`'s _bucket, _sum and _count lines (no HELP/TYPE), with `labels` ("" or `a="b"`).
  std::string render(std::string_view name, std::string_view labels = "") const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  uint64_t count_ = 0;
  double sum_ = 0;
};

// A label value escaped for the text format (backslash, double quote, newline).
std::string escape_label_value(std::string_view value);
// A number as the text format writes it: integers plainly, "+Inf", "NaN", else shortest round-trip.
std::string format_metric_value(double value);

class Metrics {
 public:
  Metrics();

  // Requests answered, by endpoint ("chat", "completions", "models", ...) and outcome: "ok",
  // "bad_request" (400), "unauthorized" (401), "rejected" (503: queue full, loading, stopping),
  // "cancelled" (the client went away), "error" (500).
  void count_request(std::string_view endpoint, std::string_view outcome);
  void add_tokens(int64_t prompt, int64_t generated);
  void observe_time_to_first_token(double seconds);
  void observe_inter_token(double seconds);
  void observe_request_duration(double seconds);
  void set_queue_depth(int64_t waiting);
  void set_running(int64_t running);
  void set_ready(bool ready);

  std::string render() const;
  uint64_t requests(std::string_view endpoint, std::string_view outcome) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  Histogram ttft_, inter_token_, duration_;
  int64_t queue_depth_ = 0, running_ = 0;
  bool ready_ = false;
};

}  // namespace amk::server
