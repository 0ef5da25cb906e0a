// `amk serve`'s parts without HTTP: request bodies to typed requests (every refusal names its
// field), the answers and SSE chunks in OpenAI's shapes with stop strings held back, the
// Prometheus text, and the queue and worker over a scripted decoder. Then the whole server on
// the real SmolLM2 GGUF, driven by tests/serve_test.py with the `openai` client and curl (needs
// AMK_PYTHON and AMK_ASSETS_DIR; skips naming what is unset).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "amk/generator.h"
#include "server/engine.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/response.h"
#include "support/amk_command.h"
#include "support/byte_tokenizer.h"

namespace {

using namespace amk;
using namespace amk::server;
namespace fs = std::filesystem;

// ---- request parsing ------------------------------------------------------------------------

ApiError refusal(Endpoint e, const std::string& body) {
  try {
    parse_request(e, body);
  } catch (const ApiError& err) {
    return err;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "");
}

TEST(ServeRequest, ChatWithDefaults) {
  const ApiRequest r = parse_request(Endpoint::Chat, R"({"model":"x","messages":[{"role":"user","content":"Hi"}]})");
  EXPECT_EQ(r.model, "x");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0]["role"], "user");
  EXPECT_EQ(r.messages[0]["content"], "Hi");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.sampling.temperature, 1.0);
  EXPECT_EQ(r.sampling.top_p, 1.0);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.sampling.min_p, 0.0);
  EXPECT_FALSE(r.seed_given);
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.stop.empty());
}

TEST(ServeRequest, ChatWithEverythingWeImplement) {
  const ApiRequest r = parse_request(Endpoint::Chat, R"({
    "messages":[{"role":"system","content":[{"type":"text","text":"A"},{"type":"text","text":"B"}]},
                {"role":"user","content":"Hi","name":"bob"},{"role":"assistant","content":null}],
    "max_tokens": 10, "max_completion_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 3, "min_p": 0.1,
    "seed": -1, "stop": ["x", "", "yy"], "stream": true, "stream_options": {"include_usage": true},
    "n": 1, "logprobs": false, "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {},
    "tools": [], "tool_choice": "none", "response_format": {"type": "text"}, "user": "u", "whatever": [1, 2]})");
  EXPECT_EQ(r.messages[0]["content"], "A\nB");  // text parts joined with newlines
  EXPECT_EQ(r.messages[1]["name"], "bob");       // other keys go to the template
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_EQ(r.max_tokens, 7);                    // max_completion_tokens wins
  EXPECT_EQ(r.sampling.temperature, 0.0);
  EXPECT_EQ(r.sampling.top_p, 0.5);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_EQ(r.sampling.min_p, 0.1);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampling.seed, ~uint64_t{0});
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "yy"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(ServeRequest, CompletionPrompts) {
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt":"Once"})").prompt_text, "Once");
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt":["Once"]})").prompt_text, "Once");
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt":[1,2,3]})").prompt_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt":[[4,5]], "stop": "."})").prompt_ids,
            (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt":"a","stop":"."})").stop, std::vector<std::string>{"."});
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt":"a","max_tokens":16.0})").max_tokens, 16);
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt":"a","logprobs":0,"echo":false,"best_of":1})").prompt_text, "a");
}

TEST(ServeRequest, RefusalsNameTheField) {
  const struct {
    Endpoint endpoint;
    const char* body;
    const char* param;  // nullptr: no param
  } cases[] = {
      {Endpoint::Chat, "{", nullptr},
      {Endpoint::Chat, "[]", nullptr},
      {Endpoint::Chat, R"({"a":1,"a":2})", nullptr},  // duplicate keys
      {Endpoint::Chat, R"({})", "messages"},
      {Endpoint::Chat, R"({"messages":[]})", "messages"},
      {Endpoint::Chat, R"({"messages":"hi"})", "messages"},
      {Endpoint::Chat, R"({"messages":[1]})", "messages[0]"},
      {Endpoint::Chat, R"({"messages":[{"content":"x"}]})", "messages[0].role"},
      {Endpoint::Chat, R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
       "messages[0].content[0].type"},
      {Endpoint::Chat, R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{}]}]})", "messages[0].tool_calls"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"n":2})", "n"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"n":0})", "n"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"logprobs":true})", "logprobs"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", "top_logprobs"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})", "tools"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required"})", "tool_choice"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}})",
       "response_format"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"1":5}})", "logit_bias"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"presence_penalty":0.5})", "presence_penalty"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"frequency_penalty":-1})", "frequency_penalty"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"temperature":-1})", "temperature"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", "temperature"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"top_p":0})", "top_p"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"top_k":-2})", "top_k"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"min_p":2})", "min_p"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"seed":1.5})", "seed"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":-5})",
       "max_completion_tokens"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})", "stop"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"stop":{}})", "stop"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})", "stream"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})",
       "stream_options"},
      {Endpoint::Chat, R"({"messages":[{"role":"user","content":"x"}],"model":7})", "model"},
      {Endpoint::Completion, R"({})", "prompt"},
      {Endpoint::Completion, R"({"prompt":[]})", "prompt"},
      {Endpoint::Completion, R"({"prompt":["a","b"]})", "prompt"},
      {Endpoint::Completion, R"({"prompt":[1,-2]})", "prompt"},
      {Endpoint::Completion, R"({"prompt":[1,"a"]})", "prompt"},
      {Endpoint::Completion, R"({"prompt":"a","echo":true})", "echo"},
      {Endpoint::Completion, R"({"prompt":"a","best_of":3})", "best_of"},
      {Endpoint::Completion, R"({"prompt":"a","logprobs":5})", "logprobs"},
      {Endpoint::Completion, R"({"prompt":"a","suffix":"z"})", "suffix"},
  };
  for (const auto& c : cases) {
    const ApiError e = refusal(c.endpoint, c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    if (c.param == nullptr) {
      EXPECT_FALSE(e.param.has_value()) << c.body << " -> " << *e.param;
    } else {
      EXPECT_EQ(e.param.value_or("(none)"), c.param) << c.body << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(c.param), std::string::npos) << "the message names the field: " << e.what();
    }
  }
}

TEST(ServeRequest, DeepOrHugeBodiesAreRefusedNotCrashed) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(refusal(Endpoint::Chat, deep).status, 400);
  const std::string stops = R"({"prompt":"a","stop":[)" + std::string("\"a\",") + std::string(R"("b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})");
  EXPECT_EQ(refusal(Endpoint::Completion, stops).param, "stop");
}

TEST(ServeRequest, ErrorBodyIsOpenAiShaped) {
  const nlohmann::json j = error_body(ApiError(400, "bad n", "invalid_request_error", "n", "unsupported_parameter"));
  EXPECT_EQ(j, nlohmann::json::parse(
                   R"({"error":{"message":"bad n","type":"invalid_request_error","param":"n","code":"unsupported_parameter"}})"));
  const nlohmann::json k = error_body(ApiError(503, "full", "server_error"));
  EXPECT_TRUE(k["error"]["param"].is_null());
  EXPECT_TRUE(k["error"]["code"].is_null());
}

TEST(ServeRequest, MaxTokensAgainstTheContext) {
  ApiRequest r;
  EXPECT_EQ(resolve_max_tokens(r, 10, 100, 512), 90);  // the default, capped
  EXPECT_EQ(resolve_max_tokens(r, 10, 1000, 512), 512);
  r.max_tokens = 90;
  EXPECT_EQ(resolve_max_tokens(r, 10, 100, 512), 90);
  r.max_tokens = 91;
  try {
    resolve_max_tokens(r, 10, 100, 512);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "context_length_exceeded");
    EXPECT_NE(std::string(e.what()).find("101 tokens"), std::string::npos) << e.what();
  }
  r.max_tokens.reset();
  EXPECT_THROW(resolve_max_tokens(r, 100, 100, 512), ApiError);
}

// ---- the byte-level tokenizer (support/byte_tokenizer.h) and scripted decoders --------------

constexpr int64_t kEos = amk::testing::kByteEos;
using amk::testing::byte_tokenizer;
using amk::testing::bytes_of;

// After the prompt, says `reply` byte by byte, then eos; `gate` (when given) must be open for a
// step to run.
class SayingDecoder final : public Decoder {
 public:
  SayingDecoder(std::string reply, size_t prompt_length, std::atomic<bool>* gate = nullptr)
      : reply_(std::move(reply)), prompt_length_(prompt_length), gate_(gate) {}
  int64_t position() const override { return position_; }
  int64_t max_context() const override { return 1024; }
  int64_t vocab_size() const override { return kEos + 1; }
  std::vector<float> step(int64_t) override {
    while (gate_ != nullptr && !gate_->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::vector<float> logits(size_t(kEos + 1), 0.0f);
    const int64_t i = position_ + 1 - int64_t(prompt_length_);
    logits[size_t(i < 0 || i >= int64_t(reply_.size()) ? kEos : static_cast<unsigned char>(reply_[size_t(i)]))] = 20.0f;
    ++position_;
    return logits;
  }
  int64_t last_next_token() const override { return -1; }
  void reset() override { position_ = 0; }
  void seek(int64_t, uint64_t) override {}

 private:
  std::string reply_;
  size_t prompt_length_;
  std::atomic<bool>* gate_;
  int64_t position_ = 0;
};

GenerationOptions greedy(int64_t n, std::vector<std::string> stops = {}) {
  GenerationOptions o;
  o.max_new_tokens = n;
  o.sampling.temperature = 0;
  o.stop_strings = std::move(stops);
  o.eos_ids = {kEos};
  return o;
}

// The JSON payloads of an SSE text ("data: ...\n\n" events; [DONE] as the string "[DONE]").
std::vector<nlohmann::json> sse_payloads(const std::string& text) {
  std::vector<nlohmann::json> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "an unterminated event: " << text.substr(at);
    if (end == std::string::npos) break;
    const std::string event = text.substr(at, end - at);
    EXPECT_TRUE(event.starts_with("data: ")) << event;
    const std::string data = event.substr(6);
    out.push_back(data == "[DONE]" ? nlohmann::json("[DONE]") : nlohmann::json::parse(data));
    at = end + 2;
  }
  return out;
}

// ---- answers and SSE ------------------------------------------------------------------------

TEST(ServeStream, ChatChunksHoldBackStopStringsAndEndWithUsage) {
  // "Hello EN" could start the stop string "END" until " " shows it does not; "END" then stops.
  const std::string reply = "Hello EN world ENDING";
  const std::vector<int64_t> prompt = bytes_of("Q:");
  SayingDecoder decoder(reply, prompt.size());
  Generator generator(decoder, byte_tokenizer());
  StreamWriter writer(Endpoint::Chat, "chatcmpl-1", 123, "m", /*include_usage=*/true);
  std::string sse = writer.begin();
  std::vector<std::string> deltas;
  const GenerationResult r = generator.generate(prompt, greedy(100, {"END"}), [&](std::string_view piece) {
    deltas.emplace_back(piece);
    sse += writer.text(piece);
  });
  sse += writer.end("stop", Usage{int64_t(prompt.size()), int64_t(r.ids.size())});
  EXPECT_EQ(r.text, "Hello EN world ");
  EXPECT_EQ(r.finish, FinishReason::Stop);
  for (const std::string& d : deltas) EXPECT_EQ(d.find("END"), std::string::npos) << d;
  const auto events = sse_payloads(sse);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  // First: the role; then content deltas; then finish_reason; then usage with no choices.
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(events[0]["choices"][0]["finish_reason"].is_null());
  std::string content;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const nlohmann::json& e = events[i];
    EXPECT_EQ(e["id"], "chatcmpl-1");
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    EXPECT_EQ(e["model"], "m");
    EXPECT_TRUE(e.contains("usage"));
    if (!e["choices"].empty()) content += e["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(content, "Hello EN world ");
  const nlohmann::json& last_choice = events[events.size() - 3];
  EXPECT_EQ(last_choice["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last_choice["choices"][0]["delta"], nlohmann::json::object());
  const nlohmann::json& usage = events[events.size() - 2];
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(usage["usage"]["completion_tokens"], int64_t(r.ids.size()));
  EXPECT_EQ(usage["usage"]["total_tokens"], 2 + int64_t(r.ids.size()));
}

TEST(ServeStream, CompletionChunksWithoutUsage) {
  StreamWriter writer(Endpoint::Completion, "cmpl-1", 5, "m", false);
  EXPECT_EQ(writer.begin(), "");
  const auto events = sse_payloads(writer.text("ab") + writer.end("length", {3, 4}));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["object"], "text_completion");
  EXPECT_EQ(events[0]["choices"][0]["text"], "ab");
  EXPECT_FALSE(events[0].contains("usage"));
  EXPECT_EQ(events[1]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events[2], "[DONE]");
}

TEST(ServeStream, FullAnswersAndInvalidUtf8) {
  const nlohmann::json chat = full_response(Endpoint::Chat, "chatcmpl-x", 7, "m", "Hi", "stop", {5, 2});
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"], nlohmann::json::parse(R"({"role":"assistant","content":"Hi"})"));
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(chat["usage"], nlohmann::json::parse(R"({"prompt_tokens":5,"completion_tokens":2,"total_tokens":7})"));
  const nlohmann::json text = full_response(Endpoint::Completion, "cmpl-x", 7, "m", "Hi", "length", {1, 1});
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "Hi");
  // An SSE event never breaks on bad bytes: they become U+FFFD.
  const std::string event = sse_event({{"x", std::string("a\xff")}});
  EXPECT_EQ(event, "data: {\"x\":\"a\xef\xbf\xbd\"}\n\n");
  EXPECT_TRUE(completion_id(Endpoint::Chat).starts_with("chatcmpl-"));
  EXPECT_EQ(completion_id(Endpoint::Completion).size(), 5u + 24u);
}

// ---- metrics --------------------------------------------------------------------------------

TEST(ServeMetrics, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1});
  h.observe(0.05);
  h.observe(0.1);  // on a bound: that bucket (le)
  h.observe(0.5);
  h.observe(7);
  EXPECT_EQ(h.render("t", "a=\"b\""),
            "t_bucket{a=\"b\",le=\"0.1\"} 2\n"
            "t_bucket{a=\"b\",le=\"1\"} 3\n"
            "t_bucket{a=\"b\",le=\"+Inf\"} 4\n"
            "t_sum{a=\"b\"} 7.65\n"
            "t_count{a=\"b\"} 4\n");
  EXPECT_THROW(Histogram({1, 0.5}), std::invalid_argument);
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(format_metric_value(3), "3");
  EXPECT_EQ(format_metric_value(0.25), "0.25");
}

TEST(ServeMetrics, TheExpositionHasEveryFamily) {
  Metrics m;
  m.count_request("chat", "ok");
  m.count_request("chat", "ok");
  m.count_request("completions", "bad_request");
  m.add_tokens(37, 8);
  m.observe_time_to_first_token(0.3);
  m.observe_inter_token(0.02);
  m.set_queue_depth(3);
  const std::string text = m.render();
  for (const char* line : {"# TYPE amk_requests_total counter\n", "amk_requests_total{endpoint=\"chat\",outcome=\"ok\"} 2\n",
                           "amk_requests_total{endpoint=\"completions\",outcome=\"bad_request\"} 1\n",
                           "amk_prompt_tokens_total 37\n", "amk_generated_tokens_total 8\n",
                           "# TYPE amk_time_to_first_token_seconds histogram\n",
                           "amk_time_to_first_token_seconds_bucket{le=\"0.5\"} 1\n",
                           "amk_inter_token_latency_seconds_count 1\n", "# TYPE amk_queue_depth gauge\n",
                           "amk_queue_depth 3\n", "amk_model_ready 0\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin\n" << text;
  EXPECT_EQ(m.requests("chat", "ok"), 2u);
}

// ---- the queue and the worker ---------------------------------------------------------------

TEST(ServeEngine, RunsOneAtATimeRefusesPastTheQueueAndCancels) {
  std::atomic<bool> gate{false};
  const std::vector<int64_t> prompt = bytes_of("Q:");
  SayingDecoder decoder("abcdef", prompt.size(), &gate);
  Generator generator(decoder, byte_tokenizer());
  Metrics metrics;
  Engine engine(generator, metrics, /*max_queue=*/1);
  auto a = std::make_shared<Job>(Endpoint::Chat, prompt, greedy(100));
  auto b = std::make_shared<Job>(Endpoint::Completion, prompt, greedy(3));
  auto c = std::make_shared<Job>(Endpoint::Chat, prompt, greedy(100));
  ASSERT_TRUE(engine.submit(a));
  // a is taken by the worker (blocked at the gate), b waits, c finds the queue full.
  for (int i = 0; i < 2000 && engine.waiting() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(engine.submit(b));
  EXPECT_FALSE(engine.submit(c));
  EXPECT_NE(metrics.render().find("amk_queue_depth 1\n"), std::string::npos);
  a->cancel.store(true);
  gate.store(true);
  const Job::Event ea = a->wait_end();
  ASSERT_TRUE(ea.result.has_value());
  EXPECT_EQ(ea.result->finish, FinishReason::Interrupted);
  const Job::Event eb = b->wait_end();
  ASSERT_TRUE(eb.result.has_value());
  EXPECT_EQ(eb.result->text, "abc");
  EXPECT_EQ(eb.result->finish, FinishReason::Length);
  // The streamed pieces of b add up to its text.
  std::string streamed;
  Job::Event e;
  while (b->wait(e, std::chrono::milliseconds(0)) && e.text) streamed += *e.text;
  EXPECT_EQ(streamed, "abc");
  engine.stop();
  EXPECT_EQ(metrics.requests("chat", "cancelled"), 1u);
  EXPECT_EQ(metrics.requests("completions", "ok"), 1u);
  EXPECT_FALSE(engine.submit(c));  // stopped
}

TEST(ServeEngine, StopFailsWaitingJobsWith503) {
  std::atomic<bool> gate{false};
  const std::vector<int64_t> prompt = bytes_of("Q:");
  SayingDecoder decoder("abcdef", prompt.size(), &gate);
  Generator generator(decoder, byte_tokenizer());
  Metrics metrics;
  Engine engine(generator, metrics, 4);
  auto a = std::make_shared<Job>(Endpoint::Chat, prompt, greedy(100));
  auto b = std::make_shared<Job>(Endpoint::Chat, prompt, greedy(100));
  ASSERT_TRUE(engine.submit(a));
  for (int i = 0; i < 2000 && engine.waiting() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(engine.submit(b));
  std::thread stopper([&] { engine.stop(); });
  const Job::Event eb = b->wait_end();
  ASSERT_TRUE(eb.error.has_value());
  EXPECT_EQ(eb.error->status, 503);
  gate.store(true);
  stopper.join();
  const Job::Event ea = a->wait_end();
  ASSERT_TRUE(ea.error.has_value());  // cancelled by the stop
  EXPECT_EQ(ea.error->status, 503);
}

// ---- the server on SmolLM2, driven by the openai client and curl ----------------------------

TEST(ServeSmolLM2, OpenAiClientCurlMetricsDisconnectAndSigterm) {
  const char* python = std::getenv("AMK_PYTHON");
  const char* assets = std::getenv("AMK_ASSETS_DIR");
  if (python == nullptr || *python == 0)
    GTEST_SKIP() << "AMK_PYTHON is not set (scripts/test.sh sets it to scripts/pyenv.sh's python, with openai and "
                    "prometheus_client)";
  if (assets == nullptr || *assets == 0)
    GTEST_SKIP() << "AMK_ASSETS_DIR is not set (scripts/fetch_assets.sh fetches SmolLM2)";
  const fs::path model = fs::path(assets) / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  ASSERT_TRUE(fs::exists(model)) << model << " is missing: run scripts/fetch_assets.sh";
  using amk::testing::shell_quote;
  const std::string cmd = "timeout 600 " + shell_quote(python) + " " +
                          shell_quote(std::string(AMK_SOURCE_DIR) + "/tests/serve_test.py") + " --amk " +
                          shell_quote(AMK_BINARY) + " --model " + shell_quote(model.string()) + " 2>&1";
  std::string output;
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("serve_test: all checks passed"), std::string::npos) << output;
}

}  // namespace
