// Perplexity over a token sequence, computed as llama.cpp's `llama-perplexity` tool computes it
// (its default mode):
//   - the tokens are cut into floor(N / ctx) chunks of `ctx` tokens; the remainder is dropped;
//   - each chunk is decoded from an empty KV cache; when `bos_id` is set (the tokenizer adds a
//     BOS), the chunk's first token is replaced by it;
//   - only the second half is scored: for j in [ctx/2, ctx-1), the logits at position j score
//     the chunk's original token j+1 (-log softmax in fp64), so every scored token has at least
//     ctx/2 tokens of context;
//   - after each chunk the running estimate exp(mean NLL) is reported ("[1]12.34,[2]..."), and
//     at the end PPL = exp(mean NLL over all scored tokens) with llama.cpp's error estimate
//     PPL * sqrt(var(NLL) / (count - 1)).
// One difference: llama.cpp refuses fewer than 2*ctx tokens; here one chunk (ctx tokens) is
// enough.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "amk/decoder.h"

namespace amk {

struct PerplexityResult {
  std::vector<double> running;  // the estimate after each chunk
  double perplexity = 0;
  double error = 0;             // llama.cpp's "+/-"
  double mean_nll = 0;
  int64_t scored_tokens = 0;
  int64_t chunks = 0;
  bool interrupted = false;     // stopped between steps; the figures cover whole chunks done
};

// `decoder` must have a context of at least `context` tokens (>= 2). Throws std::invalid_argument
// when there are fewer than `context` tokens, DecodeError when a step fails. `on_chunk` is called
// after every chunk with (chunks done, chunks in all, running estimate).
PerplexityResult perplexity(Decoder& decoder, std::span<const int64_t> tokens, int64_t context,
                            std::optional<int64_t> bos_id = std::nullopt,
                            const std::function<void(int64_t, int64_t, double)>& on_chunk = {},
                            const std::atomic<bool>* interrupt = nullptr);

// -log softmax(logits)[target] in fp64 (log-sum-exp around the maximum).
double negative_log_likelihood(std::span<const float> logits, int64_t target);

}  // namespace amk
