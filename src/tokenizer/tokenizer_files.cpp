// Tokenizer::from_path: which file a path names, read under a size cap.
#include <fmt/format.h>

#include <filesystem>

#include "amk/gguf.h"
#include "amk/tokenizer.h"
#include "model/strict_json.h"  // read_text_file

namespace amk {

namespace {

// Real tokenizer.json files run to ~35 MB (Qwen's 11 MB, Gemma 3's 33 MB); the JSON tree costs
// several times the text, so the cap stays near that.
constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{64} << 20;

std::string read_capped(const std::filesystem::path& path) {
  try {
    return model_detail::read_text_file(path, kMaxTokenizerFileBytes);
  } catch (const std::exception& e) {
    throw TokenizerError(fmt::format("{}: {}", path.string(), e.what()));
  }
}

}  // namespace

Tokenizer Tokenizer::from_path(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / "tokenizer.json", ec)) return from_path(path / "tokenizer.json");
    if (fs::exists(path / "tokenizer.model", ec)) return from_path(path / "tokenizer.model");
    throw TokenizerError(fmt::format("{}: the folder has no tokenizer.json or tokenizer.model", path.string()));
  }
  if (!fs::exists(path, ec)) throw TokenizerError(fmt::format("{}: no such file", path.string()));
  // Before reading the file whole: a GGUF is gigabytes, and is memory-mapped instead.
  if (path.extension() == ".gguf" || looks_like_gguf(path)) return tokenizer_from_gguf(path);
  const std::string text = read_capped(path);
  // A tokenizer.json is a JSON object; anything else is taken for a SentencePiece ModelProto.
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return from_hf_json(text, path.string());
  return from_sentencepiece(std::as_bytes(std::span(text.data(), text.size())), path.string());
}

}  // namespace amk
