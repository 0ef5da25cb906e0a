#include "amk/reference_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <system_error>
#include <unistd.h>

#include "amk/decoder.h"
#include "amk/hash.h"
#include "amk/json.h"

namespace amk::eval {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'A', 'M', 'K', 'R', 'E', 'F', '0', '1'};
// A key is a few hundred bytes; anything much longer in a header is not ours.
constexpr uint64_t kMaxKeyBytes = 1 << 20;

// A file's name, size and content: the whole of a small file, and of a large one (weights) its
// first and last 4 KiB and kSampledBlocks blocks evenly between, so a checkpoint regenerated
// with the same bytes (a preset on a fresh machine) keeps its key and one written from other
// weights does not.
constexpr uint64_t kBlock = 4096;
constexpr uint64_t kSampledBlocks = 1024;

std::string file_stamp(const fs::path& file, const std::string& name) {
  std::error_code ec;
  const uint64_t size = fs::file_size(file, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot read the size of {}: {}", file.string(), ec.message()));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot open {}", file.string()));
  std::string bytes;
  const auto read_at = [&](uint64_t offset, uint64_t n) {
    const size_t old = bytes.size();
    bytes.resize(old + n);
    in.seekg(std::streamoff(offset));
    if (!in.read(bytes.data() + old, std::streamsize(n)))
      throw std::runtime_error(fmt::format("cannot read {} at {}", file.string(), offset));
  };
  if (size <= (kSampledBlocks + 2) * kBlock) {
    read_at(0, size);
  } else {
    read_at(0, kBlock);
    const uint64_t span = size - 2 * kBlock;
    for (uint64_t i = 0; i < kSampledBlocks; ++i) read_at(kBlock + span / kSampledBlocks * i, kBlock);
    read_at(size - kBlock, kBlock);
  }
  return fmt::format("{}:{}:{:016x};", name, size, fnv1a64(bytes));
}

}  // namespace

std::string checkpoint_fingerprint(const fs::path& checkpoint) {
  std::error_code ec;
  const fs::file_status st = fs::status(checkpoint, ec);
  if (ec || !fs::exists(st))
    throw std::runtime_error(fmt::format("cannot fingerprint {}: no such file or folder", checkpoint.string()));
  if (fs::is_regular_file(st)) return file_stamp(checkpoint, checkpoint.filename().string());
  if (!fs::is_directory(st))
    throw std::runtime_error(fmt::format("cannot fingerprint {}: not a file or folder", checkpoint.string()));
  std::vector<std::string> stamps;
  for (fs::recursive_directory_iterator it(checkpoint, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec) || ec) continue;
    stamps.push_back(file_stamp(it->path(), fs::relative(it->path(), checkpoint).generic_string()));
  }
  if (ec) throw std::runtime_error(fmt::format("cannot list {}: {}", checkpoint.string(), ec.message()));
  std::sort(stamps.begin(), stamps.end());
  std::string out;
  for (const std::string& s : stamps) out += s;
  return out;
}

std::string reference_cache_key(const fs::path& checkpoint, DType weights, int64_t context,
                                const Program& plain) {
  return fmt::format("{}|weights={}|context={}|plain={:016x}", checkpoint_fingerprint(checkpoint),
                     name_of(weights), context, fnv1a64(program_to_json(plain)));
}

ReferenceCache::ReferenceCache(fs::path dir, std::string key)
    : dir_(std::move(dir)), key_(std::move(key)) {}

std::string check_step_name(const std::vector<int64_t>& positions,
                            const std::vector<int64_t>& tokens, size_t index) {
  std::string name;
  for (size_t i = 0; i <= index && i < positions.size() && i < tokens.size(); ++i)
    name += fmt::format("{}{}:{}", i ? "," : "", positions[i], tokens[i]);
  return name;
}

fs::path ReferenceCache::entry_path(const std::string& step) const {
  // The name shows the step's own position and token; the hash covers the key and the history.
  const size_t last = step.rfind(',');
  std::string own = step.substr(last == std::string::npos ? 0 : last + 1);
  std::replace(own.begin(), own.end(), ':', '-');
  return dir_ / fmt::format("ref-{:016x}-{}.bin", fnv1a64(key_ + "#" + step), own);
}

std::optional<std::vector<float>> ReferenceCache::load(const std::string& step,
                                                       size_t vocab) const {
  const fs::path path = entry_path(step);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;  // a FIFO or a folder is no entry
  const std::string want = key_ + "#" + step;
  std::ifstream in(path, std::ios::binary);
  char magic[8];
  uint64_t key_bytes = 0, count = 0;
  if (!in.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return std::nullopt;
  if (!in.read(reinterpret_cast<char*>(&key_bytes), 8) || key_bytes != want.size() ||
      key_bytes > kMaxKeyBytes)
    return std::nullopt;
  std::string key(key_bytes, '\0');
  if (!in.read(key.data(), std::streamsize(key_bytes)) || key != want) return std::nullopt;
  if (!in.read(reinterpret_cast<char*>(&count), 8) || count != vocab) return std::nullopt;
  std::vector<float> logits(vocab);
  if (!in.read(reinterpret_cast<char*>(logits.data()), std::streamsize(vocab * sizeof(float))))
    return std::nullopt;
  if (in.peek() != std::char_traits<char>::eof()) return std::nullopt;  // trailing bytes
  return logits;
}

std::optional<std::vector<std::vector<float>>> ReferenceCache::load_all(
    const std::vector<int64_t>& positions, const std::vector<int64_t>& tokens,
    size_t vocab) const {
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < positions.size(); ++i) {
    auto hit = load(check_step_name(positions, tokens, i), vocab);
    if (!hit) return std::nullopt;
    out.push_back(std::move(*hit));
  }
  return out;
}

bool ReferenceCache::store(const std::string& step, const std::vector<float>& logits,
                           std::string* why) const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    if (why) *why = fmt::format("cannot create {}: {}", dir_.string(), ec.message());
    return false;
  }
  const fs::path path = entry_path(step);
  const fs::path tmp = fs::path(path.string() + fmt::format(".tmp{}", ::getpid()));
  const std::string header = key_ + "#" + step;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const uint64_t key_bytes = header.size(), count = logits.size();
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(&key_bytes), 8);
    out.write(header.data(), std::streamsize(key_bytes));
    out.write(reinterpret_cast<const char*>(&count), 8);
    out.write(reinterpret_cast<const char*>(logits.data()),
              std::streamsize(logits.size() * sizeof(float)));
    if (!out.flush()) {
      if (why) *why = fmt::format("cannot write {}", tmp.string());
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    if (why) *why = fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message());
    fs::remove(tmp, ec);
    return false;
  }
  return true;
}

ReferenceCheckLogits reference_check_logits(const Checkpoint& checkpoint, Program plain,
                                            const std::vector<int64_t>& positions,
                                            const std::vector<int64_t>& tokens,
                                            const ReferenceCache* cache, double step_timeout_s) {
  ReferenceCheckLogits out;
  const size_t vocab = size_t(checkpoint.config().vocab_size);
  if (cache)
    if (auto hits = cache->load_all(positions, tokens, vocab)) {
      out.logits = std::move(*hits);
      out.from_cache = true;
      return out;
    }
  ReferenceDecoder ref(checkpoint, std::move(plain));
  ref.step_timeout_s = step_timeout_s;
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] != ref.position()) ref.seek(positions[i], uint64_t(positions[i]) + 1);
    out.logits.push_back(ref.step(tokens[i]));
    if (std::string why; cache &&
        !cache->store(check_step_name(positions, tokens, i), out.logits.back(), &why) &&
        out.not_kept.empty())
      out.not_kept = why;
  }
  return out;
}

}  // namespace amk::eval
