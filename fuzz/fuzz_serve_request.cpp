// libFuzzer target for `amk serve`'s request handling (src/server/request.h, response.h): the
// JSON bodies of /v1/chat/completions and /v1/completions turned into a typed request, its
// max_tokens checked against a context, and the answers and SSE chunks built from it. The chat
// template and tokenizer that turn a typed request into ids have their own targets
// (fuzz_chat_template, fuzz_tokenizer); the HTTP layer is cpp-httplib's, which has its own
// OSS-Fuzz harness for its request parser (docs/FUZZING.md).
//
// The first byte picks the endpoint (even: chat, odd: completions); the rest is the body.
// Properties, for any bytes: parse_request() returns or throws ApiError with status 400, a
// message and, when it names a param, a non-empty one; nothing else. An accepted request keeps
// what the server relies on (chat: 1..4096 messages, each with a string role and content;
// completions: a text or ids; sampling parameters usable; at most 16 non-empty stop strings;
// max_tokens in [1, 2^31]); resolve_max_tokens() returns a count that fits the context or throws
// ApiError (400); the answer and every SSE event serialise (invalid UTF-8 replaced).
//
// Build and run: README "Benchmarks and fuzzing"; results in docs/FUZZING.md.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "amk/sampler.h"
#include "server/request.h"
#include "server/response.h"

namespace {

[[noreturn]] void die(const char* what, std::string_view input) {
  std::fprintf(stderr, "fuzz_serve_request: %s\n%.*s\n", what, static_cast<int>(std::min<size_t>(input.size(), 4000)),
               input.data());
  std::abort();
}

void check_refusal(const amk::server::ApiError& e, std::string_view input) {
  if (e.status != 400) die("a refusal that is not a 400", input);
  if (std::string_view(e.what()).empty()) die("a refusal without a message", input);
  if (e.param && e.param->empty()) die("an empty param", input);
  (void)amk::server::error_body(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace amk::server;
  if (size == 0) return 0;
  const Endpoint endpoint = (data[0] & 1) == 0 ? Endpoint::Chat : Endpoint::Completion;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  ApiRequest r;
  try {
    r = parse_request(endpoint, body);
  } catch (const ApiError& e) {
    check_refusal(e, body);
    return 0;
  } catch (const std::exception& e) {
    die(e.what(), body);
  }

  if (endpoint == Endpoint::Chat) {
    if (r.messages.empty() || r.messages.size() > kMaxMessages) die("a chat without messages, or too many", body);
    for (const auto& m : r.messages)
      if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m.at("role").is_string() ||
          !m.at("content").is_string())
        die("a message without role/content", body);
  } else if (!r.prompt_text && r.prompt_ids.empty()) {
    die("a completion without a prompt", body);
  }
  if (!amk::sampling_params_problem(r.sampling).empty()) die("unusable sampling parameters", body);
  if (r.stop.size() > kMaxStopStrings) die("too many stop strings", body);
  for (const std::string& s : r.stop)
    if (s.empty() || s.size() > kMaxStopBytes) die("an empty or long stop string", body);
  if (r.max_tokens && (*r.max_tokens < 1 || *r.max_tokens > (int64_t{1} << 31))) die("max_tokens out of range", body);
  if (r.include_usage && !r.stream) die("include_usage without stream", body);

  // The prompt's length: the ids given, else one per byte of the text or of the messages.
  int64_t prompt_tokens = static_cast<int64_t>(r.prompt_ids.size());
  if (r.prompt_text) prompt_tokens = static_cast<int64_t>(r.prompt_text->size());
  for (const auto& m : r.messages) prompt_tokens += static_cast<int64_t>(m.at("content").get_ref<const std::string&>().size());
  prompt_tokens = std::max<int64_t>(prompt_tokens, 1);
  int64_t max_tokens = 0;
  try {
    max_tokens = resolve_max_tokens(r, prompt_tokens, 4096, 512);
  } catch (const ApiError& e) {
    check_refusal(e, body);
    max_tokens = -1;
  } catch (const std::exception& e) {
    die(e.what(), body);
  }
  if (max_tokens != -1 && (max_tokens < 1 || prompt_tokens + max_tokens > 4096)) die("max_tokens past the context", body);

  // The answers, with text made of the request's own bytes (stop strings, content).
  std::string sample = r.stop.empty() ? std::string(body.substr(0, 64)) : r.stop.front();
  (void)full_response(endpoint, completion_id(endpoint), 0, r.model, sample, "stop", {prompt_tokens, 1})
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  StreamWriter writer(endpoint, "id", 0, r.model, r.include_usage);
  const std::string sse = writer.begin() + writer.text(sample) + writer.end("length", {1, 2});
  if (!sse.ends_with(kSseDone)) die("a stream that does not end in [DONE]", body);
  return 0;
}
