// run_server (amk/server.h): cpp-httplib's server (its own HTTP parsing, thread pool and chunked
// transfer) wired to the request parser, the engine and the metrics. Handlers run on httplib's
// threads and never generate: they check a request, queue a job and wait for it (or stream it).
#include <httplib.h>
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <iostream>
#include <memory>
#include <random>
#include <thread>

#include "amk/server.h"
#include "server/engine.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/response.h"

namespace amk {

namespace {

using namespace server;
using nlohmann::json;

enum class State { Loading, Ready, Failed, Stopping };

struct ServerState {
  explicit ServerState(const ServerOptions& o) : options(o), model_id(o.alias) {}
  const ServerOptions& options;
  std::string model_id;
  std::time_t started = std::time(nullptr);
  std::atomic<State> state{State::Loading};
  Metrics metrics;
  // Set by the loader before state becomes Ready; read by handlers after they see Ready.
  std::optional<ServedModel> model;
  std::unique_ptr<Generator> generator;
  std::unique_ptr<Engine> engine;
  int64_t context = 0;
};

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.status, error_body(e));
  if (e.status == 503) res.set_header("Retry-After", "1");
}

const char* outcome_of(int status) {
  switch (status) {
    case 400: return "bad_request";
    case 401: return "unauthorized";
    case 503: return "rejected";
    default: return status >= 500 ? "error" : "bad_request";
  }
}

// Constant-time comparison of the bearer key.
bool key_matches(const std::string& given, const std::string& expected) {
  if (given.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ expected[i]);
  return diff == 0;
}

void check_key(const ServerState& s, const httplib::Request& req) {
  if (s.options.api_key.empty()) return;
  const std::string auth = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (auth.size() <= prefix.size() || auth.compare(0, prefix.size(), prefix) != 0 ||
      !key_matches(auth.substr(prefix.size()), s.options.api_key))
    throw ApiError(401, auth.empty() ? "no API key: send 'Authorization: Bearer KEY'" : "incorrect API key",
                   "authentication_error", std::nullopt, "invalid_api_key");
}

void check_ready(const ServerState& s) {
  switch (s.state.load()) {
    case State::Ready: return;
    case State::Loading: throw ApiError(503, "the model is loading", "server_error", std::nullopt, "loading");
    default: throw ApiError(503, "the server is shutting down", "server_error", std::nullopt, "shutting_down");
  }
}

uint64_t random_seed() {
  static std::mutex mutex;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard lock(mutex);
  return rng();
}

std::string finish_reason(const GenerationResult& r) { return r.finish == FinishReason::Stop ? "stop" : "length"; }

void handle_completion(ServerState& s, Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  const char* name = endpoint_name(endpoint);
  try {
    check_key(s, req);
    check_ready(s);
    ApiRequest request = parse_request(endpoint, req.body);
    const ModelText& text = *s.model->text;
    std::vector<int64_t> prompt = prompt_ids(request, text, s.model->decoder->vocab_size());
    GenerationOptions options;
    options.max_new_tokens = resolve_max_tokens(request, static_cast<int64_t>(prompt.size()), s.context,
                                                s.options.default_max_tokens);
    options.sampling = request.sampling;
    if (!request.seed_given) options.sampling.seed = random_seed();
    options.stop_strings = request.stop;
    options.eos_ids = s.model->eos_ids;
    const int64_t prompt_tokens = static_cast<int64_t>(prompt.size());
    auto job = std::make_shared<Job>(endpoint, std::move(prompt), std::move(options));
    if (!s.engine->submit(job))
      throw ApiError(503,
                     s.state.load() == State::Ready
                         ? fmt::format("the queue is full ({} requests wait): retry later", s.options.max_queue)
                         : "the server is shutting down",
                     "server_error", std::nullopt, "queue_full");
    const std::string id = completion_id(endpoint);
    const std::time_t created = std::time(nullptr);
    if (!request.stream) {
      const Job::Event end = job->wait_end();
      if (end.error) throw *end.error;
      const GenerationResult& r = *end.result;
      send_json(res, 200, full_response(endpoint, id, created, s.model_id, r.text, finish_reason(r),
                                        Usage{prompt_tokens, static_cast<int64_t>(r.ids.size())}));
      return;
    }
    auto writer = std::make_shared<StreamWriter>(endpoint, id, created, s.model_id, request.include_usage);
    auto begun = std::make_shared<bool>(false);
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, writer, begun, prompt_tokens](size_t, httplib::DataSink& sink) {
          const auto write = [&](const std::string& data) {
            if (data.empty() || sink.write(data.data(), data.size())) return true;
            job->cancel.store(true);  // the client went away: stop generating for it
            return false;
          };
          if (!*begun) {
            *begun = true;
            if (!write(writer->begin())) return false;
          }
          Job::Event event;
          if (!job->wait(event, std::chrono::milliseconds(2000)))
            return write(": waiting\n\n");  // an SSE comment: finds a client gone while queued
          if (event.text) return write(writer->text(*event.text));
          if (event.error) {
            if (event.error->status == 499) return false;
            write(writer->error(*event.error));
          } else {
            const GenerationResult& r = *event.result;
            if (r.finish == FinishReason::Interrupted) return false;
            if (!write(writer->end(finish_reason(r), Usage{prompt_tokens, static_cast<int64_t>(r.ids.size())})))
              return false;
          }
          sink.done();
          return true;
        },
        [job](bool success) {
          if (!success) job->cancel.store(true);
        });
  } catch (const ApiError& e) {
    s.metrics.count_request(name, outcome_of(e.status));
    send_error(res, e);
  }
}

void install_routes(httplib::Server& svr, ServerState& s) {
  svr.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
    switch (s.state.load()) {
      case State::Ready: send_json(res, 200, {{"status", "ok"}}); break;
      case State::Loading: send_json(res, 503, {{"status", "loading"}}); break;
      default: send_json(res, 503, {{"status", "stopping"}}); break;
    }
  });
  svr.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(s.metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  const auto models = [&s](const httplib::Request& req, httplib::Response& res) {
    try {
      check_key(s, req);
      json model = {{"id", s.model_id}, {"object", "model"}, {"created", static_cast<int64_t>(s.started)}, {"owned_by", "amk"}};
      if (s.state.load() == State::Ready) model["context_length"] = s.context;
      if (req.matches.size() > 1) {
        if (req.matches[1] != s.model_id)
          throw ApiError(404, fmt::format("no model '{}': this server serves '{}'", std::string(req.matches[1]), s.model_id),
                         "invalid_request_error", "model", "model_not_found");
        send_json(res, 200, model);
      } else {
        send_json(res, 200, {{"object", "list"}, {"data", json::array({model})}});
      }
      s.metrics.count_request("models", "ok");
    } catch (const ApiError& e) {
      s.metrics.count_request("models", outcome_of(e.status));
      send_error(res, e);
    }
  };
  svr.Get("/v1/models", models);
  svr.Get(R"(/v1/models/(.+))", models);
  svr.Post("/v1/chat/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    handle_completion(s, Endpoint::Chat, req, res);
  });
  svr.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    handle_completion(s, Endpoint::Completion, req, res);
  });
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler's own error body
    const std::string message = res.status == 404   ? fmt::format("no route {} {}", req.method, req.path)
                                : res.status == 413 ? fmt::format("the body is larger than {} bytes", kServeMaxBodyBytes)
                                                    : fmt::format("HTTP status {}", res.status);
    send_json(res, res.status, error_body(ApiError(res.status, message, "invalid_request_error", std::nullopt,
                                                   res.status == 404 ? std::optional<std::string>("not_found")
                                                                     : std::nullopt)));
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    std::cerr << "amk serve: internal error: " << what << "\n";
    send_json(res, 500, error_body(ApiError(500, "internal error: " + what, "server_error")));
  });
  if (s.options.log_requests)
    svr.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      std::cerr << fmt::format("amk serve: {} {} {}\n", req.method, req.path, res.status);
    });
}

}  // namespace

int run_server(const ServerOptions& options, const ModelLoader& load) {
  // Signals: SIGPIPE ignored (a client that closes mid-write is a write error, not a death);
  // SIGTERM and SIGINT blocked in every thread and taken by sigtimedwait below.
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  ServerState s(options);
  httplib::Server svr;
  // Enough threads for every queued request, the running one, and health/metrics/keep-alive.
  const size_t threads = std::max<size_t>(32, options.max_queue + 16);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_payload_max_length(kServeMaxBodyBytes);
  svr.set_keep_alive_timeout(5);
  svr.set_read_timeout(30);
  svr.set_write_timeout(30);
  install_routes(svr, s);

  int port = options.port;
  if (port == 0) {
    port = svr.bind_to_any_port(options.host);
    if (port < 0) port = 0;
  } else if (!svr.bind_to_port(options.host, port)) {
    port = 0;
  }
  if (port == 0) {
    std::cerr << fmt::format("amk serve: cannot listen on {}:{} (in use, or not an address of this machine)\n",
                             options.host, options.port);
    return 1;
  }
  std::cerr << fmt::format("amk serve: listening on http://{}:{} (model '{}', loading)\n", options.host, port, s.model_id)
            << std::flush;
  std::thread listener([&svr] { svr.listen_after_bind(); });
  // stop() before listening has begun would be lost: wait until it has.
  for (int i = 0; i < 5000 && !svr.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  std::thread loader([&s, &load] {
    std::optional<ServedModel> model;
    try {
      model = load();
    } catch (const std::exception& e) {
      std::cerr << "amk serve: cannot load the model: " << e.what() << "\n";
    }
    if (!model) {
      s.state.store(State::Failed);
      return;
    }
    s.model = std::move(model);
    s.context = s.model->decoder->max_context();
    s.generator = std::make_unique<Generator>(*s.model->decoder, s.model->text->tokenizer);
    s.engine = std::make_unique<Engine>(*s.generator, s.metrics, s.options.max_queue);
    State expected = State::Loading;
    if (s.state.compare_exchange_strong(expected, State::Ready)) {
      s.metrics.set_ready(true);
      std::cerr << fmt::format("amk serve: ready ({} on {}, context {} tokens)\n", s.model_id, s.model->device, s.context)
                << std::flush;
    }
  });

  // Wait for a stop signal (or a failed load).
  int exit_code = 0;
  for (;;) {
    timespec timeout{0, 200'000'000};
    const int sig = sigtimedwait(&stop_signals, nullptr, &timeout);
    if (sig == SIGTERM || sig == SIGINT) {
      std::cerr << fmt::format("amk serve: {}: stopping\n", sig == SIGTERM ? "SIGTERM" : "SIGINT") << std::flush;
      break;
    }
    if (s.state.load() == State::Failed) {
      exit_code = 2;
      break;
    }
  }
  loader.join();  // a load in progress finishes first
  if (s.state.load() != State::Failed) s.state.store(State::Stopping);
  if (s.engine) s.engine->stop();  // cancels the running request, fails the queued ones
  svr.stop();
  listener.join();  // every handler has returned
  s.engine.reset();
  s.generator.reset();
  s.model.reset();
  std::cerr << "amk serve: stopped\n";
  return exit_code;
}

}  // namespace amk
