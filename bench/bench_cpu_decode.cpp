// amk_bench_cpu_decode MODEL [--reference] [--threads N] [--weights as-stored|f32|bf16]
//                            [--prompt-ids 1,2,3] [-n N]
//
// Times one CPU decoder on a real checkpoint: weight preparation, prefill (the prompt, one step
// per token) and decode (the generated tokens), as ms per token; prints the generated ids, the
// weight bytes one step streams, and this machine's read bandwidth (a plain streaming sum over a
// buffer larger than any cache, on as many threads), so the decode time can be read against the
// floor that bandwidth sets. The default prompt is SmolLM2's reference chat case
// (/work/shared/models/README.md).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/cpu_decoder.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    ids.push_back(std::stoll(text.substr(at, end - at)));
    at = end + 1;
  }
  return ids;
}

// GB/s of `threads` threads each summing its share of a 1 GiB buffer (best of three).
double read_bandwidth_gbs(int threads) {
  const size_t n = (size_t{1} << 30) / sizeof(float);
  std::vector<float> buffer(n, 1.0f);
  std::vector<double> sums(static_cast<size_t>(threads));
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const size_t begin = n * size_t(t) / size_t(threads), end = n * size_t(t + 1) / size_t(threads);
        float lanes[16] = {};
        for (size_t i = begin; i + 16 <= end; i += 16)
          for (size_t j = 0; j < 16; ++j) lanes[j] += buffer[i + j];
        double s = 0;
        for (float v : lanes) s += v;
        sums[size_t(t)] = s;
      });
    for (std::thread& t : pool) t.join();
    best = std::max(best, double(n * sizeof(float)) / seconds_since(t0) / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: {} MODEL [--reference] [--threads N] [--weights as-stored|f32|bf16] "
                       "[--prompt-ids 1,2,3] [-n N]\n", argv[0]);
    return 2;
  }
  const std::string model = argv[1];
  bool reference = false;
  amk::CpuDecoderOptions options;
  std::vector<int64_t> prompt = parse_ids(
      "1,9690,198,2683,359,253,5356,5646,11173,3365,3511,308,34519,28,7018,411,407,19712,8182,2,"
      "198,1,4093,198,1780,314,260,3575,282,4649,47,2,198,1,520,9531,198");
  int64_t n = 8;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--reference") reference = true;
    else if (a == "--threads" && has_value) options.threads = std::stoi(argv[++i]);
    else if (a == "--prompt-ids" && has_value) prompt = parse_ids(argv[++i]);
    else if (a == "-n" && has_value) n = std::stoll(argv[++i]);
    else if (a == "--weights" && has_value) {
      const std::string w = argv[++i];
      options.weights = w == "f32" ? amk::CpuWeights::F32
                        : w == "bf16" ? amk::CpuWeights::BF16 : amk::CpuWeights::AsStored;
    } else {
      fmt::print(stderr, "unknown argument '{}'\n", a);
      return 2;
    }
  }

  auto t0 = Clock::now();
  const amk::Checkpoint checkpoint = amk::Checkpoint::open(model);
  const double open_s = seconds_since(t0);
  const int64_t context = int64_t(prompt.size()) + n;
  t0 = Clock::now();
  const std::unique_ptr<amk::Decoder> decoder = amk::make_cpu_decoder(
      checkpoint, context,
      reference ? amk::CpuDecoderKind::Reference : amk::CpuDecoderKind::Fast, options);
  const double prepare_s = seconds_since(t0);

  t0 = Clock::now();
  for (int64_t id : prompt) decoder->step(id);
  const double prefill_s = seconds_since(t0);
  std::vector<int64_t> generated{decoder->last_next_token()};
  t0 = Clock::now();
  for (int64_t i = 1; i < n; ++i) {
    decoder->step(generated.back());
    generated.push_back(decoder->last_next_token());
  }
  const double decode_s = seconds_since(t0);

  std::string ids;
  for (int64_t id : generated) ids += (ids.empty() ? "" : " ") + std::to_string(id);
  fmt::print("decoder         {}\n", reference ? "reference (ReferenceVM)" : "fast CPU");
  fmt::print("open            {:.2f} s\n", open_s);
  fmt::print("prepare         {:.2f} s\n", prepare_s);
  fmt::print("prefill         {} tokens, {:.1f} ms/token\n", prompt.size(),
             prefill_s * 1e3 / double(prompt.size()));
  if (n > 1)
    fmt::print("decode          {} tokens, {:.1f} ms/token\n", n - 1, decode_s * 1e3 / double(n - 1));
  fmt::print("generated       {}\n", ids);
  if (const auto* fast = dynamic_cast<const amk::FastCpuDecoder*>(decoder.get())) {
    const double bytes = double(fast->weight_bytes_per_token());
    const double step_s = (prefill_s + decode_s) / double(int64_t(prompt.size()) + n - 1);
    fmt::print("threads         {}\n", fast->threads());
    fmt::print("weights/token   {:.1f} MB, streamed at {:.2f} GB/s\n", bytes / 1e6,
               bytes / step_s / 1e9);
    const double bw = read_bandwidth_gbs(fast->threads());
    fmt::print("read bandwidth  {:.2f} GB/s ({} threads): floor {:.1f} ms/token\n", bw,
               fast->threads(), bytes / bw / 1e6);
  }
  return 0;
}
