#include "cli/program_file.h"

#include <exception>
#include <iostream>

#include "amk/json.h"
#include "cli/input_files.h"

namespace amk::cli {

std::optional<LoadedProgram> load_program_file(const std::string& path) {
  const auto fail = [&](const std::string& why) -> std::optional<LoadedProgram> {
    std::cerr << "amk: cannot load '" << path << "': " << why << "\n";
    return std::nullopt;
  };
  std::string why;
  const std::optional<std::string> text = read_input_text(path, kMaxProgramFileBytes, &why);
  if (!text) return fail(why);
  try {
    LoadResult r = program_from_json(*text);
    if (!r.program) return fail(r.error.empty() ? "not a valid program" : r.error);
    return LoadedProgram{std::move(*r.program), std::move(r.warnings)};
  } catch (const std::exception& e) {  // the loader should not throw; never let it crash us
    return fail(e.what());
  }
}

}  // namespace amk::cli
