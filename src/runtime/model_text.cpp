// load_model_text: a model's tokenizer, chat template and special-token strings (amk/model_text.h).
#include "amk/model_text.h"

#include <fmt/format.h>

#include <algorithm>

#include "amk/chat_template.h"
#include "amk/gguf.h"
#include "model/strict_json.h"

namespace amk {

namespace {

// tokenizer_config.json is kilobytes; its templates tens of kilobytes.
constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;

void add_unique(std::vector<int64_t>& ids, int64_t id) {
  if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

// A special token in tokenizer_config.json: "<s>", or {"content": "<s>", ...}.
std::optional<std::string> special_token(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return std::nullopt;  // null, or a shape transformers would not accept either: no token
}

ModelText from_gguf(const std::filesystem::path& path) {
  GgufFile file = [&] {
    try {
      return GgufFile::open(path);
    } catch (const GgufError& e) {
      throw TokenizerError(e.what());
    }
  }();
  const GgufContents& g = file.contents();
  const GgufVocab vocab = gguf_vocab_from(g);
  ModelText text{Tokenizer::from_gguf_vocab(vocab, path.string()), std::nullopt, std::nullopt,
                 std::nullopt, {}, path.string()};
  try {
    if (const auto t = g.opt_string("tokenizer.chat_template")) text.chat_template = std::string(*t);
    if (const auto eot = g.opt_int("tokenizer.ggml.eot_token_id"); eot && *eot >= 0 &&
                                                                    *eot < text.tokenizer.vocab_size())
      add_unique(text.eos_ids, *eot);
  } catch (const GgufError& e) {
    throw TokenizerError(e.what());
  }
  const auto entry = [&](const std::optional<int32_t>& id) -> std::optional<std::string> {
    if (!id || *id >= text.tokenizer.vocab_size()) return std::nullopt;
    return text.tokenizer.token_text(*id);
  };
  text.bos_token = entry(vocab.bos_id);
  text.eos_token = entry(vocab.eos_id);
  if (vocab.eos_id && *vocab.eos_id < text.tokenizer.vocab_size()) add_unique(text.eos_ids, *vocab.eos_id);
  return text;
}

}  // namespace

ModelText load_model_text(const std::filesystem::path& model) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(model, ec)) {
    if (model.extension() == ".gguf" || looks_like_gguf(model)) return from_gguf(model);
    throw TokenizerError(fmt::format("{}: expected a model folder or a .gguf file", model.string()));
  }
  ModelText text{Tokenizer::from_path(model), std::nullopt, std::nullopt, std::nullopt, {}, model.string()};
  const fs::path config_path = model / "tokenizer_config.json";
  nlohmann::json config = nlohmann::json::object();
  std::string config_text;
  if (fs::exists(config_path, ec)) {
    try {
      config_text = model_detail::read_text_file(config_path, kMaxConfigBytes);
      config = model_detail::parse_untrusted_json(config_text);
    } catch (const std::exception& e) {
      throw TokenizerError(fmt::format("{}: {}", config_path.string(), e.what()));
    }
    if (!config.is_object()) throw TokenizerError(fmt::format("{}: expected a JSON object", config_path.string()));
    text.bos_token = special_token(config, "bos_token");
    text.eos_token = special_token(config, "eos_token");
    if (text.eos_token)
      if (const auto id = text.tokenizer.token_id(*text.eos_token)) add_unique(text.eos_ids, *id);
  }
  const fs::path jinja = model / "chat_template.jinja";
  if (fs::exists(jinja, ec)) {
    try {
      text.chat_template = model_detail::read_text_file(jinja, kMaxConfigBytes);
      text.source = jinja.string();
    } catch (const std::exception& e) {
      throw TokenizerError(fmt::format("{}: {}", jinja.string(), e.what()));
    }
  } else if (config.contains("chat_template")) {
    text.chat_template = chat_template_from_tokenizer_config(config_text);
    text.source = config_path.string();
  }
  return text;
}

}  // namespace amk
