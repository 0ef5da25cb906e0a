// A random `tiny` checkpoint written once per test binary into a temporary folder (what
// `amk make-model --preset tiny` writes), for tests that evaluate or search schedules on it.
#pragma once

#include <filesystem>

namespace amk::testing {

// The folder (created on first use, removed at exit).
const std::filesystem::path& tiny_model_dir();

}  // namespace amk::testing
