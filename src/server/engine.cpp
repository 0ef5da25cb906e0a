// The bounded queue and its single worker (server/engine.h).
#include "server/engine.h"

#include <fmt/format.h>

#include <iostream>

#include "amk/decoder.h"

namespace amk::server {

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

ApiError shutting_down() { return ApiError(503, "the server is shutting down", "server_error", std::nullopt, "shutting_down"); }

}  // namespace

Job::Job(Endpoint endpoint_, std::vector<int64_t> prompt_, GenerationOptions options_)
    : endpoint(endpoint_), prompt(std::move(prompt_)), options(std::move(options_)), received(Clock::now()) {}

void Job::push_text(std::string_view piece) {
  {
    std::lock_guard lock(mutex_);
    pieces_.emplace_back(piece);
  }
  cv_.notify_all();
}

void Job::finish(GenerationResult result) {
  {
    std::lock_guard lock(mutex_);
    result_ = std::move(result);
  }
  cv_.notify_all();
}

void Job::fail(const ApiError& error) {
  {
    std::lock_guard lock(mutex_);
    error_ = error;
  }
  cv_.notify_all();
}

bool Job::wait(Event& event, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const auto ready = [&] { return !pieces_.empty() || result_ || error_; };
  if (!cv_.wait_for(lock, timeout, ready)) return false;
  event = Event{};
  if (!pieces_.empty()) {
    event.text = std::move(pieces_.front());
    pieces_.pop_front();
  } else if (error_) {
    event.error = error_;
  } else {
    event.result = result_;
  }
  return true;
}

Job::Event Job::wait_end() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return result_ || error_; });
  Event event;
  if (error_) event.error = error_;
  else event.result = result_;
  return event;
}

Engine::Engine(Generator& generator, Metrics& metrics, size_t max_queue)
    : generator_(generator), metrics_(metrics), max_queue_(max_queue) {
  worker_ = std::thread([this] { run(); });
}

Engine::~Engine() { stop(); }

bool Engine::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || queue_.size() >= max_queue_) return false;
    queue_.push_back(std::move(job));
    metrics_.set_queue_depth(static_cast<int64_t>(queue_.size()));
  }
  cv_.notify_all();
  return true;
}

size_t Engine::waiting() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

void Engine::stop() {
  std::deque<std::shared_ptr<Job>> dropped;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (running_) running_->cancel.store(true);
    dropped.swap(queue_);
    metrics_.set_queue_depth(0);
  }
  cv_.notify_all();
  for (const auto& job : dropped) {
    metrics_.count_request(endpoint_name(job->endpoint), "rejected");
    job->fail(shutting_down());
  }
  if (worker_.joinable()) worker_.join();
}

void Engine::run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      job = std::move(queue_.front());
      queue_.pop_front();
      running_ = job;
      metrics_.set_queue_depth(static_cast<int64_t>(queue_.size()));
    }
    metrics_.set_running(1);
    run_job(*job);
    metrics_.set_running(0);
    std::lock_guard lock(mutex_);
    running_.reset();
  }
}

void Engine::run_job(Job& job) {
  const char* endpoint = endpoint_name(job.endpoint);
  bool stopping = false;
  {
    std::lock_guard lock(mutex_);
    stopping = stopping_;
  }
  if (job.cancel.load() || stopping) {  // its client left while it waited (or we are stopping)
    metrics_.count_request(endpoint, "cancelled");
    job.fail(stopping ? shutting_down() : ApiError(499, "the client closed the connection", "cancelled"));
    return;
  }
  Clock::time_point last = job.received;
  bool first = true;
  const auto on_token = [&](int64_t) {
    const Clock::time_point now = Clock::now();
    if (first) metrics_.observe_time_to_first_token(seconds_between(job.received, now));
    else metrics_.observe_inter_token(seconds_between(last, now));
    first = false;
    last = now;
  };
  const auto on_text = [&](std::string_view piece) { job.push_text(piece); };
  try {
    GenerationResult r = generator_.generate(job.prompt, job.options, on_text, &job.cancel, {}, on_token);
    metrics_.add_tokens(static_cast<int64_t>(r.prompt_ids.size()), static_cast<int64_t>(r.ids.size()));
    metrics_.observe_request_duration(seconds_between(job.received, Clock::now()));
    if (r.finish == FinishReason::Interrupted) {
      std::lock_guard lock(mutex_);
      stopping = stopping_;
    }
    if (r.finish == FinishReason::Interrupted && stopping) {
      metrics_.count_request(endpoint, "cancelled");
      job.fail(shutting_down());
      return;
    }
    metrics_.count_request(endpoint, r.finish == FinishReason::Interrupted ? "cancelled" : "ok");
    job.finish(std::move(r));
  } catch (const std::invalid_argument& e) {  // checked before queueing; kept as a guard
    metrics_.count_request(endpoint, "bad_request");
    job.fail(ApiError(400, e.what()));
  } catch (const std::exception& e) {  // DecodeError, CudaVmError
    std::cerr << "amk serve: generation failed: " << e.what() << "\n";
    generator_.reset();
    metrics_.count_request(endpoint, "error");
    job.fail(ApiError(500, fmt::format("generation failed: {}", e.what()), "server_error"));
  }
}

}  // namespace amk::server
