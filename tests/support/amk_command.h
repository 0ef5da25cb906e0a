// Running the built `amk` binary from a test: exit code, stdout and stderr.
#pragma once

#include <string>

namespace amk::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs `amk ARGS` through the shell (quote paths with shell_quote).
CommandResult run_amk(const std::string& args);
std::string shell_quote(const std::string& s);

}  // namespace amk::testing
