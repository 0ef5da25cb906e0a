// Building a Tokenizer from a GGUF file's tokenizer metadata (GgufVocab). "gpt2" vocabularies are
// byte-level BPE split by the regex list llama.cpp uses for the `pre` name; "llama" ones are
// SentencePiece BPE over the scores. Control and user-defined tokens are matched in text as
// added tokens (control ones special), as llama.cpp does when it parses special tokens.
#include <fmt/format.h>

#include "amk/tokenizer.h"
#include "model/strict_json.h"  // quote_name
#include "tokenizer/bpe_model.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/sentencepiece_bpe.h"
#include "tokenizer/utf8.h"

namespace amk {

namespace {

using namespace tokenizer_detail;
using model_detail::quote_name;

// The word-splitting regexes, each applied to the pieces the previous one left.
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The regex list for a `tokenizer.ggml.pre` name, or nothing when the name is unknown.
std::optional<std::vector<std::string_view>> split_regexes_for(const std::string& pre) {
  using List = std::vector<std::string_view>;
  if (pre == "default" || pre == "gpt2" || pre == "gpt-2" || pre == "mpt" || pre == "olmo" || pre == "jais")
    return List{kGpt2SplitRegex};
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "dbrx" || pre == "smaug-bpe")
    return List{kLlama3Regex};
  if (pre == "qwen2" || pre == "stablelm2" || pre == "deepseek-r1-qwen") return List{kQwen2Regex};
  // Digits one by one first, then GPT-2's split.
  if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r" ||
      pre == "codeshell" || pre == "exaone")
    return List{R"(\p{N})", kGpt2SplitRegex};
  return std::nullopt;
}

GgufTokenType type_of(const GgufVocab& v, size_t i) {
  if (v.token_types.empty()) return GgufTokenType::Normal;
  return static_cast<GgufTokenType>(v.token_types[i]);
}

void check_shape(const GgufVocab& v, const std::string& name) {
  if (v.tokens.empty()) throw TokenizerError(name + ": the vocabulary has no tokens");
  if (v.tokens.size() > kMaxVocabSize)
    throw TokenizerError(fmt::format("{}: {} tokens is over the {} limit", name, v.tokens.size(), kMaxVocabSize));
  if (!v.scores.empty() && v.scores.size() != v.tokens.size())
    throw TokenizerError(fmt::format("{}: {} scores for {} tokens", name, v.scores.size(), v.tokens.size()));
  if (!v.token_types.empty() && v.token_types.size() != v.tokens.size())
    throw TokenizerError(fmt::format("{}: {} token types for {} tokens", name, v.token_types.size(), v.tokens.size()));
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.tokens[i].empty()) throw TokenizerError(fmt::format("{}: token {} is empty", name, i));
    if (!is_valid_utf8(v.tokens[i])) throw TokenizerError(fmt::format("{}: token {} is not valid UTF-8", name, i));
    if (!v.token_types.empty() && (v.token_types[i] < 0 || v.token_types[i] > 6))
      throw TokenizerError(fmt::format("{}: token {} has unknown type {}", name, i, v.token_types[i]));
  }
  for (const auto& [what, id] : {std::pair{"bos", v.bos_id}, std::pair{"eos", v.eos_id}, std::pair{"unk", v.unk_id}})
    if (id && (*id < 0 || static_cast<size_t>(*id) >= v.tokens.size()))
      throw TokenizerError(fmt::format("{}: {} id {} is outside the {} tokens", name, what, *id, v.tokens.size()));
}

std::vector<AddedToken> control_and_user_defined(const GgufVocab& v) {
  std::vector<AddedToken> added;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const GgufTokenType t = type_of(v, i);
    if (t != GgufTokenType::Control && t != GgufTokenType::UserDefined) continue;
    AddedToken a;
    a.content = v.tokens[i];
    a.id = static_cast<int32_t>(i);
    a.special = t == GgufTokenType::Control;
    added.push_back(std::move(a));
  }
  return added;
}

}  // namespace

Tokenizer Tokenizer::from_gguf_vocab(const GgufVocab& v, std::string_view name_view) {
  const std::string name(name_view);
  check_shape(v, name);
  auto p = std::make_shared<Pipeline>();
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab.emplace_back(v.tokens[i], static_cast<int32_t>(i));
  p->added = AddedVocabulary(control_and_user_defined(v));

  if (v.model == "gpt2") {
    const auto regexes = split_regexes_for(v.pre);
    if (!regexes)
      throw TokenizerError(fmt::format("{}: pre-tokenizer {} is not supported (known: default, gpt2, llama-bpe, "
                                       "qwen2, smollm, starcoder, ...)", name, quote_name(v.pre)));
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const std::string_view r : *regexes)
      steps.push_back(std::make_unique<SplitPreTokenizer>(Pattern::regex(r), SplitBehavior::Isolated, false));
    steps.push_back(std::make_unique<ByteLevelPreTokenizer>(false, false));
    p->pre_tokenizer = std::make_unique<SequencePreTokenizer>(std::move(steps));
    // Qwen's tokenizer.json normalizes to NFC before splitting; llama.cpp skips that step, and so
    // differs from the model's own tokenizer on decomposed text. AMK follows the model.
    if (v.pre == "qwen2" || v.pre == "deepseek-r1-qwen")
      p->normalizer = std::make_unique<UnicodeNormalizer>(UnicodeForm::NFC);
    StringMap<int32_t> model_vocab;
    for (const auto& [t, id] : vocab) model_vocab.try_emplace(t, id);
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(v.merges.size());
    for (size_t i = 0; i < v.merges.size(); ++i) {
      const std::string& m = v.merges[i];
      const size_t space = m.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == m.size() || m.find(' ', space + 1) != std::string::npos)
        throw TokenizerError(fmt::format("{}: merge {} {} is not two tokens separated by one space", name, i, quote_name(m)));
      merges.emplace_back(m.substr(0, space), m.substr(space + 1));
    }
    BpeOptions options;
    options.unk_id = v.unk_id;
    // llama.cpp takes a word found whole in a Llama 3 vocabulary as it is, as newer Llama 3
    // tokenizer.json files ask with ignore_merges.
    options.ignore_merges = v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3";
    try {
      p->model = std::make_unique<BpeModel>(std::move(model_vocab), merges, options);
    } catch (const TokenizerError& e) {
      throw TokenizerError(name + ": " + e.what());
    }
    p->decoder = std::make_unique<ByteLevelDecoder>();
    p->description = fmt::format("byte-level BPE (GGUF, pre {})", v.pre);
  } else if (v.model == "llama") {
    std::vector<SentencePieceEntry> pieces(v.tokens.size());
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      pieces[i].piece = v.tokens[i];
      pieces[i].score = v.scores.empty() ? 0.0f : v.scores[i];
      using Kind = SentencePieceEntry::Kind;
      switch (type_of(v, i)) {
        case GgufTokenType::Unknown: pieces[i].kind = Kind::Unknown; break;
        case GgufTokenType::Control: pieces[i].kind = Kind::Control; break;
        case GgufTokenType::UserDefined: pieces[i].kind = Kind::UserDefined; break;
        case GgufTokenType::Unused: pieces[i].kind = Kind::Unused; break;
        case GgufTokenType::Byte: pieces[i].kind = Kind::Byte; break;
        default: pieces[i].kind = Kind::Normal; break;
      }
    }
    // llama.cpp prefixes a space to each run of text: at the start and after each special token.
    p->normalizer = std::make_unique<SentencePieceNormalizer>(v.add_space_prefix, false, true);
    p->model = std::make_unique<SentencePieceBpe>(pieces, v.unk_id, /*byte_fallback=*/true,
                                                  /*match_user_defined=*/false);
    p->decoder = make_sentencepiece_decoder(v.add_space_prefix);
    p->description = "SentencePiece BPE (GGUF)";
  } else {
    throw TokenizerError(fmt::format("{}: tokenizer model {} is not supported (gpt2 or llama)", name, quote_name(v.model)));
  }
  index_vocabulary(*p, vocab);
  if (v.add_bos && v.bos_id) p->prefix_ids = {*v.bos_id};
  if (v.add_eos && v.eos_id) p->suffix_ids = {*v.eos_id};
  return Tokenizer(std::move(p));
}

}  // namespace amk
