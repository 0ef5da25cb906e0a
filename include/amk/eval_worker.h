// The evaluation worker (PROGRAM.md §4: one failure never stops the run). A campaign evaluates
// every config in a child process, `amk eval-worker --setup JSON`, that loads the checkpoint
// once and answers requests over a pipe, one JSON line each way:
//   parent -> worker   {"experiment": 7, "config": {...ScheduleConfig...}}
//   worker -> parent   {"ready": true, ...} once, then {"verdict": {...}} per request
//                      ({"error": "..."} instead of ready when the setup cannot work)
// The parent arms a wall-clock watchdog per request: no answer in time is TIMEOUT (the worker is
// killed), a worker that dies is CRASH; both are verdicts, and the next request starts a fresh
// worker. The worker's stderr goes to a log file.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <istream>
#include <ostream>
#include <string>

#include "amk/evaluate.h"
#include "amk/verdict.h"

namespace amk::search {

// What a worker evaluates with: the model, the target and the evaluation options.
struct WorkerSetup {
  std::string model_path, model_name, gpu;
  eval::EvalOptions options;
  std::string weights;  // "", "bf16" or "fp32"
};
std::string worker_setup_to_json(const WorkerSetup& s);
// Throws std::invalid_argument on a malformed setup.
WorkerSetup worker_setup_from_json(const std::string& text);

// TEST hooks, read by the worker from AMK_TEST_INJECT: a comma-separated list of
// "hang@N", "crash@N", "fail@N" or "reject@N" (N an experiment id). At experiment N the worker
// hangs forever, dies by SIGABRT, perturbs the schedule's logits so the check FAILs, or corrupts
// the lowered program so validate() REJECTs it (amk/evaluate.h EvalFaults).
inline constexpr const char* kInjectEnv = "AMK_TEST_INJECT";
enum class InjectedFault { None, Hang, Crash, Fail, Reject };
InjectedFault injected_fault(const char* env_value, int64_t experiment);

// The worker's side: sets up, prints the ready (or error) line, then answers until `in` ends.
// Returns the process exit code (0 at end of input, 2 when the setup failed).
int run_eval_worker(const std::string& setup_json, std::istream& in, std::ostream& out);

// The parent's side.
class EvalWorker {
 public:
  // `exe`: the amk binary (/proc/self/exe from the command). Nothing starts until the first
  // evaluate().
  EvalWorker(std::string exe, WorkerSetup setup, std::filesystem::path log, double watchdog_s,
             double startup_timeout_s = 1800);
  ~EvalWorker();
  EvalWorker(const EvalWorker&) = delete;
  EvalWorker& operator=(const EvalWorker&) = delete;

  // A verdict always, TIMEOUT / CRASH included. Throws eval::EvalSetupError when a fresh worker
  // cannot get ready (a bad model, no GPU): that is the command's error, not an experiment's.
  eval::Verdict evaluate(const ScheduleConfig& config, int64_t experiment);

  int starts() const { return starts_; }  // workers started so far (1 + restarts)
  // The ready line's report (check layers, ...), once a worker has started.
  const std::string& ready_line() const { return ready_line_; }

 private:
  void start();
  void stop(bool kill_now);
  enum class Read { Line, Timeout, Eof };
  Read read_line(double timeout_s, std::string& line);

  std::string exe_;
  WorkerSetup setup_;
  std::filesystem::path log_;
  double watchdog_s_, startup_timeout_s_;
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::string buffer_;
  int starts_ = 0;
  std::string ready_line_;
};

}  // namespace amk::search
