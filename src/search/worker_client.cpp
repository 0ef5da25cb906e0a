// The parent's side of amk/eval_worker.h: start the worker, send a request, wait for its answer
// under the watchdog, and turn a silent or dead worker into a TIMEOUT or CRASH verdict.
#include <fcntl.h>
#include <sys/prctl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "amk/eval_worker.h"
#include "amk/json.h"
#include "amk/schedule_config_io.h"

namespace amk::search {

namespace {

std::string describe_status(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return "ended";
}

bool write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += size_t(n);
  }
  return true;
}

}  // namespace

EvalWorker::EvalWorker(std::string exe, WorkerSetup setup, std::filesystem::path log,
                       double watchdog_s, double startup_timeout_s)
    : exe_(std::move(exe)),
      setup_(std::move(setup)),
      log_(std::move(log)),
      watchdog_s_(watchdog_s),
      startup_timeout_s_(startup_timeout_s) {
  // A worker that dies while we write to it must be an EPIPE here, not the end of the campaign.
  ::signal(SIGPIPE, SIG_IGN);
}

EvalWorker::~EvalWorker() { stop(false); }

void EvalWorker::stop(bool kill_now) {
  if (to_child_ >= 0) ::close(to_child_);
  to_child_ = -1;
  if (pid_ > 0) {
    int status = 0;
    bool reaped = false;
    if (!kill_now) {  // end of input: a healthy worker exits by itself
      for (int i = 0; i < 200 && !reaped; ++i) {
        if (::waitpid(pid_, &status, WNOHANG) == pid_) reaped = true;
        else std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    if (!reaped) {
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
  pid_ = -1;
  if (from_child_ >= 0) ::close(from_child_);
  from_child_ = -1;
  buffer_.clear();
}

EvalWorker::Read EvalWorker::read_line(double timeout_s, std::string& line) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return Read::Line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Read::Timeout;
    pollfd p{from_child_, POLLIN, 0};
    const int r = ::poll(&p, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Read::Eof;
    }
    if (r == 0) continue;
    char chunk[65536];
    const ssize_t n = ::read(from_child_, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Read::Eof;
    }
    if (n == 0) return Read::Eof;
    buffer_.append(chunk, size_t(n));
  }
}

void EvalWorker::start() {
  int to[2], from[2];
  if (::pipe2(to, O_CLOEXEC) != 0) throw eval::EvalSetupError("pipe: " + std::string(strerror(errno)));
  if (::pipe2(from, O_CLOEXEC) != 0) {
    ::close(to[0]);
    ::close(to[1]);
    throw eval::EvalSetupError("pipe: " + std::string(strerror(errno)));
  }
  const std::string setup = worker_setup_to_json(setup_);
  const std::string log = log_.string();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {to[0], to[1], from[0], from[1]}) ::close(fd);
    throw eval::EvalSetupError("fork: " + std::string(strerror(errno)));
  }
  if (pid == 0) {
    // The child: stdin/stdout are the pipes, stderr the log; every other descriptor is
    // close-on-exec, so none leaks into the worker.
    ::dup2(to[0], 0);
    ::dup2(from[1], 1);
    const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd >= 0) ::dup2(log_fd, 2);
    ::signal(SIGPIPE, SIG_DFL);
    // The worker dies with the campaign: a killed `amk autoresearch` must not leave a worker
    // computing reference logits (or holding the GPU) for minutes. The parent may already be
    // gone between fork and prctl, so check after arming it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    const char* argv[] = {exe_.c_str(), "eval-worker", "--setup", setup.c_str(), nullptr};
    ::execv(exe_.c_str(), const_cast<char* const*>(argv));
    ::_exit(127);
  }
  ::close(to[0]);
  ::close(from[1]);
  pid_ = pid;
  to_child_ = to[1];
  from_child_ = from[0];
  ++starts_;
  std::string line;
  const Read r = read_line(startup_timeout_s_, line);
  if (r == Read::Line) {
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.value("ready", false)) {
        ready_line_ = line;
        return;
      }
      const std::string why = j.value("error", "no ready line");
      stop(true);
      throw eval::EvalSetupError(why);
    } catch (const nlohmann::json::exception&) {
      stop(true);
      throw eval::EvalSetupError("the evaluation worker sent '" + line + "' instead of ready");
    }
  }
  int status = 0;
  if (r == Read::Timeout) {
    stop(true);
    throw eval::EvalSetupError(
        fmt::format("the evaluation worker was not ready in {:g} s", startup_timeout_s_));
  }
  ::close(to_child_);
  to_child_ = -1;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  ::close(from_child_);
  from_child_ = -1;
  throw eval::EvalSetupError(fmt::format("the evaluation worker ({}) {} before it was ready (see {})",
                                         exe_, describe_status(status), log_.string()));
}

eval::Verdict EvalWorker::evaluate(const ScheduleConfig& config, int64_t experiment) {
  const std::string id = schedule_id(config);
  if (pid_ <= 0) start();
  const std::string request =
      fmt::format("{{\"experiment\": {}, \"config\": {}}}\n", experiment,
                  nlohmann::ordered_json::parse(config_to_json(config)).dump());
  std::string line;
  Read r = write_all(to_child_, request) ? Read::Line : Read::Eof;
  if (r == Read::Line) r = read_line(watchdog_s_, line);
  if (r == Read::Line) {
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.contains("verdict")) {
        eval::Verdict v = eval::verdict_from_json(j.at("verdict").dump());
        if (v.schedule_id.empty()) v.schedule_id = id;
        return v;
      }
      return eval::failed_verdict(eval::Correctness::CRASH, id,
                                  "the evaluation worker answered: " + j.value("error", line));
    } catch (const std::exception& e) {
      stop(true);
      return eval::failed_verdict(eval::Correctness::CRASH, id,
                                  std::string("unreadable answer from the worker: ") + e.what());
    }
  }
  if (r == Read::Timeout) {
    stop(true);
    return eval::failed_verdict(
        eval::Correctness::TIMEOUT, id,
        fmt::format("watchdog: no verdict in {:g} s; the worker was killed, a fresh one continues",
                    watchdog_s_));
  }
  // The worker is gone: reap it and say how it ended.
  ::close(to_child_);
  to_child_ = -1;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  ::close(from_child_);
  from_child_ = -1;
  buffer_.clear();
  return eval::failed_verdict(
      eval::Correctness::CRASH, id,
      fmt::format("the evaluation worker {}; a fresh one continues", describe_status(status)));
}

}  // namespace amk::search
