#include "support/tiny_model.h"

#include <unistd.h>

#include <string>

#include "amk/random_checkpoint.h"

namespace amk::testing {

namespace {

struct TinyModel {
  std::filesystem::path dir;
  TinyModel() {
    dir = std::filesystem::temp_directory_path() / ("amk_test_tiny_" + std::to_string(getpid()));
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
