// The PyTorch peer of `amk bench --peer`: a gpt-fast-style step (bench/peers/torch_gptfast.py)
// timed on the same checkpoint, so AMK's µs/token stands beside a strong baseline.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>

namespace amk::eval {

struct PeerOptions {
  std::string script;  // "" : bench/peers/torch_gptfast.py, found in the repo
  std::string python = "python3";
  int warmup = 32;
};

struct PeerResult {
  bool ran = false;
  double us_per_token = 0;
  std::string error;
  nlohmann::json report;  // the script's JSON
};

// The script named by options.script, else bench/peers/torch_gptfast.py under $AMK_SOURCE_DIR,
// the current directory, or the source tree above this binary (build dirs sit in the repo root).
std::optional<std::filesystem::path> find_peer_script(const PeerOptions& options);

// Runs the peer on `model_dir` (an HF folder) for `tokens` tokens; the command line is printed
// to `log` first. Never throws: a failure is in PeerResult::error.
PeerResult run_peer(const PeerOptions& options, const std::filesystem::path& model_dir,
                    int tokens, std::ostream& log);

}  // namespace amk::eval
