// Request bodies to typed requests (server/request.h).
#include "server/request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/strict_json.h"

namespace amk::server {

namespace {

using nlohmann::json;
using model_detail::json_type_word;

// Request bodies nest a few levels (messages, content parts, tools schemas).
constexpr int kMaxBodyDepth = 64;
constexpr int64_t kMaxTokensLimit = int64_t{1} << 31;

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError(400, message, "invalid_request_error", param);
}

// Present and not null.
const json* field(const json& body, const char* key) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string got(const json& v) { return std::string(json_type_word(v)); }

double number(const json& body, const char* key, double fallback) {
  const json* v = field(body, key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) throw bad(key, fmt::format("'{}' must be a number, got {}", key, got(*v)));
  const double d = v->get<double>();
  if (!std::isfinite(d)) throw bad(key, fmt::format("'{}' must be finite", key));
  return d;
}

std::optional<int64_t> integer(const json& body, const char* key) {
  const json* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw bad(key, fmt::format("'{}' is too large", key));
    return static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {  // 16.0 is an integer to JavaScript clients
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  throw bad(key, fmt::format("'{}' must be an integer, got {}", key, got(*v)));
}

bool boolean(const json& body, const char* key, bool fallback) {
  const json* v = field(body, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) throw bad(key, fmt::format("'{}' must be a boolean, got {}", key, got(*v)));
  return v->get<bool>();
}

ApiError unsupported(const std::string& key, const std::string& why) {
  return ApiError(400, fmt::format("'{}' is not supported by this server: {}", key, why), "invalid_request_error", key,
                  "unsupported_parameter");
}

// Fields that would change the answer and that amk does not implement.
void refuse_unsupported(const json& body, Endpoint endpoint) {
  if (const auto n = integer(body, "n"); n && *n != 1) {
    if (*n < 1) throw bad("n", fmt::format("'n' must be at least 1, got {}", *n));
    throw unsupported("n", fmt::format("one choice per request (n = 1), got {}", *n));
  }
  if (const auto best = integer(body, "best_of"); best && *best != 1)
    throw unsupported("best_of", fmt::format("one candidate per request (best_of = 1), got {}", *best));
  if (const json* v = field(body, "logprobs")) {
    const bool off = (v->is_boolean() && !v->get<bool>()) ||
                     (endpoint == Endpoint::Completion && v->is_number_integer() && v->get<int64_t>() == 0);
    if (!off) throw unsupported("logprobs", "log probabilities are not returned");
  }
  if (const json* v = field(body, "top_logprobs"); v != nullptr && !(v->is_number_integer() && v->get<int64_t>() == 0))
    throw unsupported("top_logprobs", "log probabilities are not returned");
  if (const json* v = field(body, "tools"); v != nullptr && !(v->is_array() && v->empty()))
    throw unsupported("tools", "tool calling is not implemented");
  if (const json* v = field(body, "tool_choice"); v != nullptr && !(v->is_string() && (*v == "none" || *v == "auto")))
    throw unsupported("tool_choice", "tool calling is not implemented");
  if (field(body, "functions") != nullptr) throw unsupported("functions", "function calling is not implemented");
  if (field(body, "function_call") != nullptr) throw unsupported("function_call", "function calling is not implemented");
  if (const json* v = field(body, "response_format");
      v != nullptr && !(v->is_object() && v->contains("type") && (*v)["type"] == "text"))
    throw unsupported("response_format", "only {\"type\": \"text\"} (structured output is not implemented)");
  if (const json* v = field(body, "logit_bias"); v != nullptr && !(v->is_object() && v->empty()))
    throw unsupported("logit_bias", "logit biases are not implemented");
  for (const char* key : {"presence_penalty", "frequency_penalty"})
    if (number(body, key, 0.0) != 0.0) throw unsupported(key, "penalties are not implemented (0 only)");
  if (number(body, "repetition_penalty", 1.0) != 1.0)
    throw unsupported("repetition_penalty", "penalties are not implemented (1 only)");
  if (boolean(body, "echo", false)) throw unsupported("echo", "the prompt is not echoed");
  if (const json* v = field(body, "suffix"); v != nullptr && !(v->is_string() && v->get<std::string>().empty()))
    throw unsupported("suffix", "insertion (a suffix) is not implemented");
  for (const char* key : {"grammar", "json_schema", "guided_json", "guided_regex", "guided_choice", "guided_grammar"})
    if (field(body, key) != nullptr) throw unsupported(key, "constrained decoding is not implemented");
  if (const json* v = field(body, "modalities"))
    if (!v->is_array() || std::any_of(v->begin(), v->end(), [](const json& m) { return m != "text"; }))
      throw unsupported("modalities", "text only");
  if (field(body, "audio") != nullptr) throw unsupported("audio", "text only");
}

void parse_stop(const json& body, ApiRequest& r) {
  const json* v = field(body, "stop");
  if (v == nullptr) return;
  std::vector<std::string> stops;
  if (v->is_string()) {
    stops.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > kMaxStopStrings)
      throw bad("stop", fmt::format("'stop' holds {} strings; at most {}", v->size(), kMaxStopStrings));
    for (const json& s : *v) {
      if (!s.is_string()) throw bad("stop", fmt::format("'stop' must hold strings, got {}", got(s)));
      stops.push_back(s.get<std::string>());
    }
  } else {
    throw bad("stop", fmt::format("'stop' must be a string or a list of strings, got {}", got(*v)));
  }
  for (std::string& s : stops) {
    if (s.size() > kMaxStopBytes) throw bad("stop", fmt::format("a stop string is longer than {} bytes", kMaxStopBytes));
    if (!s.empty()) r.stop.push_back(std::move(s));
  }
}

void parse_sampling(const json& body, ApiRequest& r) {
  SamplingParams& s = r.sampling;
  s.temperature = number(body, "temperature", kDefaultTemperature);
  if (s.temperature < 0) throw bad("temperature", fmt::format("'temperature' must be >= 0, got {}", s.temperature));
  s.top_p = number(body, "top_p", 1.0);
  if (!(s.top_p > 0 && s.top_p <= 1)) throw bad("top_p", fmt::format("'top_p' must be in (0, 1], got {}", s.top_p));
  s.min_p = number(body, "min_p", 0.0);
  if (!(s.min_p >= 0 && s.min_p <= 1)) throw bad("min_p", fmt::format("'min_p' must be in [0, 1], got {}", s.min_p));
  if (const auto k = integer(body, "top_k")) {
    if (*k < -1) throw bad("top_k", fmt::format("'top_k' must be >= 0 (or -1: off), got {}", *k));
    s.top_k = *k < 0 ? 0 : *k;
  }
  if (const auto seed = integer(body, "seed")) {
    s.seed = static_cast<uint64_t>(*seed);
    r.seed_given = true;
  }
  if (const std::string problem = sampling_params_problem(s); !problem.empty()) throw bad("temperature", problem);
}

void parse_max_tokens(const json& body, ApiRequest& r) {
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    const auto n = integer(body, key);
    if (!n) continue;
    if (*n < 1 || *n > kMaxTokensLimit) throw bad(key, fmt::format("'{}' must be in [1, 2^31], got {}", key, *n));
    r.max_tokens = *n;  // max_completion_tokens (read last) wins
  }
}

// A message's content as one string: a string, null (""), or a list of text parts joined with
// newlines (as vLLM joins them).
std::string message_content(const json& content, size_t i) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  const std::string param = fmt::format("messages[{}].content", i);
  if (!content.is_array()) throw bad(param, fmt::format("'{}' must be a string or a list of parts, got {}", param, got(content)));
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const std::string where = fmt::format("{}[{}]", param, j);
    if (!part.is_object()) throw bad(where, fmt::format("'{}' must be an object, got {}", where, got(part)));
    const json* type = field(part, "type");
    if (type == nullptr || !type->is_string()) throw bad(where + ".type", fmt::format("'{}.type' must be a string", where));
    if (*type != "text")
      throw ApiError(400, fmt::format("'{}.type' is '{}': only text parts are supported", where, type->get<std::string>()),
                     "invalid_request_error", where + ".type", "unsupported_parameter");
    const json* t = field(part, "text");
    if (t == nullptr || !t->is_string()) throw bad(where + ".text", fmt::format("'{}.text' must be a string", where));
    if (j > 0) text += "\n";
    text += t->get<std::string>();
  }
  return text;
}

void parse_messages(const json& body, ApiRequest& r) {
  const json* v = field(body, "messages");
  if (v == nullptr) throw bad("messages", "'messages' is required");
  if (!v->is_array()) throw bad("messages", fmt::format("'messages' must be a list, got {}", got(*v)));
  if (v->empty()) throw bad("messages", "'messages' is empty");
  if (v->size() > kMaxMessages) throw bad("messages", fmt::format("'messages' holds more than {} messages", kMaxMessages));
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) throw bad(where, fmt::format("'{}' must be an object, got {}", where, got(m)));
    const json* role = field(m, "role");
    if (role == nullptr || !role->is_string() || role->get<std::string>().empty())
      throw bad(where + ".role", fmt::format("'{}.role' must be a non-empty string", where));
    if (const json* calls = field(m, "tool_calls"); calls != nullptr && !(calls->is_array() && calls->empty()))
      throw unsupported(where + ".tool_calls", "tool calling is not implemented");
    const auto content = m.find("content");
    if (content == m.end() && *role != "assistant") throw bad(where + ".content", fmt::format("'{}.content' is required", where));
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    out["role"] = role->get<std::string>();
    out["content"] = message_content(content == m.end() ? json(nullptr) : *content, i);
    for (auto it = m.begin(); it != m.end(); ++it)
      if (it.key() != "role" && it.key() != "content") out[it.key()] = nlohmann::ordered_json::parse(it.value().dump());
    r.messages.push_back(std::move(out));
  }
}

void add_id(const json& v, std::vector<int64_t>& ids) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    throw bad("prompt", fmt::format("a token id in 'prompt' must be a non-negative integer, got {}", v.dump()));
  ids.push_back(v.get<int64_t>());
}

void parse_prompt(const json& body, ApiRequest& r) {
  const json* v = field(body, "prompt");
  if (v == nullptr) throw bad("prompt", "'prompt' is required");
  if (v->is_string()) {
    r.prompt_text = v->get<std::string>();
    return;
  }
  if (!v->is_array() || v->empty())
    throw bad("prompt", fmt::format("'prompt' must be a string, a list of token ids, or a list of one of either; got {}",
                                    v->is_array() ? "an empty list" : got(*v)));
  const json& first = (*v)[0];
  if (first.is_number()) {
    for (const json& id : *v) add_id(id, r.prompt_ids);
    return;
  }
  if (v->size() != 1)
    throw ApiError(400, fmt::format("'prompt' holds {} prompts: one prompt per request", v->size()),
                   "invalid_request_error", "prompt", "unsupported_parameter");
  if (first.is_string()) {
    r.prompt_text = first.get<std::string>();
  } else if (first.is_array() && !first.empty()) {
    for (const json& id : first) add_id(id, r.prompt_ids);
  } else {
    throw bad("prompt", fmt::format("'prompt[0]' must be a string or a non-empty list of token ids, got {}", got(first)));
  }
}

}  // namespace

ApiError::ApiError(int status_, std::string message, std::string type_, std::optional<std::string> param_,
                   std::optional<std::string> code_)
    : std::runtime_error(std::move(message)), status(status_), type(std::move(type_)), param(std::move(param_)),
      code(std::move(code_)) {}

nlohmann::json error_body(const ApiError& e) {
  nlohmann::json err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (e.param) err["param"] = *e.param;
  if (e.code) err["code"] = *e.code;
  return {{"error", err}};
}

const char* endpoint_name(Endpoint e) { return e == Endpoint::Chat ? "chat" : "completions"; }

ApiRequest parse_request(Endpoint endpoint, std::string_view body) {
  json doc;
  try {
    doc = model_detail::parse_untrusted_json(body, kMaxBodyDepth);
  } catch (const std::exception& e) {
    throw ApiError(400, fmt::format("the body is not valid JSON: {}", e.what()));
  }
  if (!doc.is_object()) throw ApiError(400, fmt::format("the body must be a JSON object, got {}", got(doc)));
  ApiRequest r;
  r.endpoint = endpoint;
  if (const json* m = field(doc, "model")) {
    if (!m->is_string()) throw bad("model", fmt::format("'model' must be a string, got {}", got(*m)));
    r.model = m->get<std::string>();
  }
  refuse_unsupported(doc, endpoint);
  if (endpoint == Endpoint::Chat)
    parse_messages(doc, r);
  else
    parse_prompt(doc, r);
  parse_max_tokens(doc, r);
  parse_sampling(doc, r);
  parse_stop(doc, r);
  r.stream = boolean(doc, "stream", false);
  if (const json* so = field(doc, "stream_options")) {
    if (!so->is_object()) throw bad("stream_options", fmt::format("'stream_options' must be an object, got {}", got(*so)));
    if (!r.stream) throw bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  return r;
}

int64_t resolve_max_tokens(const ApiRequest& request, int64_t prompt_tokens, int64_t context, int64_t default_max_tokens) {
  const char* param = request.endpoint == Endpoint::Chat ? "messages" : "prompt";
  if (prompt_tokens >= context)
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens. However, the prompt has {} tokens, "
                               "which leaves no room for the completion.",
                               context, prompt_tokens),
                   "invalid_request_error", param, "context_length_exceeded");
  if (request.max_tokens) {
    if (prompt_tokens + *request.max_tokens > context)
      throw ApiError(400,
                     fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                                 "({} in the prompt, {} in the completion). Reduce the prompt or max_tokens.",
                                 context, prompt_tokens + *request.max_tokens, prompt_tokens, *request.max_tokens),
                     "invalid_request_error", "max_tokens", "context_length_exceeded");
    return *request.max_tokens;
  }
  return std::min(default_max_tokens, context - prompt_tokens);
}

}  // namespace amk::server
