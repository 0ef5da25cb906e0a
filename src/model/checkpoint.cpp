// Opening a Hugging Face checkpoint folder and checking it as a whole.
#include "amk/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "amk/gguf.h"
#include "model/checkpoint_checks.h"
#include "model/strict_json.h"

namespace amk {
namespace {

using model_detail::json_type_word;
using model_detail::quote_name;
using nlohmann::json;

constexpr std::string_view kSingleFile = "model.safetensors";
constexpr std::string_view kIndexFile = "model.safetensors.index.json";

std::string shape_text(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

json read_json(const std::filesystem::path& path) {
  try {
    return model_detail::parse_untrusted_json(model_detail::read_text_file(path));
  } catch (const std::runtime_error& e) {
    throw CheckpointError(fmt::format("{}: {}", path.string(), e.what()));
  }
}

// A shard named by the index must be a plain relative path inside the folder: the index is
// input, and "../../elsewhere" or "/etc/x" would make the importer read files it was not given.
void check_shard_name(const std::filesystem::path& index_path, const std::string& tensor,
                      const std::string& shard) {
  const auto bad = [&](std::string_view why) {
    throw CheckpointError(fmt::format("{}: tensor {} maps to shard {}, which {}", index_path.string(),
                                      quote_name(tensor), quote_name(shard), why));
  };
  if (shard.empty()) bad("is empty");
  if (shard.find('\0') != std::string::npos) bad("contains a NUL byte");
  const std::filesystem::path p(shard);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory())
    bad("is an absolute path; shards must lie inside the checkpoint folder");
  for (const auto& part : p)
    if (part == "..") bad("escapes the checkpoint folder ('..'); shards must lie inside it");
}

std::vector<int64_t> token_ids(const json& obj, std::string_view key, const std::filesystem::path& file) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return {};
  std::vector<int64_t> out;
  const auto one = [&](const json& v) {
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
      throw CheckpointError(fmt::format("{}: {} must be a token id, a list of them or null, got {}",
                                        file.string(), key, it->dump()));
    out.push_back(v.get<int64_t>());
  };
  if (it->is_array()) {
    for (const json& v : *it) one(v);
  } else {
    one(*it);
  }
  return out;
}

GenerationConfig parse_generation_config(const std::filesystem::path& path) {
  const json doc = read_json(path);
  if (!doc.is_object())
    throw CheckpointError(
        fmt::format("{}: must be a JSON object, got {}", path.string(), json_type_word(doc)));
  GenerationConfig g;
  g.bos_token_ids = token_ids(doc, "bos_token_id", path);
  g.eos_token_ids = token_ids(doc, "eos_token_id", path);
  const auto pad = token_ids(doc, "pad_token_id", path);
  if (pad.size() > 1)
    throw CheckpointError(fmt::format("{}: pad_token_id must be one token id", path.string()));
  if (!pad.empty()) g.pad_token_id = pad[0];
  return g;
}

// weight_map as (tensor, shard) pairs; the shard names are checked.
std::vector<std::pair<std::string, std::string>> parse_index(const std::filesystem::path& path) {
  const json doc = read_json(path);
  if (!doc.is_object() || !doc.contains("weight_map"))
    throw CheckpointError(fmt::format("{}: must be a JSON object with a \"weight_map\"", path.string()));
  const json& map = doc["weight_map"];
  if (!map.is_object())
    throw CheckpointError(fmt::format("{}: weight_map must be an object (tensor -> shard file), got {}",
                                      path.string(), json_type_word(map)));
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [tensor, shard] : map.items()) {
    if (!shard.is_string())
      throw CheckpointError(fmt::format("{}: weight_map entry for tensor {} must be a file name, got {}",
                                        path.string(), quote_name(tensor), json_type_word(shard)));
    check_shard_name(path, tensor, shard.get<std::string>());
    out.emplace_back(tensor, shard.get<std::string>());
  }
  if (out.empty())
    throw CheckpointError(fmt::format("{}: weight_map lists no tensors", path.string()));
  return out;
}

// The layer indices N of the "model.layers.N." tensor names, sorted and distinct.
std::vector<int64_t> layer_indices(const std::vector<const TensorView*>& index) {
  constexpr std::string_view kPrefix = "model.layers.";
  std::vector<int64_t> layers;
  for (const TensorView* t : index) {
    const std::string_view name = t->name;
    if (!name.starts_with(kPrefix)) continue;
    const std::string_view rest = name.substr(kPrefix.size());
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
    if (ec != std::errc() || end == rest.data() || end == rest.data() + rest.size() || *end != '.')
      continue;
    if (layers.empty() || layers.back() != n) layers.push_back(n);
  }
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  return layers;
}

std::string dims_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace

namespace model_detail {

// config.json must describe the tensors the folder holds, before anything is sized by it: a
// num_hidden_layers below the checkpoint's would silently drop layers, one above it would lower
// (and allocate for) layers that do not exist, and the sizes that shape every buffer must match
// the tensors that carry them. Each mismatch names the config field. Tensors that are absent are
// left to the lookups that need them ("missing tensor ...").
void check_config_against_tensors(const ModelConfig& c, const std::vector<const TensorView*>& index,
                                  const std::string& where) {
  const auto bad = [&](std::string_view field, const std::string& what) {
    throw ModelConfigError(fmt::format("{}: {} {}", where, field, what));
  };
  const std::vector<int64_t> layers = layer_indices(index);
  const auto held = [&] {
    if (layers.empty()) return std::string("holds no model.layers.* tensors");
    return fmt::format("holds {} layer{} (model.layers.{} to model.layers.{})", layers.size(),
                       layers.size() == 1 ? "" : "s", layers.front(), layers.back());
  };
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i] != int64_t(i))
      bad("num_hidden_layers", fmt::format("is {}, but the checkpoint's layers are not numbered "
                                           "0, 1, ...: it {} with no model.layers.{}",
                                           c.num_hidden_layers, held(), i));
  if (int64_t(layers.size()) != c.num_hidden_layers)
    bad("num_hidden_layers", fmt::format("is {}, but the checkpoint {}", c.num_hidden_layers, held()));

  const auto find = [&](std::string_view name) -> const TensorView* {
    const auto it = std::lower_bound(index.begin(), index.end(), name,
                                     [](const TensorView* t, std::string_view n) { return t->name < n; });
    return it != index.end() && (*it)->name == name ? *it : nullptr;
  };
  // (tensor, dimension, the config's value, the fields that give it)
  struct Dim {
    std::string_view tensor;
    size_t dim;
    int64_t want;
    std::string fields;
  };
  const std::vector<Dim> dims = {
      {"model.embed_tokens.weight", 0, c.vocab_size, "vocab_size is"},
      {"model.embed_tokens.weight", 1, c.hidden_size, "hidden_size is"},
      {"model.layers.0.self_attn.q_proj.weight", 0, c.q_dim(),
       fmt::format("num_attention_heads {} x head_dim {} =", c.num_attention_heads, c.head_dim)},
      {"model.layers.0.self_attn.k_proj.weight", 0, c.kv_dim(),
       fmt::format("num_key_value_heads {} x head_dim {} =", c.num_key_value_heads, c.head_dim)},
      {"model.layers.0.mlp.gate_proj.weight", 0, c.intermediate_size, "intermediate_size is"},
  };
  for (const Dim& d : dims) {
    const TensorView* t = find(d.tensor);
    if (t == nullptr || t->shape.size() <= d.dim || t->shape[d.dim] == d.want) continue;
    bad(d.fields, fmt::format("{}, but tensor {} has shape {} (dimension {} is {})", d.want,
                              quote_name(d.tensor), dims_text(t->shape), d.dim, t->shape[d.dim]));
  }
}

}  // namespace model_detail

Checkpoint Checkpoint::open(const std::filesystem::path& folder) {
  std::error_code ec;
  // A single .gguf file (by name or by its magic) rather than a folder.
  if (!std::filesystem::is_directory(folder, ec) &&
      (folder.extension() == ".gguf" || looks_like_gguf(folder)))
    return open_gguf(folder);
  Checkpoint ck;
  ck.folder_ = folder;
  const std::string where = folder.string();
  if (!std::filesystem::is_directory(folder, ec))
    throw CheckpointError(fmt::format("{}: not a checkpoint folder ({})", where,
                                      ec ? ec.message() : "not a directory"));

  const auto config_path = folder / "config.json";
  if (!std::filesystem::exists(config_path, ec))
    throw CheckpointError(fmt::format("{}: no config.json", where));
  ck.config_ = load_model_config(config_path);

  const auto gen_path = folder / "generation_config.json";
  if (std::filesystem::exists(gen_path, ec)) ck.generation_ = parse_generation_config(gen_path);

  // transformers prefers the single file when both exist; so do we.
  const auto single = folder / kSingleFile;
  const auto index_path = folder / kIndexFile;
  if (std::filesystem::exists(single, ec)) {
    ck.files_.push_back(SafetensorsFile::open(single));
  } else if (std::filesystem::exists(index_path, ec)) {
    ck.sharded_ = true;
    const auto entries = parse_index(index_path);
    std::map<std::string, size_t> shard_of_name;  // sorted, so files_ is sorted by name
    for (const auto& [tensor, shard] : entries) shard_of_name.emplace(shard, 0);
    for (auto& [shard, idx] : shard_of_name) {
      const auto shard_path = folder / shard;
      if (!std::filesystem::exists(shard_path, ec))
        throw CheckpointError(fmt::format("{}: shard {} listed in {} does not exist", where,
                                          quote_name(shard), kIndexFile));
      idx = ck.files_.size();
      ck.files_.push_back(SafetensorsFile::open(shard_path));
    }
    for (const auto& [tensor, shard] : entries)
      if (!ck.files_[shard_of_name.at(shard)].find(tensor))
        throw CheckpointError(fmt::format("{}: {} lists tensor {} in shard {}, which does not contain it",
                                          where, kIndexFile, quote_name(tensor), quote_name(shard)));
  } else {
    const bool bin = std::filesystem::exists(folder / "pytorch_model.bin", ec) ||
                     std::filesystem::exists(folder / "pytorch_model.bin.index.json", ec);
    throw CheckpointError(fmt::format("{}: no {} or {}{}", where, kSingleFile, kIndexFile,
                                      bin ? " (only PyTorch .bin weights, which AMK does not read; "
                                            "convert them to safetensors)"
                                          : ""));
  }

  for (const SafetensorsFile& f : ck.files_)
    for (const TensorView& t : f.tensors()) ck.index_.push_back(&t);
  std::stable_sort(ck.index_.begin(), ck.index_.end(),
                   [](const TensorView* a, const TensorView* b) { return a->name < b->name; });
  for (size_t i = 1; i < ck.index_.size(); ++i)
    if (ck.index_[i]->name == ck.index_[i - 1]->name)
      throw CheckpointError(fmt::format("{}: tensor {} is in two shards, {} and {}", where,
                                        quote_name(ck.index_[i]->name), ck.index_[i - 1]->file,
                                        ck.index_[i]->file));
  model_detail::check_config_against_tensors(ck.config_, ck.index_, config_path.string());
  return ck;
}

std::vector<int64_t> Checkpoint::eos_token_ids() const {
  if (generation_ && !generation_->eos_token_ids.empty()) return generation_->eos_token_ids;
  return config_.eos_token_ids;
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const TensorView* t : index_) names.push_back(t->name);
  return names;
}

const TensorView* Checkpoint::find(std::string_view name) const {
  const auto it = std::lower_bound(index_.begin(), index_.end(), name,
                                   [](const TensorView* t, std::string_view n) { return t->name < n; });
  return it != index_.end() && (*it)->name == name ? *it : nullptr;
}

const TensorView& Checkpoint::tensor(std::string_view name) const {
  if (const TensorView* t = find(name)) return *t;
  throw CheckpointError(fmt::format("{}: missing tensor {}", folder_.string(), quote_name(name)));
}

const TensorView& Checkpoint::tensor(std::string_view name, std::span<const int64_t> expected_shape) const {
  const TensorView& t = tensor(name);
  if (!std::equal(t.shape.begin(), t.shape.end(), expected_shape.begin(), expected_shape.end()))
    throw CheckpointError(fmt::format("{}: tensor {} has shape {}, expected {} (in {})",
                                      folder_.string(), quote_name(name), shape_text(t.shape),
                                      shape_text(expected_shape), t.file));
  return t;
}

}  // namespace amk
