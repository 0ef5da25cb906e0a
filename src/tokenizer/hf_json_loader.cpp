// Building a Tokenizer from a Hugging Face tokenizer.json. Every field the pipeline uses is
// checked for type and range; a component type this reader does not implement is refused by name
// rather than skipped, so a tokenizer is never silently different from the file.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "amk/tokenizer.h"
#include "model/strict_json.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/utf8.h"

namespace amk {

namespace {

using json = nlohmann::json;
using model_detail::json_type_word;
using model_detail::quote_name;
using namespace tokenizer_detail;

// Nesting of the components (Sequence in Sequence ...) beyond this is refused: real files nest two.
constexpr int kMaxComponentDepth = 16;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw TokenizerError(where + ": " + what);
}

const json* field(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const json& obj, const char* key, bool fallback, const std::string& where) {
  const json* v = field(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) fail(where, fmt::format("'{}' must be true or false, got {}", key, json_type_word(*v)));
  return v->get<bool>();
}

std::string get_string(const json& obj, const char* key, const std::string& where,
                       std::optional<std::string> fallback = std::nullopt) {
  const json* v = field(obj, key);
  if (v == nullptr) {
    if (fallback) return *fallback;
    fail(where, fmt::format("'{}' is missing", key));
  }
  if (!v->is_string()) fail(where, fmt::format("'{}' must be a string, got {}", key, json_type_word(*v)));
  const auto& s = v->get_ref<const std::string&>();
  if (!is_valid_utf8(s)) fail(where, fmt::format("'{}' is not valid UTF-8", key));
  return s;
}

uint64_t get_count(const json& obj, const char* key, uint64_t fallback, uint64_t max, const std::string& where) {
  const json* v = field(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_number_unsigned() || v->get<uint64_t>() > max)
    fail(where, fmt::format("'{}' must be an integer from 0 to {}, got {}", key, max, v->dump()));
  return v->get<uint64_t>();
}

int32_t as_id(const json& v, const std::string& where) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() >= kMaxVocabSize)
    fail(where, fmt::format("a token id must be an integer from 0 to {}, got {}", kMaxVocabSize - 1,
                            v.dump()));
  return static_cast<int32_t>(v.get<uint64_t>());
}

const std::string& type_of(const json& component, const std::string& where) {
  if (!component.is_object()) fail(where, fmt::format("must be an object, got {}", json_type_word(component)));
  const json* t = field(component, "type");
  if (t == nullptr || !t->is_string()) fail(where, "has no 'type' string");
  return t->get_ref<const std::string&>();
}

// {"String": "..."} or {"Regex": "..."}.
Pattern parse_pattern(const json& obj, const std::string& where) {
  const json* p = field(obj, "pattern");
  if (p == nullptr || !p->is_object() || p->size() != 1)
    fail(where, "'pattern' must be {\"String\": ...} or {\"Regex\": ...}");
  if (p->contains("String")) return Pattern::literal(get_string(*p, "String", where + ".pattern"));
  if (p->contains("Regex")) {
    try {
      return Pattern::regex(get_string(*p, "Regex", where + ".pattern"));
    } catch (const TokenizerError& e) {
      fail(where, e.what());
    }
  }
  fail(where, "'pattern' must be {\"String\": ...} or {\"Regex\": ...}");
}

std::unique_ptr<Normalizer> parse_normalizer(const json& n, const std::string& where, int depth) {
  if (depth > kMaxComponentDepth) fail(where, "components nest too deeply");
  const std::string& type = type_of(n, where);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(get_string(n, "prepend", where));
  if (type == "Replace")
    return std::make_unique<ReplaceNormalizer>(parse_pattern(n, where), get_string(n, "content", where));
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(get_bool(n, "strip_left", true, where),
                                             get_bool(n, "strip_right", true, where));
  if (type == "Sequence") {
    const json* list = field(n, "normalizers");
    if (list == nullptr || !list->is_array()) fail(where, "a Sequence needs a 'normalizers' array");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < list->size(); ++i)
      steps.push_back(parse_normalizer((*list)[i], fmt::format("{}.normalizers[{}]", where, i), depth + 1));
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  fail(where, fmt::format("normalizer type {} is not supported", quote_name(type)));
}

SplitBehavior parse_behavior(const json& obj, const std::string& where) {
  const std::string b = get_string(obj, "behavior", where);
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  fail(where, fmt::format("unknown split behavior {}", quote_name(b)));
}

// The replacement character of a Metaspace step (one character, usually "▁").
std::string metaspace_replacement(const json& obj, const std::string& where) {
  const std::string r = get_string(obj, "replacement", where, std::string(kMetaspace));
  if (r.empty() || utf8_sequence_length(r, 0) != r.size())
    fail(where, "'replacement' must be one character");
  return r;
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& p, const std::string& where, int depth) {
  if (depth > kMaxComponentDepth) fail(where, "components nest too deeply");
  const std::string& type = type_of(p, where);
  if (type == "Split")
    return std::make_unique<SplitPreTokenizer>(parse_pattern(p, where), parse_behavior(p, where),
                                               get_bool(p, "invert", false, where));
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(get_bool(p, "add_prefix_space", true, where),
                                                   get_bool(p, "use_regex", true, where));
  if (type == "Digits") return make_digits_pre_tokenizer(get_bool(p, "individual_digits", false, where));
  if (type == "Metaspace") {
    MetaspacePreTokenizer::Prepend prepend = MetaspacePreTokenizer::Prepend::Always;
    if (const json* scheme = field(p, "prepend_scheme")) {
      const std::string s = get_string(p, "prepend_scheme", where);
      if (s == "always") prepend = MetaspacePreTokenizer::Prepend::Always;
      else if (s == "first") prepend = MetaspacePreTokenizer::Prepend::First;
      else if (s == "never") prepend = MetaspacePreTokenizer::Prepend::Never;
      else fail(where, fmt::format("unknown prepend_scheme {}", quote_name(s)));
      (void)scheme;
    } else if (!get_bool(p, "add_prefix_space", true, where)) {
      prepend = MetaspacePreTokenizer::Prepend::Never;
    }
    return std::make_unique<MetaspacePreTokenizer>(metaspace_replacement(p, where), prepend,
                                                   get_bool(p, "split", true, where));
  }
  if (type == "Whitespace")
    return std::make_unique<SplitPreTokenizer>(Pattern::regex(R"(\w+|[^\w\s]+)"), SplitBehavior::Removed, true);
  if (type == "WhitespaceSplit")
    return std::make_unique<SplitPreTokenizer>(Pattern::regex(R"(\s+)"), SplitBehavior::Removed, false);
  if (type == "Sequence") {
    const json* list = field(p, "pretokenizers");
    if (list == nullptr || !list->is_array()) fail(where, "a Sequence needs a 'pretokenizers' array");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < list->size(); ++i)
      steps.push_back(parse_pre_tokenizer((*list)[i], fmt::format("{}.pretokenizers[{}]", where, i), depth + 1));
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  fail(where, fmt::format("pre_tokenizer type {} is not supported", quote_name(type)));
}

std::unique_ptr<Decoder> parse_decoder(const json& d, const std::string& where, int depth) {
  if (depth > kMaxComponentDepth) fail(where, "components nest too deeply");
  const std::string& type = type_of(d, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    const json* p = field(d, "pattern");
    if (p == nullptr || !p->is_object() || !p->contains("String"))
      fail(where, "a Replace decoder needs a {\"String\": ...} pattern");
    return std::make_unique<ReplaceDecoder>(get_string(*p, "String", where), get_string(d, "content", where));
  }
  if (type == "Strip")
    return std::make_unique<StripDecoder>(get_string(d, "content", where),
                                          get_count(d, "start", 0, 1 << 20, where),
                                          get_count(d, "stop", 0, 1 << 20, where));
  if (type == "Metaspace") {
    bool strip = get_bool(d, "add_prefix_space", true, where);
    if (field(d, "prepend_scheme") != nullptr) strip = get_string(d, "prepend_scheme", where) != "never";
    return std::make_unique<MetaspaceDecoder>(metaspace_replacement(d, where), strip);
  }
  if (type == "Sequence") {
    const json* list = field(d, "decoders");
    if (list == nullptr || !list->is_array()) fail(where, "a Sequence needs a 'decoders' array");
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < list->size(); ++i)
      steps.push_back(parse_decoder((*list)[i], fmt::format("{}.decoders[{}]", where, i), depth + 1));
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  fail(where, fmt::format("decoder type {} is not supported", quote_name(type)));
}

// The ids a TemplateProcessing's special token stands for.
std::vector<int32_t> template_special_ids(const json& processor, const std::string& name,
                                          const std::string& where) {
  const json* specials = field(processor, "special_tokens");
  const json* entry = specials != nullptr && specials->is_object() ? field(*specials, name.c_str()) : nullptr;
  if (entry == nullptr || !entry->is_object())
    fail(where, fmt::format("special token {} is not in 'special_tokens'", quote_name(name)));
  const json* ids = field(*entry, "ids");
  if (ids == nullptr || !ids->is_array()) fail(where, fmt::format("special token {} has no 'ids'", quote_name(name)));
  std::vector<int32_t> out;
  for (const json& id : *ids) out.push_back(as_id(id, where));
  return out;
}

void parse_post_processor(const json& p, const std::string& where, int depth, Pipeline& out) {
  if (depth > kMaxComponentDepth) fail(where, "components nest too deeply");
  const std::string& type = type_of(p, where);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    const json* list = field(p, "processors");
    if (list == nullptr || !list->is_array()) fail(where, "a Sequence needs a 'processors' array");
    for (size_t i = 0; i < list->size(); ++i)
      parse_post_processor((*list)[i], fmt::format("{}.processors[{}]", where, i), depth + 1, out);
    return;
  }
  if (type == "TemplateProcessing") {
    const json* single = field(p, "single");
    if (single == nullptr || !single->is_array()) fail(where, "TemplateProcessing needs a 'single' array");
    bool seen_sequence = false;
    for (const json& item : *single) {
      if (!item.is_object() || item.size() != 1) fail(where, "a template item must be one SpecialToken or Sequence");
      if (const json* seq = field(item, "Sequence")) {
        if (seen_sequence) fail(where, "the single template holds the sequence twice");
        (void)seq;
        seen_sequence = true;
      } else if (const json* special = field(item, "SpecialToken")) {
        const std::string name = get_string(*special, "id", where);
        const std::vector<int32_t> ids = template_special_ids(p, name, where);
        auto& target = seen_sequence ? out.suffix_ids : out.prefix_ids;
        target.insert(target.end(), ids.begin(), ids.end());
      } else {
        fail(where, "a template item must be one SpecialToken or Sequence");
      }
    }
    if (!seen_sequence) fail(where, "the single template has no Sequence");
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const json* v = field(p, key);
      if (v == nullptr || !v->is_array() || v->size() != 2) fail(where, fmt::format("'{}' must be [token, id]", key));
      (key[0] == 'c' ? out.prefix_ids : out.suffix_ids).push_back(as_id((*v)[1], where));
    }
    return;
  }
  fail(where, fmt::format("post_processor type {} is not supported", quote_name(type)));
}

std::vector<std::pair<std::string, std::string>> parse_merges(const json& merges, const std::string& where) {
  if (!merges.is_array()) fail(where, fmt::format("'merges' must be an array, got {}", json_type_word(merges)));
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {
      // "a b": the two sides, split at the one space (a space inside a token is written Ġ or ▁).
      const auto& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos || space == 0 ||
          space + 1 == s.size())
        fail(where, fmt::format("merge {} {} is not two tokens separated by one space", i, quote_name(s)));
      out.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail(where, fmt::format("merge {} must be \"a b\" or [\"a\", \"b\"], got {}", i, json_type_word(m)));
    }
  }
  return out;
}

std::vector<AddedToken> parse_added_tokens(const json* list, const std::string& where) {
  std::vector<AddedToken> out;
  if (list == nullptr) return out;
  if (!list->is_array()) fail(where, "'added_tokens' must be an array");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string at = fmt::format("{}[{}]", where, i);
    const json& t = (*list)[i];
    if (!t.is_object()) fail(at, "must be an object");
    AddedToken a;
    const json* id = field(t, "id");
    if (id == nullptr) fail(at, "has no 'id'");
    a.id = as_id(*id, at);
    a.content = get_string(t, "content", at);
    if (a.content.empty()) fail(at, "'content' is empty");
    a.special = get_bool(t, "special", false, at);
    a.lstrip = get_bool(t, "lstrip", false, at);
    a.rstrip = get_bool(t, "rstrip", false, at);
    a.single_word = get_bool(t, "single_word", false, at);
    a.normalized = get_bool(t, "normalized", !a.special, at);
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

Tokenizer Tokenizer::from_hf_json(std::string_view json_text, std::string_view name) {
  const std::string file(name);
  json doc;
  try {
    doc = model_detail::parse_untrusted_json(json_text);
  } catch (const std::exception& e) {
    fail(file, fmt::format("not valid JSON: {}", e.what()));
  }
  if (!doc.is_object()) fail(file, "the top level must be an object");
  auto p = std::make_shared<Pipeline>();

  const json* model = field(doc, "model");
  if (model == nullptr || !model->is_object()) fail(file, "has no 'model' object");
  const std::string where = file + ": model";
  const std::string type = get_string(*model, "type", where, std::string("BPE"));
  if (type != "BPE") fail(where, fmt::format("model type {} is not supported (BPE only)", quote_name(type)));
  if (const json* d = field(*model, "dropout"); d != nullptr && (!d->is_number() || d->get<double>() != 0.0))
    fail(where, "BPE dropout is not supported (it makes encoding random)");

  const json* vocab = field(*model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) fail(where, "'vocab' must be an object of token: id");
  if (vocab->size() > kMaxVocabSize) fail(where, fmt::format("{} vocabulary entries is over the limit", vocab->size()));
  std::vector<std::pair<std::string, int32_t>> entries;
  StringMap<int32_t> model_vocab;
  entries.reserve(vocab->size());
  model_vocab.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    if (!is_valid_utf8(token)) fail(where, fmt::format("vocabulary entry {} is not valid UTF-8", quote_name(token)));
    entries.emplace_back(token, as_id(id, fmt::format("{}: vocab {}", where, quote_name(token))));
    model_vocab.emplace(token, entries.back().second);
  }
  BpeOptions options;
  options.fuse_unk = get_bool(*model, "fuse_unk", false, where);
  options.byte_fallback = get_bool(*model, "byte_fallback", false, where);
  options.ignore_merges = get_bool(*model, "ignore_merges", false, where);
  options.continuing_subword_prefix = get_string(*model, "continuing_subword_prefix", where, std::string());
  options.end_of_word_suffix = get_string(*model, "end_of_word_suffix", where, std::string());
  if (field(*model, "unk_token") != nullptr) {
    const std::string unk = get_string(*model, "unk_token", where);
    const auto it = model_vocab.find(unk);
    if (it == model_vocab.end()) fail(where, fmt::format("unk_token {} is not in the vocabulary", quote_name(unk)));
    options.unk_id = it->second;
  }
  const json* merges = field(*model, "merges");
  const auto merge_list = merges == nullptr ? std::vector<std::pair<std::string, std::string>>{}
                                            : parse_merges(*merges, where);
  try {
    p->model = std::make_unique<BpeModel>(std::move(model_vocab), merge_list, options);
  } catch (const TokenizerError& e) {
    fail(where, e.what());
  }

  if (const json* n = field(doc, "normalizer")) p->normalizer = parse_normalizer(*n, file + ": normalizer", 0);
  std::vector<AddedToken> added = parse_added_tokens(field(doc, "added_tokens"), file + ": added_tokens");
  // A normalized token is looked for in normalized text, so in its normalized form.
  if (p->normalizer)
    for (AddedToken& t : added)
      if (t.normalized) t.match = p->normalizer->normalize(t.content);
  p->added = AddedVocabulary(std::move(added));
  if (const json* t = field(doc, "pre_tokenizer")) p->pre_tokenizer = parse_pre_tokenizer(*t, file + ": pre_tokenizer", 0);
  if (const json* d = field(doc, "decoder")) p->decoder = parse_decoder(*d, file + ": decoder", 0);
  if (const json* pp = field(doc, "post_processor")) parse_post_processor(*pp, file + ": post_processor", 0, *p);
  try {
    index_vocabulary(*p, entries);
  } catch (const TokenizerError& e) {
    fail(file, e.what());
  }
  for (const int32_t id : p->prefix_ids)
    if (static_cast<size_t>(id) >= p->id_to_token.size() || p->id_to_token[id].empty())
      fail(file + ": post_processor", fmt::format("token id {} is not in the vocabulary", id));
  for (const int32_t id : p->suffix_ids)
    if (static_cast<size_t>(id) >= p->id_to_token.size() || p->id_to_token[id].empty())
      fail(file + ": post_processor", fmt::format("token id {} is not in the vocabulary", id));
  p->description = options.byte_fallback ? "BPE with byte fallback (tokenizer.json)"
                   : dynamic_cast<const ByteLevelDecoder*>(p->decoder.get()) != nullptr
                       ? "byte-level BPE (tokenizer.json)"
                       : "BPE (tokenizer.json)";
  return Tokenizer(std::move(p));
}

}  // namespace amk
