// "amk: <what> 12/30" redrawn in place on stderr while long work runs, only when stderr is a
// terminal: in a pipe or a log file the same run prints nothing, so a machine reading stderr
// never sees carriage returns.
#pragma once

#include <cstdint>
#include <string>

namespace amk {

class TerminalProgress {
 public:
  // `enabled` false silences it whatever stderr is (a caller's --quiet, a library user).
  TerminalProgress(std::string what, int64_t total, bool enabled = true);
  ~TerminalProgress();  // clears the line
  TerminalProgress(const TerminalProgress&) = delete;
  TerminalProgress& operator=(const TerminalProgress&) = delete;

  void update(int64_t done);

 private:
  std::string what_;
  int64_t total_ = 0;
  bool shown_ = false;
};

}  // namespace amk
