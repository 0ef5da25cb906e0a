// libFuzzer target for the program loader (IR_SPEC §6).
//
// Properties, for any bytes: loading never crashes and a refusal always says why; a loaded program
// writes out, loads back equal and writes out byte-identical (the round-trip contract of
// program_to_json); validate() and the meta accessors take any loaded program without throwing.
//
// Build: see docs/FUZZING.md. Run: ./build-fuzz/fuzz_json -dict=fuzz/json.dict fuzz/corpus
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "amk/json.h"
#include "amk/validate.h"

namespace {

[[noreturn]] void die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_json: %s\n%s\n", what, detail.substr(0, 4000).c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const amk::LoadResult first = amk::program_from_json(text);
  if (!first) {
    if (first.error.empty()) die("refused without a message", std::string(text));
    return 0;
  }
  const amk::Program& program = *first.program;
  const std::string written = amk::program_to_json(program);
  const amk::LoadResult second = amk::program_from_json(written);
  if (!second) die("our own output does not load", second.error + "\n" + written);
  if (!(*second.program == program)) die("reloaded program differs", written);
  // Only version notes may repeat: unknown fields were dropped by the first load.
  for (const std::string& w : second.warnings) {
    bool known = false;
    for (const std::string& f : first.warnings) known = known || f == w;
    if (!known) die("our own output loads with a new warning", w + "\n" + written);
  }
  const std::string rewritten = amk::program_to_json(*second.program);
  if (rewritten != written) die("output is not byte-stable", written + "\n----\n" + rewritten);

  for (const auto& [key, value] : program.meta) (void)program.meta_string(key);
  if (program.target) (void)amk::target_to_json(*program.target);
  if (program.config) (void)amk::config_to_json(*program.config);
  try {
    (void)amk::validate(program);
  } catch (const std::exception& e) {
    die("validate() threw", e.what());
  } catch (...) {
    die("validate() threw", "(not a std::exception)");
  }
  return 0;
}
