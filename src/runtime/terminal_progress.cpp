#include "runtime/terminal_progress.h"

#include <unistd.h>

#include <cstdio>

namespace amk {

TerminalProgress::TerminalProgress(std::string what, int64_t total, bool enabled)
    : what_(std::move(what)), total_(total), shown_(enabled && ::isatty(STDERR_FILENO) == 1) {}

TerminalProgress::~TerminalProgress() {
  if (!shown_) return;
  std::fprintf(stderr, "\r\033[K");  // erase the line so the command's own output starts clean
  std::fflush(stderr);
}

void TerminalProgress::update(int64_t done) {
  if (!shown_) return;
  std::fprintf(stderr, "\ramk: %s %lld/%lld", what_.c_str(), static_cast<long long>(done),
               static_cast<long long>(total_));
  std::fflush(stderr);
}

}  // namespace amk
