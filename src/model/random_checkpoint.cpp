#include "amk/random_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "amk/hash.h"
#include "amk/model_presets.h"
#include "amk/safetensors_writer.h"
#include "amk/tensor.h"

namespace amk {

namespace {

int64_t numel(const WeightSpec& w) {
  int64_t n = 1;
  for (int64_t d : w.shape) n *= d;
  return n;
}

StDType st_dtype(DType d) {
  switch (d) {
    case DType::F32: return StDType::F32;
    case DType::F16: return StDType::F16;
    case DType::BF16: return StDType::BF16;
    default: break;
  }
  throw std::invalid_argument(fmt::format("make-model writes F32, F16 or BF16, not {}", name_of(d)));
}

std::string_view torch_dtype(DType d) {
  return d == DType::F32 ? "float32" : d == DType::F16 ? "float16" : "bfloat16";
}

// splitmix64 and Box-Muller: fast, portable and reproducible across standard libraries
// (std::normal_distribution's output is implementation-defined). splitmix64 is counter based
// (the n-th draw is a pure function of seed + n), so value g of the whole checkpoint's stream can
// be computed without drawing the g before it: that is what lets several threads fill one chunk
// and still write exactly the bytes a single sequential generator would.
class NormalStream {
 public:
  explicit NormalStream(uint64_t seed) : seed_(seed) {}
  // Values 2p and 2p + 1 of the stream: one Box-Muller pair from draws 2p and 2p + 1.
  std::pair<double, double> pair(int64_t p) const {
    const double u1 = (double(draw(2 * uint64_t(p)) >> 11) + 1.0) * 0x1p-53;  // (0, 1]
    const double u2 = double(draw(2 * uint64_t(p) + 1) >> 11) * 0x1p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    return {r * std::cos(2 * std::numbers::pi * u2), r * std::sin(2 * std::numbers::pi * u2)};
  }

 private:
  uint64_t draw(uint64_t n) const { return splitmix64(seed_ + n * kSplitmixGamma); }
  uint64_t seed_;
};

// Stream values [first, first + count) as center + 0.02 * N(0, 1), stored as `dtype` into `out`.
void fill_values(const NormalStream& normal, int64_t first, int64_t count, double center,
                 DType dtype, uint8_t* out) {
  const int64_t width = dtype_nbytes(dtype, 1);
  std::pair<double, double> cached{};
  for (int64_t i = 0; i < count; ++i) {
    const int64_t g = first + i;
    if (i == 0 || g % 2 == 0) cached = normal.pair(g / 2);
    const auto v = static_cast<float>(center + 0.02 * (g % 2 == 0 ? cached.first : cached.second));
    uint8_t* dst = out + i * width;
    if (dtype == DType::F32) {
      std::memcpy(dst, &v, 4);
    } else {
      const uint16_t h = dtype == DType::BF16 ? float_to_bf16_bits(v) : float_to_f16_bits(v);
      dst[0] = static_cast<uint8_t>(h);
      dst[1] = static_cast<uint8_t>(h >> 8);
    }
  }
}

// The same, split over the machine's cores: an 8B checkpoint is 8e9 Box-Muller values, minutes
// on one core. Every value depends only on its index, so the split cannot change a byte.
void fill_values_parallel(const NormalStream& normal, int64_t first, int64_t count, double center,
                          DType dtype, uint8_t* out) {
  constexpr int64_t kMinPerThread = int64_t{1} << 16;
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t threads = std::clamp<int64_t>(count / kMinPerThread, 1, std::min<int64_t>(cores, 64));
  if (threads == 1) return fill_values(normal, first, count, center, dtype, out);
  const int64_t width = dtype_nbytes(dtype, 1);
  const int64_t per = (count + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t begin = t * per, n = std::min(per, count - begin);
    if (n <= 0) break;
    pool.emplace_back(fill_values, std::cref(normal), first + begin, n, center, dtype,
                      out + begin * width);
  }
  for (std::thread& t : pool) t.join();
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

bool is_norm(const std::string& name) { return name.find("norm.weight") != std::string::npos; }

}  // namespace

std::vector<CheckpointShard> plan_shards(const ModelConfig& config, DType dtype,
                                         int64_t max_shard_bytes) {
  std::vector<CheckpointShard> shards(1);
  for (const WeightSpec& w : expected_weights(config)) {
    const int64_t bytes = dtype_nbytes(dtype, numel(w));
    if (!shards.back().tensors.empty() && shards.back().bytes + bytes > max_shard_bytes)
      shards.emplace_back();
    shards.back().tensors.push_back(w);
    shards.back().bytes += bytes;
  }
  if (shards.size() == 1) {
    shards[0].file = "model.safetensors";
  } else {
    for (size_t i = 0; i < shards.size(); ++i)
      shards[i].file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
  }
  return shards;
}

std::string shard_index_json(const std::vector<CheckpointShard>& shards) {
  nlohmann::ordered_json index;
  int64_t total = 0;
  for (const CheckpointShard& s : shards) total += s.bytes;
  index["metadata"] = {{"total_size", total}};
  auto& map = index["weight_map"] = nlohmann::ordered_json::object();
  for (const CheckpointShard& s : shards)
    for (const WeightSpec& w : s.tensors) map[w.name] = s.file;
  return index.dump(2) + "\n";
}

void write_random_checkpoint(const std::filesystem::path& dir, std::string_view preset, DType dtype,
                             uint64_t seed, int64_t max_shard_bytes) {
  write_random_checkpoint_for(dir, model_preset_config(preset, torch_dtype(dtype)),
                              model_preset_generation_config(preset),
                              std::string(preset) + " preset", dtype, seed, max_shard_bytes);
}

void write_random_checkpoint_for(const std::filesystem::path& dir, const std::string& config_text,
                                 const std::string& generation_config_text, std::string_view what,
                                 DType dtype, uint64_t seed, int64_t max_shard_bytes) {
  const StDType st = st_dtype(dtype);
  const ModelConfig config = parse_model_config(config_text, std::string(what));
  std::filesystem::create_directories(dir);
  write_text(dir / "config.json", config_text);
  write_text(dir / "generation_config.json", generation_config_text);

  const std::vector<CheckpointShard> shards = plan_shards(config, dtype, max_shard_bytes);
  const NormalStream normal(seed);
  // Bounded memory: one chunk of values at a time, whatever the tensor's size. `next_value` is
  // the stream index of the chunk's first value: the stream runs on across tensors and shards.
  constexpr int64_t kChunk = int64_t{1} << 22;
  std::vector<uint8_t> bytes;
  const int64_t width = dtype_nbytes(dtype, 1);
  int64_t next_value = 0;
  for (const CheckpointShard& shard : shards) {
    std::vector<StTensorDecl> decls;
    for (const WeightSpec& w : shard.tensors) decls.push_back({w.name, st, w.shape});
    SafetensorsWriter writer(dir / shard.file, std::move(decls), {{"format", "pt"}});
    for (const WeightSpec& w : shard.tensors) {
      const double center = is_norm(w.name) ? 1.0 : 0.0;
      for (int64_t done = 0, n = numel(w); done < n; done += kChunk) {
        const int64_t count = std::min(kChunk, n - done);
        bytes.resize(size_t(count * width));
        fill_values_parallel(normal, next_value, count, center, dtype, bytes.data());
        next_value += count;
        writer.append(bytes);
      }
    }
    writer.finish();
  }
  if (shards.size() > 1) write_text(dir / "model.safetensors.index.json", shard_index_json(shards));
}

}  // namespace amk
