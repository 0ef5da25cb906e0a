#include "support/tiny_model.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>

#include "amk/random_checkpoint.h"

namespace amk::testing {

namespace {

constexpr std::string_view kPrefix = "amk_test_tiny_";

// Folders of earlier test processes that did not run their destructor (a death test's child
// exits with _exit, a killed run never returns): removed when their process is gone, so they
// do not pile up in /tmp.
void remove_stale_models(const std::filesystem::path& tmp) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(tmp, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    const std::string digits = name.substr(kPrefix.size());
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = pid_t(std::stol(digits));
    if (pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      std::filesystem::remove_all(entry.path(), ignored);
    }
  }
}

struct TinyModel {
  std::filesystem::path dir;
  TinyModel() {
    const std::filesystem::path tmp = std::filesystem::temp_directory_path();
    remove_stale_models(tmp);
    dir = tmp / (std::string(kPrefix) + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    write_random_checkpoint(dir, "tiny", DType::F32, /*seed=*/7);
  }
  ~TinyModel() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

}  // namespace

const std::filesystem::path& tiny_model_dir() {
  static const TinyModel model;
  return model.dir;
}

}  // namespace amk::testing
