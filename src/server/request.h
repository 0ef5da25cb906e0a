// The JSON bodies of POST /v1/chat/completions and /v1/completions turned into a typed request,
// and the typed request turned into prompt ids and generation options. Everything a client
// sends is untrusted: any problem is an ApiError (an OpenAI-style error with an HTTP status)
// naming the field, never a crash. Unknown fields are ignored; fields that would change the
// answer and that amk does not implement (n > 1, logprobs, tools, response_format, logit_bias,
// penalties, ...) are refused by name.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "amk/generator.h"
#include "amk/model_text.h"
#include "amk/sampler.h"

namespace amk::server {

// An OpenAI-style error: {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string type = "invalid_request_error",
           std::optional<std::string> param = std::nullopt, std::optional<std::string> code = std::nullopt);
  int status;
  std::string type;
  std::optional<std::string> param, code;
};

// The error body for `e` (null param/code when absent).
nlohmann::json error_body(const ApiError& e);

enum class Endpoint { Chat, Completion };
const char* endpoint_name(Endpoint e);  // "chat", "completions"

struct ApiRequest {
  Endpoint endpoint = Endpoint::Chat;
  std::string model;  // as sent ("" when absent); the answer names the served model
  // Chat: the conversation, each message {"role", "content" (a string)} plus any other keys the
  // client sent (name, ...), in order.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // Completions: the prompt as text, or as token ids.
  std::optional<std::string> prompt_text;
  std::vector<int64_t> prompt_ids;
  std::optional<int64_t> max_tokens;  // max_completion_tokens, else max_tokens
  SamplingParams sampling;            // OpenAI's defaults: temperature 1, top_p 1
  bool seed_given = false;            // else the server draws a seed
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
};

// Defaults when a request gives none (OpenAI's API reference).
inline constexpr double kDefaultTemperature = 1.0;
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopBytes = 1024;
inline constexpr size_t kMaxMessages = 4096;

// Parses and checks a body. Throws ApiError (status 400).
ApiRequest parse_request(Endpoint endpoint, std::string_view body);

// The prompt ids: chat messages through the model's chat template (with the generation
// prompt), a completion's text tokenized as `amk generate` does (what the tokenizer adds, e.g.
// BOS), or its ids checked against the vocabulary. Throws ApiError (400: no template, a
// template that refuses the conversation, an empty prompt, an id outside the vocabulary).
std::vector<int64_t> prompt_ids(const ApiRequest& request, const ModelText& text, int64_t vocab_size);

// The tokens to generate: the request's max tokens, else `default_max_tokens` capped at what the
// context leaves. Throws ApiError (400, code context_length_exceeded) when the prompt plus the
// requested tokens pass the context, or the prompt alone leaves no room.
int64_t resolve_max_tokens(const ApiRequest& request, int64_t prompt_tokens, int64_t context,
                           int64_t default_max_tokens);

}  // namespace amk::server
