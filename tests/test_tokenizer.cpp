// Tokenizers against independent oracles: HF `tokenizers` on Llama 3.2's and Qwen3's
// tokenizer.json, `sentencepiece` on Mistral's .model files, and HF `tokenizers` built from the
// SmolLM2 GGUF's vocabulary (extracted with the `gguf` package). The oracles run in Python
// (AMK_PYTHON) over a committed multilingual corpus and seeded random Unicode; the real files
// come from AMK_ASSETS_DIR. Both are exported by scripts/test.sh; without them those tests skip.
// The rest (byte-level alphabet, UTF-8 repair, a hand-made tokenizer.json, malformed inputs)
// needs nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "amk/tokenizer.h"
#include "support/amk_command.h"
#include "support/temp_dir.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/protobuf_reader.h"
#include "tokenizer/utf8.h"

namespace {

namespace fs = std::filesystem;
using amk::GgufVocab;
using amk::Tokenizer;
using amk::TokenizerError;
using nlohmann::json;

// ---- helpers ----------------------------------------------------------------------------------

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

std::vector<std::string> read_jsonl_strings(const fs::path& p) {
  std::vector<std::string> out;
  std::ifstream f(p, std::ios::binary);
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) out.push_back(json::parse(line).get<std::string>());
  return out;
}

std::vector<std::string> corpus() {
  return read_jsonl_strings(fs::path(AMK_TESTDATA_DIR) / "tokenizer_corpus" / "corpus.jsonl");
}

// Seeded random strings over scripts, combining marks, emoji, ZWJ, variation selectors, skin tones
// and white space of every kind, so the splitting regexes, normalization and merges see
// combinations nobody wrote down. Only assigned code points, so Unicode version differences
// between the libraries stay out of it.
std::vector<std::string> random_unicode_strings(uint32_t seed, int count) {
  struct Range {
    char32_t lo, hi;
  };
  static const std::vector<Range> kRanges = {
      {0x20, 0x7E},     {0x20, 0x7E},     {0x20, 0x7E},     {0x30, 0x39},     {0x09, 0x0D},
      {0xA0, 0xFF},     {0x100, 0x17F},   {0x300, 0x36F},   {0x391, 0x3C9},   {0x410, 0x44F},
      {0x5D0, 0x5EA},   {0x621, 0x64A},   {0x660, 0x669},   {0x905, 0x939},   {0x93E, 0x94D},
      {0x966, 0x96F},   {0xE01, 0xE3A},   {0xE50, 0xE59},   {0x1100, 0x1112}, {0x1E00, 0x1EFF},
      {0x2000, 0x200D}, {0x2010, 0x2027}, {0x2070, 0x2079}, {0x2150, 0x2182}, {0x2460, 0x2473},
      {0x3000, 0x3002}, {0x3041, 0x3096}, {0x30A1, 0x30FA}, {0x4E00, 0x4FFF}, {0xAC00, 0xAD00},
      {0xFF01, 0xFF5E}, {0x1F300, 0x1F5FF}, {0x1F600, 0x1F64F}, {0x1F3FB, 0x1F3FF},
      {0x200D, 0x200D}, {0xFE0F, 0xFE0F}, {0x1D400, 0x1D433}, {0x20000, 0x20100},
      {0x27, 0x27},     {0x0A, 0x0A},     {0x20, 0x20},
      // Where regex engines and case folding disagree most easily: NEL, U+180E (white space to
      // PCRE2's \s but not to Unicode), line/paragraph separators, long s, Kelvin, dotted/dotless i.
      {0x85, 0x85},     {0x180E, 0x180E}, {0x2028, 0x2029}, {0x17F, 0x17F}, {0x212A, 0x212A},
      {0x130, 0x131}};
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    const int length = std::uniform_int_distribution<int>(1, 40)(rng);
    std::string s;
    for (int k = 0; k < length; ++k) {
      const Range& r = kRanges[std::uniform_int_distribution<size_t>(0, kRanges.size() - 1)(rng)];
      amk::tokenizer_detail::append_utf8(s, std::uniform_int_distribution<char32_t>(r.lo, r.hi)(rng));
    }
    out.push_back(s);
  }
  return out;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// Skips the calling test unless the oracle environment is there.
#define REQUIRE_ORACLES()                                                                        \
  do {                                                                                           \
    if (env("AMK_PYTHON") == nullptr) GTEST_SKIP() << "AMK_PYTHON is not set (scripts/test.sh sets it)"; \
    if (env("AMK_ASSETS_DIR") == nullptr)                                                        \
      GTEST_SKIP() << "AMK_ASSETS_DIR is not set (scripts/test.sh sets it)";                     \
  } while (0)

fs::path asset(const std::string& rel) { return fs::path(env("AMK_ASSETS_DIR")) / rel; }

struct TempDir : amk::testing::TempDir {
  TempDir() : amk::testing::TempDir("tokenizer") {}
};

std::string oracle_script() { return std::string(AMK_SOURCE_DIR) + "/tests/support/tokenizer_oracle.py"; }

// Runs the oracle script; fails the test (and returns false) if it does not succeed.
bool run_python(const std::vector<std::string>& args) {
  std::string cmd = amk::testing::shell_quote(env("AMK_PYTHON")) + " " + amk::testing::shell_quote(oracle_script());
  for (const std::string& a : args) cmd += " " + amk::testing::shell_quote(a);
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << "oracle failed: " << cmd;
  return rc == 0;
}

void write_jsonl(const fs::path& p, const std::vector<std::string>& texts) {
  std::string out;
  for (const std::string& t : texts) out += json(t).dump() + "\n";
  write_file(p, out);
}

// The oracle's answer for each text (null where it has none).
std::vector<json> oracle(const std::string& mode, const fs::path& source, const std::vector<std::string>& texts,
                         const TempDir& dir) {
  const fs::path in = dir.path() / "in.jsonl", out = dir.path() / "out.jsonl";
  write_jsonl(in, texts);
  if (!run_python({mode, source.string(), in.string(), out.string()})) return {};
  std::vector<json> results;
  std::ifstream f(out);
  for (std::string line; std::getline(f, line);) results.push_back(json::parse(line));
  EXPECT_EQ(results.size(), texts.size());
  return results;
}

std::string ids_text(const std::vector<int32_t>& ids) { return fmt::format("[{}]", fmt::join(ids, ", ")); }

struct Agreement {
  size_t compared = 0, ids_equal = 0, decode_equal = 0, round_trip = 0;
};

// Compares `tok` with the oracle on every text: ids (with and without the added specials), the
// decoding of the oracle's ids (with and without specials), and whether decode(encode(x)) == x
// agrees with the oracle's round trip. Prints the first few differences.
Agreement compare(const Tokenizer& tok, const std::vector<std::string>& texts, const std::vector<json>& expected,
                  const std::string& label, bool check_special = true) {
  Agreement a;
  int shown = 0;
  for (size_t i = 0; i < texts.size() && i < expected.size(); ++i) {
    if (expected[i].is_null()) continue;
    ++a.compared;
    const auto want = expected[i]["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(texts[i]);
    bool ok = got == want;
    if (check_special) ok = ok && tok.encode(texts[i], true) == expected[i]["ids_special"].get<std::vector<int32_t>>();
    if (ok) ++a.ids_equal;
    else if (shown++ < 5)
      ADD_FAILURE() << label << " text " << i << " " << json(texts[i]).dump() << "\n  ours   " << ids_text(got)
                    << "\n  oracle " << ids_text(want);
    const std::string decoded = tok.decode(want), decoded_skip = tok.decode(want, true);
    if (decoded == expected[i]["decoded"].get<std::string>() &&
        decoded_skip == expected[i]["decoded_skip"].get<std::string>())
      ++a.decode_equal;
    else if (shown++ < 5)
      ADD_FAILURE() << label << " decode of text " << i << " " << json(texts[i]).dump() << "\n  ours   "
                    << json(decoded).dump() << " / " << json(decoded_skip).dump() << "\n  oracle "
                    << expected[i]["decoded"].dump() << " / " << expected[i]["decoded_skip"].dump();
    // decode(encode(x)) is x exactly when the oracle's decoding gives x back (NFC, skipped
    // prefixes and the like change some texts for both).
    if ((tok.decode(got) == texts[i]) == (expected[i]["decoded"].get<std::string>() == texts[i])) ++a.round_trip;
  }
  EXPECT_GT(a.compared, 0u) << label;
  EXPECT_EQ(a.ids_equal, a.compared) << label << ": ids differ";
  EXPECT_EQ(a.decode_equal, a.compared) << label << ": decodings differ";
  EXPECT_EQ(a.round_trip, a.compared) << label << ": decode(encode(x)) round trips differ";
  std::cout << fmt::format("[ agreement ] {}: ids {}/{}, decode {}/{}, round trip {}/{}\n", label, a.ids_equal,
                           a.compared, a.decode_equal, a.compared, a.round_trip, a.compared);
  return a;
}

std::vector<std::string> corpus_and_random(uint32_t seed) {
  std::vector<std::string> texts = corpus();
  for (std::string& s : random_unicode_strings(seed, 400)) texts.push_back(std::move(s));
  return texts;
}

GgufVocab vocab_from_json(const fs::path& p) {
  const json j = json::parse(read_file(p));
  GgufVocab v;
  v.model = j["model"].get<std::string>();
  v.pre = j["pre"].get<std::string>();
  v.tokens = j["tokens"].get<std::vector<std::string>>();
  v.scores = j["scores"].get<std::vector<float>>();
  v.token_types = j["token_types"].get<std::vector<int32_t>>();
  v.merges = j["merges"].get<std::vector<std::string>>();
  if (!j["bos_id"].is_null()) v.bos_id = j["bos_id"].get<int32_t>();
  if (!j["eos_id"].is_null()) v.eos_id = j["eos_id"].get<int32_t>();
  v.add_bos = j["add_bos"].get<bool>();
  return v;
}

// ---- against the oracles ----------------------------------------------------------------------

TEST(TokenizerOracle, Llama32TokenizerJsonMatchesTokenizers) {
  REQUIRE_ORACLES();
  TempDir dir;
  const fs::path file = asset("llama3.2/tokenizer.json");
  const Tokenizer tok = Tokenizer::from_path(file);
  const auto texts = corpus_and_random(1);
  compare(tok, texts, oracle("hf", file, texts, dir), "llama3.2");
  EXPECT_EQ(tok.encode("Hi", true).front(), 128000) << "--add-special puts <|begin_of_text|> first";
  // Bytes that are not UTF-8 are read as U+FFFD (what Python's errors="replace" hands tokenizers).
  EXPECT_EQ(tok.encode("a\xff\xfe b\xE2\x82"), tok.encode("a\uFFFD\uFFFD b\uFFFD"));
}

// One Tokenizer used from several threads at once (the BPE cache is shared) answers as it does
// alone.
TEST(TokenizerOracle, ConcurrentEncodingGivesTheSameIds) {
  REQUIRE_ORACLES();
  const Tokenizer tok = Tokenizer::from_path(asset("qwen3/tokenizer.json"));
  const auto texts = corpus_and_random(10);
  std::vector<std::vector<int32_t>> alone;
  for (const std::string& t : texts) alone.push_back(Tokenizer(tok).encode(t));
  const Tokenizer fresh = Tokenizer::from_path(asset("qwen3/tokenizer.json"));  // cold cache
  std::vector<std::thread> threads;
  std::vector<int> differences(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (size_t i = 0; i < texts.size(); ++i) {
        const size_t j = (i * 7 + static_cast<size_t>(k) * 13) % texts.size();  // each thread its own order
        differences[k] += fresh.encode(texts[j]) != alone[j];
      }
    });
  for (std::thread& t : threads) t.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(differences[k], 0) << "thread " << k;
}

TEST(TokenizerOracle, Qwen3TokenizerJsonMatchesTokenizers) {
  REQUIRE_ORACLES();
  TempDir dir;
  const fs::path file = asset("qwen3/tokenizer.json");
  const Tokenizer tok = Tokenizer::from_path(file);
  const auto texts = corpus_and_random(2);
  compare(tok, texts, oracle("hf", file, texts, dir), "qwen3");
  EXPECT_EQ(tok.encode("Hi", true), tok.encode("Hi")) << "Qwen adds nothing";
}

TEST(TokenizerOracle, MistralModelsMatchSentencePiece) {
  REQUIRE_ORACLES();
  for (const char* version : {"v1", "v3", "v7"}) {
    TempDir dir;
    const fs::path file = asset(std::string("mistral/tokenizer.model.") + version);
    const Tokenizer tok = Tokenizer::from_path(file);
    const auto texts = corpus_and_random(3);
    compare(tok, texts, oracle("sp", file, texts, dir), std::string("mistral ") + version);
  }
}

// What the Mistral models do not exercise: unused pieces (merged, then split back when output),
// user-defined pieces inside words, remove_extra_whitespaces, characters with no piece at all.
TEST(TokenizerOracle, ToySentencePieceModelMatchesSentencePiece) {
  REQUIRE_ORACLES();
  TempDir dir;
  const fs::path file = dir.path() / "toy.model";
  ASSERT_TRUE(run_python({"sp-toy", file.string()}));
  const Tokenizer tok = Tokenizer::from_path(file);
  auto texts = corpus_and_random(11);
  for (const char* s : {"baba", "bab ab aba", "  the cab  [U]<tool>x", "x[U]y<tool>z", "a   b    c", "ababab the"})
    texts.emplace_back(s);
  compare(tok, texts, oracle("sp", file, texts, dir), "toy sentencepiece model");
}

// The same Mistral models written as tokenizer.json files (BPE with byte fallback) in both styles
// transformers has produced: Prepend/Replace normalizers, and a Metaspace pre-tokenizer.
TEST(TokenizerOracle, ByteFallbackTokenizerJsonMatchesTokenizers) {
  REQUIRE_ORACLES();
  for (const char* scheme : {"legacy", "metaspace"}) {
    TempDir dir;
    const fs::path file = dir.path() / "tokenizer.json";
    ASSERT_TRUE(run_python({"sp-to-json", asset("mistral/tokenizer.model.v3").string(), scheme, file.string()}));
    const Tokenizer tok = Tokenizer::from_path(file);
    const auto texts = corpus_and_random(4);
    compare(tok, texts, oracle("hf", file, texts, dir), std::string("mistral v3 tokenizer.json, ") + scheme);
  }
}

TEST(TokenizerOracle, SmolLM2GgufVocabularyMatchesTokenizers) {
  REQUIRE_ORACLES();
  TempDir dir;
  const fs::path vocab_file = dir.path() / "vocab.json";
  ASSERT_TRUE(run_python({"gguf-vocab", asset("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf").string(), vocab_file.string()}));
  const GgufVocab vocab = vocab_from_json(vocab_file);
  EXPECT_EQ(vocab.pre, "smollm");
  const Tokenizer tok = Tokenizer::from_gguf_vocab(vocab);
  const auto texts = corpus_and_random(5);
  compare(tok, texts, oracle("hf-from-gguf", vocab_file, texts, dir), "smollm2 gguf");

  // The README's reference prompt: ChatML with the default system prompt, 37 ids.
  const std::string prompt =
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
      "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
  const std::vector<int32_t> want = {1,    9690, 198,  2683,  359,  253,  5356, 5646, 11173, 3365,
                                     3511, 308,  34519, 28,   7018, 411,  407,  19712, 8182, 2,
                                     198,  1,    4093, 198,   1780, 314,  260,  3575, 282,   4649,
                                     47,   2,    198,  1,     520,  9531, 198};
  EXPECT_EQ(tok.encode(prompt), want);
  EXPECT_EQ(tok.decode(std::vector<int32_t>{504, 3575, 282, 4649, 314, 7042, 30, 2}, true),
            "The capital of France is Paris.");
}

// What llama.cpp's converter writes into a GGUF for a tokenizer.json: tokens by id, merges as
// "a b", added tokens typed control (special) or user-defined.
GgufVocab vocab_from_tokenizer_json(const fs::path& file, const std::string& pre) {
  const json doc = json::parse(read_file(file));
  GgufVocab v;
  v.model = "gpt2";
  v.pre = pre;
  std::vector<std::pair<int32_t, std::string>> entries;
  for (const auto& [token, id] : doc["model"]["vocab"].items()) entries.emplace_back(id.get<int32_t>(), token);
  for (const json& t : doc["added_tokens"]) entries.emplace_back(t["id"].get<int32_t>(), t["content"].get<std::string>());
  int32_t n = 0;
  for (const auto& [id, _] : entries) n = std::max(n, id + 1);
  v.tokens.assign(n, "");
  v.token_types.assign(n, 1);
  for (const auto& [id, token] : entries) v.tokens[id] = token;
  for (const json& t : doc["added_tokens"]) v.token_types[t["id"].get<int32_t>()] = t["special"].get<bool>() ? 3 : 4;
  for (const json& m : doc["model"]["merges"])
    v.merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  return v;
}

// llama.cpp's regexes for the "llama-bpe" and "qwen2" pre-tokenizers against the regexes those
// models' tokenizer.json files hold, through the GgufVocab door.
TEST(TokenizerOracle, GgufVocabulariesOfLlama3AndQwen2MatchTheirTokenizerJson) {
  REQUIRE_ORACLES();
  for (const auto& [file, pre] : {std::pair{"llama3.2/tokenizer.json", "llama-bpe"}, std::pair{"qwen3/tokenizer.json", "qwen2"}}) {
    TempDir dir;
    const Tokenizer tok = Tokenizer::from_gguf_vocab(vocab_from_tokenizer_json(asset(file), pre));
    const auto texts = corpus_and_random(8);
    compare(tok, texts, oracle("hf", asset(file), texts, dir), std::string("gguf vocabulary, pre ") + pre,
            /*check_special=*/false);
  }
}

// A SentencePiece vocabulary handed over the GGUF way ("llama" model): same ids as sentencepiece
// for text without control tokens (llama.cpp matches those in text, sentencepiece does not).
TEST(TokenizerOracle, LlamaGgufVocabularyMatchesSentencePiece) {
  REQUIRE_ORACLES();
  for (const char* version : {"v1", "v3"}) {
    TempDir dir;
    const fs::path model = asset(std::string("mistral/tokenizer.model.") + version);
    const fs::path vocab_file = dir.path() / "vocab.json";
    ASSERT_TRUE(run_python({"sp-vocab", model.string(), vocab_file.string()}));
    const Tokenizer tok = Tokenizer::from_gguf_vocab(vocab_from_json(vocab_file));
    const auto texts = corpus_and_random(6);
    compare(tok, texts, oracle("sp-skip-controls", model, texts, dir), std::string("mistral gguf vocab ") + version);
  }
}

// The tokenizer.json features the real files do not use, each against tokenizers: the five split
// behaviours with and without invert, Digits, ByteLevel with add_prefix_space, NFKC + Lowercase,
// and added tokens with lstrip, rstrip, single_word and normalized.
std::string feature_tokenizer_json(const std::string& behavior, bool invert) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[amk::tokenizer_detail::byte_level_encode(std::string(1, char(b)))] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"t", "h"}, {"th", "e"}, {"\xC4\xA0", "the"}, {"\xC4\xA0", "a"}, {"1", "2"}, {"i", "n"}, {"\xC4\xA0", "in"}};
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = static_cast<int>(vocab.size());
    merge_list.push_back(a + " " + b);
  }
  const int n = static_cast<int>(vocab.size());
  const auto added = [](int id, const char* content, bool special, bool lstrip, bool rstrip, bool single_word,
                        bool normalized) {
    return json{{"id", id},         {"content", content}, {"special", special},       {"lstrip", lstrip},
                {"rstrip", rstrip}, {"single_word", single_word}, {"normalized", normalized}};
  };
  const json doc = {
      {"added_tokens", {added(n, "[SPECIAL]", true, false, false, false, false),
                        added(n + 1, "<lstrip>", false, true, false, false, false),
                        added(n + 2, "<rstrip>", false, false, true, false, false),
                        added(n + 3, "<word>", false, false, false, true, false),
                        added(n + 4, "<Norm>", false, false, false, false, true)}},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}, {{"type", "Lowercase"}}}}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", R"(\s*[-,.;]\s*)"}}}, {"behavior", behavior}, {"invert", invert}},
          {{"type", "Digits"}, {"individual_digits", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "[SPECIAL]"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{"[SPECIAL]", {{"id", "[SPECIAL]"}, {"ids", {n}}, {"tokens", {"[SPECIAL]"}}}}}}}}};
  return doc.dump();
}

TEST(TokenizerOracle, TokenizerJsonFeaturesMatchTokenizers) {
  REQUIRE_ORACLES();
  std::vector<std::string> texts = corpus();
  for (std::string& s : random_unicode_strings(9, 100)) texts.push_back(std::move(s));
  for (const char* s : {"x  <lstrip>  y", "<lstrip>", " \t<lstrip>", "<rstrip>   z", "a <rstrip>\n\nb",
                        "a<word>b", " <word> ", "<word>", "x<word> y", "A<NORM>B <norm> <Norm>",
                        "the, then - in; 12.123-4567", "-- ,, ..", "[SPECIAL] the[SPECIAL]the", "ＴＨＥ ﬁn ①②"})
    texts.emplace_back(s);
  for (const char* behavior : {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"}) {
    for (const bool invert : {false, true}) {
      TempDir dir;
      const fs::path file = dir.path() / "tokenizer.json";
      write_file(file, feature_tokenizer_json(behavior, invert));
      const Tokenizer tok = Tokenizer::from_path(file);
      compare(tok, texts, oracle("hf", file, texts, dir), fmt::format("features, {}{}", behavior, invert ? ", invert" : ""));
    }
  }
}

// ~100 KB of mixed text in well under a second, cold cache included.
TEST(TokenizerOracle, HundredKilobytesEncodeQuickly) {
  REQUIRE_ORACLES();
  std::string text;
  const auto texts = corpus_and_random(7);
  for (size_t i = 0; text.size() < 100'000; ++i) text += texts[i % texts.size()] + "\n";
  for (const char* file : {"llama3.2/tokenizer.json", "qwen3/tokenizer.json", "mistral/tokenizer.model.v3"}) {
    const Tokenizer tok = Tokenizer::from_path(asset(file));
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok.encode(text);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << fmt::format("[ speed ] {}: {} bytes -> {} ids in {:.3f} s\n", file, text.size(), ids.size(), seconds);
    EXPECT_LT(seconds, 1.0) << file;
    EXPECT_EQ(tok.decode(ids), tok.decode(tok.encode(text))) << "encoding is deterministic";
  }
}

// ---- the command ------------------------------------------------------------------------------

TEST(TokenizerCli, JsonlMatchesTokenizers) {
  REQUIRE_ORACLES();
  TempDir dir;
  const fs::path file = asset("llama3.2/tokenizer.json");
  const auto texts = corpus();
  const std::vector<json> expected = oracle("hf", file, texts, dir);
  const fs::path in = dir.path() / "texts.jsonl";
  write_jsonl(in, texts);
  const auto q = amk::testing::shell_quote;
  const auto r = amk::testing::run_amk("tokenize " + q(file.string()) + " --jsonl " + q(in.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream out(r.out);
  size_t i = 0;
  for (std::string line; std::getline(out, line); ++i) {
    ASSERT_LT(i, expected.size());
    EXPECT_EQ(json::parse(line), expected[i]["ids"]) << "line " << i + 1 << ": " << json(texts[i]).dump();
  }
  EXPECT_EQ(i, texts.size());

  // A model folder works as well as the file inside it.
  const fs::path folder = dir.path() / "model";
  fs::create_directories(folder);
  fs::create_symlink(file, folder / "tokenizer.json");
  const auto special = amk::testing::run_amk("tokenize " + q(folder.string()) + " --add-special --jsonl " + q(in.string()));
  ASSERT_EQ(special.exit_code, 0) << special.err;
  EXPECT_EQ(json::parse(special.out.substr(0, special.out.find('\n'))), expected[0]["ids_special"]);

  // --decode --jsonl: arrays of ids back to the strings HF decodes them to.
  std::string id_lines;
  for (const json& e : expected) id_lines += e["ids"].dump() + "\n";
  write_file(dir.path() / "ids.jsonl", id_lines);
  const auto back = amk::testing::run_amk("tokenize " + q(file.string()) + " --decode --jsonl " +
                                          q((dir.path() / "ids.jsonl").string()));
  ASSERT_EQ(back.exit_code, 0) << back.err;
  std::istringstream decoded(back.out);
  i = 0;
  for (std::string line; std::getline(decoded, line); ++i)
    EXPECT_EQ(json::parse(line), expected[i]["decoded"]) << "line " << i + 1;
  EXPECT_EQ(i, texts.size());
}

TEST(TokenizerCli, PromptPrintsIdsAndPieces) {
  REQUIRE_ORACLES();
  const auto q = amk::testing::shell_quote;
  const std::string model = asset("llama3.2/tokenizer.json").string();
  const auto r = amk::testing::run_amk("tokenize " + q(model) + " -p 'Hello world'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Tokenizer tok = Tokenizer::from_path(model);
  EXPECT_NE(r.out.find("ids  " + fmt::format("{}", fmt::join(tok.encode("Hello world"), " "))), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("'Ġworld'"), std::string::npos) << r.out;
  const auto back = amk::testing::run_amk("tokenize " + q(model) + " --decode -p 9906,1917");
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.out, tok.decode(std::vector<int32_t>{9906, 1917}) + "\n");
}

TEST(TokenizerCli, BadInputExitsTwoNamingTheProblem) {
  TempDir dir;
  const auto q = amk::testing::shell_quote;
  auto r = amk::testing::run_amk("tokenize " + q((dir.path() / "nothing.json").string()) + " -p hi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no such file"), std::string::npos) << r.err;

  write_file(dir.path() / "broken.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": [1]}}");
  r = amk::testing::run_amk("tokenize " + q((dir.path() / "broken.json").string()) + " -p hi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'vocab' must be an object"), std::string::npos) << r.err;

  write_file(dir.path() / "tiny.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})");
  write_file(dir.path() / "lines.jsonl", "\"ab\"\n[1, 2]\n");
  r = amk::testing::run_amk("tokenize " + q((dir.path() / "tiny.json").string()) + " --jsonl " +
                            q((dir.path() / "lines.jsonl").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("lines.jsonl:2: expected a JSON string"), std::string::npos) << r.err;

  r = amk::testing::run_amk("tokenize " + q((dir.path() / "tiny.json").string()) + " --decode -p 7");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("token id 7 is not in the vocabulary"), std::string::npos) << r.err;

  r = amk::testing::run_amk("tokenize " + q((dir.path() / "tiny.json").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("exactly one of -p TEXT and --jsonl FILE"), std::string::npos) << r.err;
}

// ---- no oracle needed ---------------------------------------------------------------------------

TEST(TokenizerByteLevel, EveryByteRoundTripsThroughOnePrintableCharacter) {
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    const std::string encoded = amk::tokenizer_detail::byte_level_encode(byte);
    EXPECT_EQ(amk::tokenizer_detail::utf8_char_length(encoded, 0), encoded.size()) << "byte " << b;
    std::string back;
    EXPECT_TRUE(amk::tokenizer_detail::byte_level_decode_append(encoded, back));
    EXPECT_EQ(back, byte);
  }
  // GPT-2's well-known images: space is Ġ (U+0120), newline Ċ (U+010A), 'a' itself.
  EXPECT_EQ(amk::tokenizer_detail::byte_level_encode(" \na"), "\xC4\xA0\xC4\x8A" "a");
}

TEST(TokenizerUtf8, LossyRepairReplacesEachMaximalBadSubsequence) {
  using amk::tokenizer_detail::utf8_lossy;
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("abc"), "abc");
  EXPECT_EQ(utf8_lossy("\xF0\x90\x80x"), r + "x");        // a truncated 4-byte sequence: one U+FFFD
  EXPECT_EQ(utf8_lossy("\x80\x80"), r + r);               // stray continuation bytes: one each
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);       // a surrogate is not a valid prefix
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), r + r);               // overlong
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), r + r + r + r);  // past U+10FFFF
  EXPECT_EQ(utf8_lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");  // €
}

// A tokenizer.json small enough to work out by hand: merges apply best rank first, whatever
// their position, and unknown characters are dropped without an unk token.
TEST(TokenizerHandMade, MergesApplyInRankOrder) {
  const std::string doc = R"({
    "added_tokens": [{"id": 6, "content": "<x>", "special": true}],
    "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": false},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5},
              "merges": ["b c", "a b", ["a", "bc"]]},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<x>"}}, {"Sequence": {"id": "A"}}],
                       "special_tokens": {"<x>": {"id": "<x>", "ids": [6]}}}})";
  const Tokenizer tok = Tokenizer::from_hf_json(doc);
  // "abc": b+c (rank 0) first, then a+bc (rank 2); a+b (rank 1) never applies.
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{5}));
  EXPECT_EQ(tok.encode("ab abz c"), (std::vector<int32_t>{3, 3, 2}));
  EXPECT_EQ(tok.encode("a<x>bc"), (std::vector<int32_t>{0, 6, 4}));
  EXPECT_EQ(tok.encode("bc", true), (std::vector<int32_t>{6, 4}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{0, 6, 4}), "a <x> bc") << "no decoder: joined with spaces";
  EXPECT_EQ(tok.decode(std::vector<int32_t>{0, 6, 4}, true), "a bc");
  EXPECT_TRUE(tok.is_special(6));
  EXPECT_EQ(tok.token_id("abc"), 5);
}

void expect_refused(const std::string& doc, const std::string& fragment) {
  try {
    (void)Tokenizer::from_hf_json(doc, "bad.json");
    ADD_FAILURE() << "accepted: " << doc;
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
}

TEST(TokenizerHandMade, MalformedFilesAreRefusedWithTheirProblem) {
  const std::string vocab = R"("vocab": {"a": 0, "b": 1})";
  expect_refused("not json", "not valid JSON");
  expect_refused("[]", "top level must be an object");
  expect_refused("{}", "no 'model'");
  expect_refused(R"({"model": {"type": "Unigram", "vocab": []}})", "model type 'Unigram' is not supported");
  expect_refused(R"({"model": {)" + vocab + R"(, "merges": ["a b"]}})", "'ab' is not in the vocabulary");
  expect_refused(R"({"model": {)" + vocab + R"(, "merges": ["a b c"]}})", "not two tokens separated by one space");
  expect_refused(R"({"model": {"vocab": {"a": -1}}})", "token id must be an integer");
  expect_refused(R"({"model": {"vocab": {"a": 0, "b": 0}}})", "token id 0 is given two different strings");
  expect_refused(R"({"model": {)" + vocab + R"(}, "pre_tokenizer": {"type": "BertPreTokenizer"}})",
                 "pre_tokenizer type 'BertPreTokenizer' is not supported");
  expect_refused(R"({"model": {)" + vocab + R"(}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"},
                    "behavior": "Isolated"}})", "does not compile");
  expect_refused(R"({"model": {)" + vocab + R"(}, "normalizer": {"type": "Precompiled"}})",
                 "normalizer type 'Precompiled' is not supported");
  expect_refused(R"({"model": {)" + vocab + R"(, "dropout": 0.1}})", "dropout is not supported");
  expect_refused(R"({"model": {)" + vocab + R"(}, "added_tokens": [{"id": 9, "content": ""}]})", "'content' is empty");
  std::string deep = R"({"model": {)" + vocab + R"(}, "normalizer": )";
  for (int i = 0; i < 20; ++i) deep += R"({"type": "Sequence", "normalizers": [)";
  deep += R"({"type": "NFC"})";
  for (int i = 0; i < 20; ++i) deep += "]}";
  expect_refused(deep + "}", "nest too deeply");
}

TEST(TokenizerHandMade, SentencePieceGarbageIsRefused) {
  const auto refuse = [](const std::string& bytes, const std::string& fragment) {
    try {
      (void)Tokenizer::from_sentencepiece(std::as_bytes(std::span(bytes.data(), bytes.size())), "x.model");
      ADD_FAILURE() << "accepted " << bytes.size() << " bytes";
    } catch (const TokenizerError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  refuse("", "no pieces");
  refuse("\x0a\xff\xff\xff\xff\x0f", "runs past the end");   // a 4 GB length in 6 bytes
  refuse("\x0a\x03\x0a\x01", "runs past the end");           // piece message longer than the file
  refuse("\x0a\x03\x0a\x01" "a", "type 1 is not supported"); // a unigram model (the default type)
  refuse(std::string("\x0a\x02\x18\x09", 4), "unknown type 9");
  // A BPE model (trainer spec field 3 = 2) that puts the space marker after words.
  refuse(std::string("\x0a\x03\x0a\x01" "a" "\x12\x05\x18\x02\xc0\x01\x01", 12), "treat_whitespace_as_suffix");
  refuse(std::string("\x0a\x03\x0a\x01" "a" "\x12\x02\x18\x02" "\x1a\x06\x0a\x04nmtk", 17), "'nmtk' is not supported");
}

TEST(TokenizerHandMade, GgufVocabularyProblemsAreNamed) {
  GgufVocab v;
  v.model = "gpt2";
  v.pre = "no-such-pre";
  v.tokens = {"a", "b"};
  try {
    (void)Tokenizer::from_gguf_vocab(v);
    ADD_FAILURE() << "accepted an unknown pre";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("'no-such-pre'"), std::string::npos) << e.what();
  }
  v.pre = "smollm";
  v.token_types = {1};
  EXPECT_THROW((void)Tokenizer::from_gguf_vocab(v), TokenizerError) << "1 type for 2 tokens";
  v.token_types = {};
  v.bos_id = 5;
  EXPECT_THROW((void)Tokenizer::from_gguf_vocab(v), TokenizerError) << "bos outside the vocabulary";
  v.bos_id.reset();
  v.merges = {"a b"};
  EXPECT_THROW((void)Tokenizer::from_gguf_vocab(v), TokenizerError) << "merge result 'ab' missing";
  v.merges = {};
  const Tokenizer tok = Tokenizer::from_gguf_vocab(v);
  EXPECT_EQ(tok.encode("ab1"), (std::vector<int32_t>{0, 1})) << "'1' is not in the vocabulary: dropped";
}

}  // namespace
