// OpenAI-shaped answers and SSE events (server/response.h).
#include "server/response.h"

#include <random>

namespace amk::server {

namespace {

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

const char* object_name(Endpoint e, bool chunk) {
  if (e == Endpoint::Completion) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

}  // namespace

std::string completion_id(Endpoint endpoint) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-";
  for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
  return id;
}

std::string sse_event(const nlohmann::json& payload) { return "data: " + dump(payload) + "\n\n"; }

nlohmann::json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

nlohmann::json full_response(Endpoint endpoint, const std::string& id, std::time_t created, const std::string& model,
                             const std::string& text, const std::string& finish_reason, const Usage& usage) {
  nlohmann::json choice = {{"index", 0}};
  if (endpoint == Endpoint::Chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  return {{"id", id},
          {"object", object_name(endpoint, false)},
          {"created", static_cast<int64_t>(created)},
          {"model", model},
          {"choices", nlohmann::json::array({choice})},
          {"usage", usage_json(usage)}};
}

StreamWriter::StreamWriter(Endpoint endpoint, std::string id, std::time_t created, std::string model, bool include_usage)
    : endpoint_(endpoint), id_(std::move(id)), created_(created), model_(std::move(model)), include_usage_(include_usage) {}

nlohmann::json StreamWriter::chunk(nlohmann::json choices) const {
  nlohmann::json c = {{"id", id_},
                      {"object", object_name(endpoint_, true)},
                      {"created", static_cast<int64_t>(created_)},
                      {"model", model_},
                      {"choices", std::move(choices)}};
  if (include_usage_) c["usage"] = nullptr;
  return c;
}

nlohmann::json StreamWriter::choice(nlohmann::json delta_or_text, const nlohmann::json& finish_reason) const {
  nlohmann::json c = {{"index", 0}};
  if (endpoint_ == Endpoint::Chat)
    c["delta"] = std::move(delta_or_text);
  else
    c["text"] = std::move(delta_or_text);
  c["logprobs"] = nullptr;
  c["finish_reason"] = finish_reason;
  return c;
}

std::string StreamWriter::begin() {
  if (endpoint_ != Endpoint::Chat) return "";
  return sse_event(chunk({choice({{"role", "assistant"}, {"content", ""}}, nullptr)}));
}

std::string StreamWriter::text(std::string_view piece) {
  const std::string s(piece);
  if (endpoint_ == Endpoint::Chat) return sse_event(chunk({choice({{"content", s}}, nullptr)}));
  return sse_event(chunk({choice(s, nullptr)}));
}

std::string StreamWriter::end(const std::string& finish_reason, const Usage& usage) {
  std::string out = sse_event(chunk({choice(endpoint_ == Endpoint::Chat ? nlohmann::json::object() : nlohmann::json(""),
                                            finish_reason)}));
  if (include_usage_) {
    nlohmann::json u = chunk(nlohmann::json::array());
    u["usage"] = usage_json(usage);
    out += sse_event(u);
  }
  out += kSseDone;
  return out;
}

std::string StreamWriter::error(const ApiError& e) { return sse_event(error_body(e)) + std::string(kSseDone); }

}  // namespace amk::server
