// The answers of /v1/chat/completions and /v1/completions in OpenAI's shapes: one JSON object,
// or a stream of server-sent events (`data: {chunk}\n\n` ... `data: [DONE]\n\n`) where the first
// chat chunk carries the role, the text follows in deltas, the last choice chunk carries
// finish_reason, and with stream_options.include_usage every chunk has "usage": null and one
// more chunk (no choices) carries the usage.
//
// The text a stream writer is given is already final: the Generator's TextStream holds back
// incomplete UTF-8 characters and anything that may be the start of a stop string, and cuts the
// text before a stop string, so no delta is ever taken back.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/request.h"

namespace amk::server {

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// "chatcmpl-..." / "cmpl-..." with 24 random hex digits.
std::string completion_id(Endpoint endpoint);

// One SSE event: "data: " + the compact JSON + "\n\n". Invalid UTF-8 is replaced (U+FFFD).
std::string sse_event(const nlohmann::json& payload);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// The whole (non-streaming) answer.
nlohmann::json full_response(Endpoint endpoint, const std::string& id, std::time_t created, const std::string& model,
                             const std::string& text, const std::string& finish_reason, const Usage& usage);

// The events of one streamed answer, in order: begin(), text()..., end().
class StreamWriter {
 public:
  StreamWriter(Endpoint endpoint, std::string id, std::time_t created, std::string model, bool include_usage);
  // The chat answer's first chunk (role "assistant", empty content); "" for completions.
  std::string begin();
  // A delta with `piece` ("" for an empty piece).
  std::string text(std::string_view piece);
  // The last choice chunk with finish_reason, the usage chunk when asked for, and [DONE].
  std::string end(const std::string& finish_reason, const Usage& usage);
  // An error in the middle of a stream ({"error": ...}), then [DONE].
  std::string error(const ApiError& e);

 private:
  nlohmann::json chunk(nlohmann::json choices) const;
  nlohmann::json choice(nlohmann::json delta_or_text, const nlohmann::json& finish_reason) const;

  Endpoint endpoint_;
  std::string id_;
  std::time_t created_;
  std::string model_;
  bool include_usage_;
};

nlohmann::json usage_json(const Usage& usage);

}  // namespace amk::server
