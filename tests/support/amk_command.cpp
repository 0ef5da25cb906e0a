#include "support/amk_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace amk::testing {

std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

CommandResult run_amk(const std::string& args) {
  namespace fs = std::filesystem;
  static std::atomic<int> n{0};
  const fs::path err_file =
      fs::temp_directory_path() /
      ("amk_cmd_test_" + std::to_string(getpid()) + "_" + std::to_string(n++));
  const std::string cmd =
      shell_quote(AMK_BINARY) + " " + args + " 2>" + shell_quote(err_file.string());
  CommandResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t got = 0;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, got);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream f(err_file, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  r.err = ss.str();
  fs::remove(err_file);
  return r;
}

}  // namespace amk::testing
