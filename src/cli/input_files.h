// Reading the files a command is given (programs, ScheduleConfig files): only regular files (a
// FIFO would block forever, /dev/zero would never end), or "-" for standard input where a command
// takes text, and never more than a cap, checked before reading. Header-only: every command
// includes what it uses.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace amk::cli {

// A program of the largest model AMK lowers is tens of megabytes; a ScheduleConfig (even one
// assigning every task an SM) a few.
inline constexpr uint64_t kMaxProgramFileBytes = uint64_t{256} << 20;
inline constexpr uint64_t kMaxConfigFileBytes = uint64_t{64} << 20;

// The text of `path` ("-": standard input), or nullopt with `*why` set: not found, a directory, not
// a regular file (FIFO, device, socket), larger than `max_bytes`, or a read error.
inline std::optional<std::string> read_input_text(const std::string& path, uint64_t max_bytes,
                                                  std::string* why) {
  const auto too_big = [&](const std::string& size) {
    *why = size + ", over the " + std::to_string(max_bytes >> 20) +
           " MiB limit for this input (is it the right file?)";
    return std::nullopt;
  };
  std::FILE* f = nullptr;
  if (path == "-") {
    f = stdin;
  } else {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {  // follows symlinks: the target is what gets read
      *why = errno == ENOENT ? std::string("no such file") : std::strerror(errno);
      return std::nullopt;
    }
    if (S_ISDIR(st.st_mode)) {
      *why = "is a directory, not a file";
      return std::nullopt;
    }
    if (!S_ISREG(st.st_mode)) {
      *why = S_ISFIFO(st.st_mode)  ? "is a FIFO, not a regular file"
             : S_ISCHR(st.st_mode) ? "is a character device, not a regular file"
             : S_ISBLK(st.st_mode) ? "is a block device, not a regular file"
                                   : "is not a regular file";
      return std::nullopt;
    }
    if (uint64_t(st.st_size) > max_bytes) return too_big(std::to_string(st.st_size) + " bytes");
    f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
      *why = std::strerror(errno);
      return std::nullopt;
    }
  }
  std::string text;
  char buf[1 << 16];
  size_t n = 0;
  bool over = false;
  // Read to EOF, capped: a file can grow after stat, and stdin has no size.
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    if (text.size() + n > max_bytes) {
      over = true;
      break;
    }
    text.append(buf, n);
  }
  const bool error = std::ferror(f) != 0;
  const int err = errno;
  if (f != stdin) std::fclose(f);
  if (over) return too_big("more than " + std::to_string(max_bytes) + " bytes");
  if (error) {
    *why = std::string("read error: ") + std::strerror(err);
    return std::nullopt;
  }
  return text;
}

}  // namespace amk::cli
