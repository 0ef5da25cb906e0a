#include "amk/torch_peer.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace amk::eval {

namespace {

namespace fs = std::filesystem;

// The default peer: the gpt-fast-style step (fused q/k/v and gate/up, SDPA over a static cache,
// torch.compile + one CUDA graph per step). bench/peers/torch_llama.py is the weak legacy one.
constexpr const char* kDefaultPeerScript = "torch_gptfast.py";

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::optional<fs::path> find_peer_script(const PeerOptions& opt) {
  if (!opt.script.empty()) return fs::path(opt.script);
  const fs::path rel = fs::path("bench") / "peers" / kDefaultPeerScript;
  std::vector<fs::path> roots;
  if (const char* src = std::getenv("AMK_SOURCE_DIR")) roots.emplace_back(src);
  roots.push_back(fs::current_path());
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path();
         dir = dir.parent_path())
      roots.push_back(dir);
  for (const fs::path& r : roots)
    if (fs::exists(r / rel)) return r / rel;
  return std::nullopt;
}

PeerResult run_peer(const PeerOptions& opt, const fs::path& model_dir, int tokens,
                    std::ostream& log) {
  PeerResult r;
  const auto script = find_peer_script(opt);
  if (!script) {
    r.error = fmt::format("bench/peers/{} not found (set AMK_SOURCE_DIR or --peer-script)",
                          kDefaultPeerScript);
    return r;
  }
  const fs::path out =
      fs::temp_directory_path() / fmt::format("amk_bench_peer_{}.json", getpid());
  const std::string cmd = fmt::format(
      "{} {} --model-dir {} --tokens {} --warmup {} --json {}", opt.python,
      shell_quote(script->string()), shell_quote(model_dir.string()), tokens,
      std::max(opt.warmup, 1), shell_quote(out.string()));
  log << "peer      " << cmd << "\n" << std::flush;
  const int status = std::system(cmd.c_str());
  const int code = status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  if (code != 0) {
    r.error = fmt::format("the peer exited with status {}", code);
    return r;
  }
  try {
    r.report = nlohmann::json::parse(read_text(out));
    r.us_per_token = r.report.at("ms_per_token").get<double>() * 1e3;
    r.ran = r.us_per_token > 0;
    if (!r.ran) r.error = "the peer reported no time";
  } catch (const std::exception& e) {
    r.error = std::string("cannot read the peer's JSON: ") + e.what();
  }
  std::error_code ignored;
  fs::remove(out, ignored);
  return r;
}

}  // namespace amk::eval
