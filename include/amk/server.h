// `amk serve`: an OpenAI-compatible HTTP server over one model (docs/SERVER.md).
//
// Endpoints: GET /health (503 while the model loads, then 200), GET /v1/models,
// POST /v1/chat/completions, POST /v1/completions (JSON or SSE streams), GET /metrics
// (Prometheus text). Requests run one at a time at batch 1 on a single worker thread, from a
// bounded queue (503 with Retry-After when it is full); a streaming client that disconnects
// cancels its generation; SIGTERM (or SIGINT) stops accepting, cancels the running request and
// makes run_server return 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amk/decoder.h"
#include "amk/model_text.h"

namespace amk {

inline constexpr int kServeDefaultPort = 8080;
inline constexpr size_t kServeDefaultMaxQueue = 16;
inline constexpr int64_t kServeDefaultMaxTokens = 512;
inline constexpr size_t kServeMaxBodyBytes = size_t{8} << 20;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = kServeDefaultPort;  // 0: any free port (the one bound is printed)
  std::string api_key;           // empty: no check
  size_t max_queue = kServeDefaultMaxQueue;  // requests that may wait while one runs
  std::string alias;             // the model id clients see (/v1/models, "model" in answers)
  // max_tokens when a request gives none (capped at what the context leaves).
  int64_t default_max_tokens = kServeDefaultMaxTokens;
  bool log_requests = true;      // one line per request on stderr
};

// What the worker generates with; `owner` keeps alive what the pointers point into (it is
// released last).
struct ServedModel {
  std::shared_ptr<void> owner;
  const ModelText* text = nullptr;
  Decoder* decoder = nullptr;
  std::vector<int64_t> eos_ids;
  std::string device;  // "cpu", "cuda:0"
};

// Loads the model (called once, on a thread of its own, while /health answers 503); nullopt
// when it failed (it has printed why).
using ModelLoader = std::function<std::optional<ServedModel>()>;

// Binds, loads, serves until SIGTERM or SIGINT. Returns 0 after a signal, 1 when the address
// cannot be bound, 2 when the model cannot be loaded.
int run_server(const ServerOptions& options, const ModelLoader& load);

}  // namespace amk
