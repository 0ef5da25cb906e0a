// Generator (amk/generator.h): prefill what the cache lacks, then sample, stream and stop.
#include "amk/generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "amk/text_stream.h"

namespace amk {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool interrupted(const std::atomic<bool>* flag) { return flag != nullptr && flag->load(std::memory_order_relaxed); }

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Interrupted: return "interrupted";
  }
  return "?";
}

Generator::Generator(Decoder& decoder, const Tokenizer& tokenizer) : decoder_(decoder), tokenizer_(tokenizer) {}

void Generator::reset() {
  decoder_.reset();
  cached_.clear();
}

GenerationResult Generator::generate(std::span<const int64_t> prompt, const GenerationOptions& options,
                                     const TextCallback& on_text, const std::atomic<bool>* interrupt,
                                     const ProgressCallback& on_prefill, const TokenCallback& on_token) {
  if (prompt.empty()) throw std::invalid_argument("the prompt has no tokens");
  if (options.max_new_tokens < 0) throw std::invalid_argument("max_new_tokens must be >= 0");
  if (const std::string problem = sampling_params_problem(options.sampling); !problem.empty())
    throw std::invalid_argument(problem);
  const int64_t vocab = std::min<int64_t>(decoder_.vocab_size(), tokenizer_.vocab_size());
  for (int64_t id : prompt)
    if (id < 0 || id >= vocab)
      throw std::invalid_argument(fmt::format("prompt token {} is outside the vocabulary [0, {})", id, vocab));
  if (static_cast<int64_t>(prompt.size()) >= decoder_.max_context())
    throw std::invalid_argument(fmt::format("the prompt ({} tokens) does not fit the context of {} tokens with room "
                                            "for one more", prompt.size(), decoder_.max_context()));

  const Clock::time_point start = Clock::now();
  GenerationResult result;
  result.prompt_ids.assign(prompt.begin(), prompt.end());

  // Reuse the cache when the prompt extends what it holds; at least the last prompt token is
  // fed again (its logits are what the first token is drawn from), which needs a reset when
  // the prompt is exactly the cached tokens.
  const auto mismatch = std::mismatch(cached_.begin(), cached_.end(), prompt.begin(), prompt.end());
  const size_t common = static_cast<size_t>(mismatch.first - cached_.begin());
  if (common < cached_.size() || common == prompt.size()) {
    result.cache_reset = !cached_.empty();
    reset();
  }
  result.reused_tokens = static_cast<int64_t>(cached_.size());

  // The step on the last prompt token (at position prompt.size() - 1) draws the first token,
  // draw first_draw; each later step the next draw (the decoder's draw index is offset + P).
  const uint64_t draw_offset = options.first_draw - static_cast<uint64_t>(prompt.size() - 1);
  int64_t next = -1;
  const int64_t to_feed = static_cast<int64_t>(prompt.size() - cached_.size());
  for (int64_t fed = 0; fed < to_feed; ++fed) {
    if (interrupted(interrupt)) {
      result.finish = FinishReason::Interrupted;
      result.total_seconds = result.prefill_seconds = seconds_since(start);
      return result;
    }
    const int64_t token = prompt[cached_.size()];
    if (fed + 1 < to_feed) {
      decoder_.feed(token);
    } else {
      decoder_.set_sampling(options.sampling, draw_offset);
      next = decoder_.step_sample(token);
    }
    cached_.push_back(token);
    if (on_prefill) on_prefill(fed + 1, to_feed);
  }
  result.prefill_seconds = seconds_since(start);

  TextStream stream(tokenizer_, options.stop_strings);
  const auto emit = [&](const std::string& piece) {
    if (!piece.empty() && on_text) on_text(piece);
  };
  Clock::time_point first_token_at = start;
  result.finish = FinishReason::Length;
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const int64_t token = next;
    result.ids.push_back(token);
    if (i == 0) {
      first_token_at = Clock::now();
      result.first_token_seconds = seconds_since(start);
    }
    if (on_token) on_token(token);
    if (std::find(options.eos_ids.begin(), options.eos_ids.end(), token) != options.eos_ids.end()) {
      result.finish = FinishReason::Stop;
      break;
    }
    emit(stream.push(token));
    if (stream.stopped()) {
      result.finish = FinishReason::Stop;
      break;
    }
    if (i + 1 == options.max_new_tokens) break;
    if (decoder_.position() >= decoder_.max_context()) {
      result.context_full = true;
      break;
    }
    if (interrupted(interrupt)) {
      result.finish = FinishReason::Interrupted;
      break;
    }
    next = decoder_.step_sample(token);
    cached_.push_back(token);
  }
  emit(stream.finish());
  result.text = stream.text();
  if (!result.ids.empty()) result.decode_seconds = seconds_since(first_token_at);
  result.total_seconds = seconds_since(start);
  return result;
}

}  // namespace amk
