// libFuzzer target for `amk serve`'s request handling (src/server/request.h, response.h): the
// JSON bodies of /v1/chat/completions and /v1/completions turned into a typed request, then
// into prompt ids through a chat template and a tokenizer, then into answers and SSE chunks.
// The HTTP layer itself is cpp-httplib's, which has its own OSS-Fuzz harness for its request
// parser (docs/FUZZING.md).
//
// The first byte picks the endpoint (even: chat, odd: completions); the rest is the body.
// Properties, for any bytes: parse_request() returns or throws ApiError with status 400, a
// message and, when it names a param, a non-empty one; nothing else. An accepted request keeps
// what the server relies on (chat: 1..4096 messages, each with a string role and content;
// completions: a text or ids; sampling parameters usable; at most 16 non-empty stop strings;
// max_tokens in [1, 2^31]); prompt_ids() and resolve_max_tokens() return or throw ApiError (400);
// the ids are inside the vocabulary; the answer and every SSE event serialise (invalid UTF-8
// replaced).
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

#include "amk/model_text.h"
#include "amk/sampler.h"
#include "server/request.h"
#include "server/response.h"

namespace {

[[noreturn]] void die(const char* what, std::string_view input) {
  std::fprintf(stderr, "fuzz_serve_request: %s\n%.*s\n", what, static_cast<int>(std::min<size_t>(input.size(), 4000)),
               input.data());
  std::abort();
}

// A byte-level tokenizer (id b is byte b, 256 is "<|im_end|>", 257 "<|im_start|>") and a
// ChatML template like SmolLM2's.
const amk::ModelText& model_text() {
  static const amk::ModelText text = [] {
    nlohmann::json vocab = nlohmann::json::object();
    // The GPT-2 byte-to-unicode map: printable bytes stand for themselves, the rest map to 256+.
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + extra++);
      std::string s;
      if (cp < 0x80) {
        s += char(cp);
      } else {
        s += char(0xC0 | (cp >> 6));
        s += char(0x80 | (cp & 0x3F));
      }
      vocab[s] = b;
    }
    const auto added = [](int id, const char* content) {
      return nlohmann::json{{"id", id}, {"content", content}, {"special", true}, {"lstrip", false},
                            {"rstrip", false}, {"single_word", false}, {"normalized", false}};
    };
    const nlohmann::json doc = {
        {"added_tokens", {added(256, "<|im_end|>"), added(257, "<|im_start|>")}},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}};
    amk::ModelText t{amk::Tokenizer::from_hf_json(doc.dump()), std::nullopt, std::nullopt, std::nullopt, {256}, "fuzz"};
    t.chat_template =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful AI assistant.<|im_end|>\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
    t.bos_token = "<|im_start|>";
    t.eos_token = "<|im_end|>";
    return t;
  }();
  return text;
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

  const amk::ModelText& text = model_text();
  std::vector<int64_t> ids;
  int64_t max_tokens = 0;
  try {
    ids = prompt_ids(r, text, 258);
    max_tokens = resolve_max_tokens(r, static_cast<int64_t>(ids.size()), 4096, 512);
  } catch (const ApiError& e) {
    check_refusal(e, body);
    return 0;
  } catch (const std::exception& e) {
    die(e.what(), body);
  }
  if (ids.empty()) die("no prompt ids", body);
  for (int64_t id : ids)
    if (id < 0 || id >= 258) die("an id outside the vocabulary", body);
  if (max_tokens < 1 || static_cast<int64_t>(ids.size()) + max_tokens > 4096) die("max_tokens past the context", body);

  // The answers, with text made of the request's own bytes (stop strings, content).
  std::string sample = r.stop.empty() ? std::string(body.substr(0, 64)) : r.stop.front();
  (void)full_response(endpoint, completion_id(endpoint), 0, r.model, sample, "stop", {int64_t(ids.size()), 1})
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  StreamWriter writer(endpoint, "id", 0, r.model, r.include_usage);
  const std::string sse = writer.begin() + writer.text(sample) + writer.end("length", {1, 2});
  if (!sse.ends_with(kSseDone)) die("a stream that does not end in [DONE]", body);
  return 0;
}
