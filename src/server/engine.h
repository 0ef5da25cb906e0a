// The one worker that generates: a bounded queue of jobs run one at a time at batch 1 over a
// Generator (whose KV cache carries over between jobs: a prompt that extends the cached tokens
// reads only the new ones, with the same result as a fresh run). A job streams its text pieces
// to whoever waits on it (an HTTP handler) and ends with the GenerationResult or an ApiError.
// Setting a job's `cancel` (its client went away) ends its generation at the next token, or
// skips it if it has not started.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "amk/generator.h"
#include "server/metrics.h"
#include "server/request.h"

namespace amk::server {

using Clock = std::chrono::steady_clock;

class Job {
 public:
  Job(Endpoint endpoint, std::vector<int64_t> prompt, GenerationOptions options);

  const Endpoint endpoint;
  const std::vector<int64_t> prompt;
  const GenerationOptions options;
  const Clock::time_point received;
  std::atomic<bool> cancel{false};

  // The worker's side.
  void push_text(std::string_view piece);
  void finish(GenerationResult result);
  void fail(const ApiError& error);

  // The waiter's side: the next text piece, or the end. Returns false on timeout.
  struct Event {
    std::optional<std::string> text;           // a piece, or
    std::optional<GenerationResult> result;    // the end, or
    std::optional<ApiError> error;             // a failure
  };
  bool wait(Event& event, std::chrono::milliseconds timeout);
  // Blocks until the end; the whole text is in the result.
  Event wait_end();

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> pieces_;
  std::optional<GenerationResult> result_;
  std::optional<ApiError> error_;
};

class Engine {
 public:
  // `generator` must outlive the Engine; `max_queue` jobs may wait while one runs.
  Engine(Generator& generator, Metrics& metrics, size_t max_queue);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // False when the queue is full or the engine is stopping (the job is not taken).
  bool submit(std::shared_ptr<Job> job);
  // Cancels the running job, fails the waiting ones (503, the server is shutting down) and
  // joins the worker. Idempotent.
  void stop();
  size_t waiting() const;

 private:
  void run();
  void run_job(Job& job);

  Generator& generator_;
  Metrics& metrics_;
  const size_t max_queue_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> running_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace amk::server
