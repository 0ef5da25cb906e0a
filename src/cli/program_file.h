// Loading a program file for a command: every failure becomes one message on stderr that names
// the path and the problem, and the command exits kExitBadInput.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "amk/ir.h"

namespace amk::cli {

struct LoadedProgram {
  Program program;
  std::vector<std::string> warnings;  // the loader's forward-compatibility notes
};

// The file at `path`, or standard input for "-": a regular file of at most kMaxProgramFileBytes
// (cli/input_files.h). nullopt after printing "amk: cannot load 'PATH': reason" to stderr.
std::optional<LoadedProgram> load_program_file(const std::string& path);

}  // namespace amk::cli
