// Typed requests to prompt ids (server/request.h): the chat template and the tokenizer. Apart
// from request.cpp so that the request parser links (and is fuzzed) without them.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "amk/chat_template.h"
#include "amk/conversation.h"
#include "amk/tokenizer.h"
#include "server/request.h"

namespace amk::server {

std::vector<int64_t> prompt_ids(const ApiRequest& request, const ModelText& text, int64_t vocab_size) {
  std::vector<int64_t> ids;
  const char* param = request.endpoint == Endpoint::Chat ? "messages" : "prompt";
  try {
    if (request.endpoint == Endpoint::Chat) {
      if (!text.chat_template)
        throw ApiError(400, "the model has no chat template: use /v1/completions", "invalid_request_error", "messages");
      ids = conversation_ids(text, request.messages, /*add_generation_prompt=*/true);
    } else if (request.prompt_text) {
      const std::vector<int32_t> t = text.tokenizer.encode(*request.prompt_text, /*add_special=*/true);
      ids.assign(t.begin(), t.end());
    } else {
      ids = request.prompt_ids;
    }
  } catch (const TemplateError& e) {
    throw ApiError(400, fmt::format("the chat template refused the conversation: {}", e.what()), "invalid_request_error",
                   "messages");
  } catch (const TokenizerError& e) {
    throw ApiError(400, fmt::format("cannot tokenize the prompt: {}", e.what()), "invalid_request_error", param);
  } catch (const std::invalid_argument& e) {
    throw ApiError(400, fmt::format("cannot build the prompt: {}", e.what()), "invalid_request_error", param);
  }
  if (ids.empty()) throw ApiError(400, "the prompt has no tokens", "invalid_request_error", param);
  const int64_t vocab = std::min<int64_t>(vocab_size, text.tokenizer.vocab_size());
  for (int64_t id : ids)
    if (id < 0 || id >= vocab)
      throw ApiError(400, fmt::format("prompt token {} is outside the vocabulary [0, {})", id, vocab),
                     "invalid_request_error", param);
  return ids;
}

}  // namespace amk::server
