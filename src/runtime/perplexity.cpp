// perplexity() (amk/perplexity.h), llama.cpp's chunked scheme.
#include "amk/perplexity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace amk {

double negative_log_likelihood(std::span<const float> logits, int64_t target) {
  if (target < 0 || target >= static_cast<int64_t>(logits.size()))
    throw std::invalid_argument(fmt::format("token {} is outside the {} logits", target, logits.size()));
  double max = -INFINITY;
  for (float l : logits) max = std::max(max, static_cast<double>(l));
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  return -(static_cast<double>(logits[static_cast<size_t>(target)]) - max - std::log(sum));
}

PerplexityResult perplexity(Decoder& decoder, std::span<const int64_t> tokens, int64_t context,
                            std::optional<int64_t> bos_id,
                            const std::function<void(int64_t, int64_t, double)>& on_chunk,
                            const std::atomic<bool>* interrupt) {
  if (context < 2) throw std::invalid_argument(fmt::format("the context must be at least 2 tokens, got {}", context));
  if (context > decoder.max_context())
    throw std::invalid_argument(fmt::format("a context of {} tokens exceeds the decoder's {}", context, decoder.max_context()));
  const int64_t chunks = static_cast<int64_t>(tokens.size()) / context;
  if (chunks == 0)
    throw std::invalid_argument(fmt::format("the text has {} tokens, fewer than one chunk of {} (--ctx)", tokens.size(), context));
  PerplexityResult result;
  double nll = 0, nll2 = 0;
  const int64_t first = context / 2;
  for (int64_t c = 0; c < chunks; ++c) {
    decoder.reset();
    const size_t start = static_cast<size_t>(c * context);
    double chunk_nll = 0, chunk_nll2 = 0;
    int64_t chunk_scored = 0;
    for (int64_t j = 0; j + 1 < context; ++j) {
      if (interrupt != nullptr && interrupt->load(std::memory_order_relaxed)) {
        result.interrupted = true;
        break;
      }
      const int64_t input = (j == 0 && bos_id) ? *bos_id : tokens[start + static_cast<size_t>(j)];
      const std::vector<float> logits = decoder.step(input);
      if (j < first) continue;
      const double v = negative_log_likelihood(logits, tokens[start + static_cast<size_t>(j) + 1]);
      chunk_nll += v;
      chunk_nll2 += v * v;
      ++chunk_scored;
    }
    if (result.interrupted) break;  // only whole chunks count
    nll += chunk_nll;
    nll2 += chunk_nll2;
    result.scored_tokens += chunk_scored;
    ++result.chunks;
    result.running.push_back(std::exp(nll / static_cast<double>(result.scored_tokens)));
    if (on_chunk) on_chunk(result.chunks, chunks, result.running.back());
  }
  if (result.chunks == 0) return result;
  const double count = static_cast<double>(result.scored_tokens);
  result.mean_nll = nll / count;
  result.perplexity = std::exp(result.mean_nll);
  const double variance = nll2 / count - result.mean_nll * result.mean_nll;
  result.error = (variance > 0 && count > 1) ? result.perplexity * std::sqrt(variance / (count - 1)) : 0.0;
  return result;
}

}  // namespace amk
