// Prompt ids in, generated tokens and text out, over any Decoder (the CPU reference VM or the
// CUDA VM): sampling (amk/sampler.h), stopping, text streaming (amk/text_stream.h), timings.
//
// The Generator remembers the tokens its decoder holds in the KV cache, so a conversation does
// not re-read its history: a prompt that extends them is fed from the first token beyond them.
// One that does not (a template that renders earlier turns differently, a tokenization that
// differs from the generated tokens) resets the decoder and feeds the whole prompt, and the
// result says so.
//
// Stopping, whichever comes first: a token of `eos_ids` (kept in `ids`, never in the text), a
// stop string in the text (amk/text_stream.h), `max_new_tokens`, the decoder's context full, or
// the interrupt flag (checked between steps, so Ctrl-C ends a generation at the next token).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "amk/decoder.h"
#include "amk/sampler.h"
#include "amk/tokenizer.h"

namespace amk {

struct GenerationOptions {
  int64_t max_new_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop_strings;
  std::vector<int64_t> eos_ids;
  // Draw index of the first generated token (amk/sampler.h): a conversation continues the
  // count across turns so that no two turns reuse a draw.
  uint64_t first_draw = 0;
};

enum class FinishReason { Stop, Length, Interrupted };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "interrupted"

struct GenerationResult {
  std::vector<int64_t> prompt_ids;
  std::vector<int64_t> ids;  // generated; the eos included when it ended the generation
  std::string text;          // the generated text, special tokens left out, cut before a stop string
  FinishReason finish = FinishReason::Length;
  bool context_full = false;        // Length because the decoder's context ran out
  int64_t reused_tokens = 0;        // prompt tokens already in the KV cache
  bool cache_reset = false;         // the cache held tokens the prompt does not start with
  double prefill_seconds = 0;       // feeding the prompt
  double first_token_seconds = 0;   // from the call to the first generated token (0: none)
  double decode_seconds = 0;        // from the first generated token to the last
  double total_seconds = 0;
};

class Generator {
 public:
  // Both must outlive the Generator. The decoder is assumed empty (position 0), or reset().
  Generator(Decoder& decoder, const Tokenizer& tokenizer);

  using TextCallback = std::function<void(std::string_view)>;
  // Prefill progress: (tokens fed, tokens to feed).
  using ProgressCallback = std::function<void(int64_t, int64_t)>;
  // Each generated token's id as soon as it is sampled (before its text is final): for
  // per-token timings (a server's inter-token latency) and counts.
  using TokenCallback = std::function<void(int64_t)>;

  // Generates from `prompt` (non-empty, ids inside the vocabulary, shorter than the decoder's
  // context). `on_text` receives each piece of text as it becomes final. Throws
  // std::invalid_argument for a bad prompt or options, DecodeError when a step fails.
  GenerationResult generate(std::span<const int64_t> prompt, const GenerationOptions& options,
                            const TextCallback& on_text = {}, const std::atomic<bool>* interrupt = nullptr,
                            const ProgressCallback& on_prefill = {}, const TokenCallback& on_token = {});

  // The tokens the decoder's KV cache holds, in order.
  const std::vector<int64_t>& cached_tokens() const { return cached_; }
  void reset();

 private:
  Decoder& decoder_;
  const Tokenizer& tokenizer_;
  std::vector<int64_t> cached_;
};

}  // namespace amk
