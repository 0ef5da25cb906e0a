// A scratch directory for one test, removed with everything in it when it goes out of scope
// (read-only entries included: a test may chmod what it wrote to provoke an error).
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace amk::testing {

class TempDir {
 public:
  // /tmp/amk_<tag>_<pid>_<serial>: unique within a process and across parallel test processes.
  explicit TempDir(std::string_view tag = "test") {
    static std::atomic<int> serial{0};
    path_ = std::filesystem::temp_directory_path() /
            ("amk_" + std::string(tag) + "_" + std::to_string(::getpid()) + "_" +
             std::to_string(serial++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace amk::testing
