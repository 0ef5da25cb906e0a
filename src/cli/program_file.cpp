#include "cli/program_file.h"

#include <exception>
#include <filesystem>
#include <iostream>
#include <system_error>

#include "amk/json.h"

namespace amk::cli {

std::optional<LoadedProgram> load_program_file(const std::string& path) {
  const auto fail = [&](const std::string& why) -> std::optional<LoadedProgram> {
    std::cerr << "amk: cannot load '" << path << "': " << why << "\n";
    return std::nullopt;
  };
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) return fail("no such file");
  if (std::filesystem::is_directory(st)) return fail("is a directory, not a program file");
  try {
    LoadResult r = load_program(path);
    if (!r.program) {
      if (r.error.empty()) return fail("not a valid program");
      // The loader may already lead with the path; say it once.
      const std::string lead = path + ": ";
      return fail(r.error.rfind(lead, 0) == 0 ? r.error.substr(lead.size()) : r.error);
    }
    return LoadedProgram{std::move(*r.program), std::move(r.warnings)};
  } catch (const std::exception& e) {  // the loader should not throw; never let it crash us
    return fail(e.what());
  }
}

}  // namespace amk::cli
