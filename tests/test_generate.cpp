// Text generation: the Generator's stopping and streaming over a scripted decoder and a byte-level
// tokenizer built here (so every expectation is written out by hand), the Conversation's KV-cache
// reuse, perplexity against transformers' own logits (the tiny-llama fixture), and the real
// SmolLM2 GGUF through `amk generate` / `amk tokenize` / `amk perplexity` against
// ../shared/models/README.md (those need AMK_ASSETS_DIR and skip naming it).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/conversation.h"
#include "amk/generator.h"
#include "amk/lowering.h"
#include "amk/model_text.h"
#include "amk/oracle.h"
#include "amk/perplexity.h"
#include "amk/text_stream.h"
#include "support/amk_command.h"
#include "support/byte_tokenizer.h"

namespace {

using namespace amk;
namespace fs = std::filesystem;
using amk::testing::run_amk;
using amk::testing::shell_quote;

constexpr int64_t kEos = amk::testing::kByteEos;
using amk::testing::byte_tokenizer;
using amk::testing::bytes_of;

// A decoder whose step at position p (fed `token`) puts all the weight on next(p, token).
class ScriptedDecoder final : public Decoder {
 public:
  ScriptedDecoder(std::function<int64_t(int64_t, int64_t)> next, int64_t context = 1024)
      : next_(std::move(next)), context_(context) {}
  int64_t position() const override { return position_; }
  int64_t max_context() const override { return context_; }
  int64_t vocab_size() const override { return kEos + 1; }
  std::vector<float> step(int64_t token) override {
    fed.push_back(token);
    std::vector<float> logits(size_t(kEos + 1), 0.0f);
    logits[size_t(next_(position_, token))] = 20.0f;
    ++position_;
    return logits;
  }
  int64_t last_next_token() const override { return -1; }
  void reset() override {
    position_ = 0;
    ++resets;
  }
  void seek(int64_t, uint64_t) override {}
  std::vector<int64_t> fed;
  int resets = 0;

 private:
  std::function<int64_t(int64_t, int64_t)> next_;
  int64_t context_;
  int64_t position_ = 0;
};

// After a prompt of `prompt_length` tokens, the decoder says `reply` byte by byte (then eos).
ScriptedDecoder saying(std::string reply, size_t prompt_length, int64_t context = 1024) {
  return ScriptedDecoder(
      [reply, prompt_length](int64_t position, int64_t) -> int64_t {
        const int64_t i = position + 1 - int64_t(prompt_length);
        if (i < 0 || i >= int64_t(reply.size())) return kEos;
        return static_cast<unsigned char>(reply[size_t(i)]);
      },
      context);
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

GenerationOptions greedy(int64_t n, std::vector<std::string> stops = {}) {
  GenerationOptions o;
  o.max_new_tokens = n;
  o.sampling.temperature = 0;
  o.stop_strings = std::move(stops);
  o.eos_ids = {kEos};
  return o;
}

TEST(Generator, StreamsWholeCharactersAndStopsAtEos) {
  const std::string reply = "Où? 日本 🙂!";  // 2-, 3- and 4-byte characters, one byte per token
  const std::vector<int64_t> prompt = bytes_of("Q:");
  ScriptedDecoder decoder = saying(reply, prompt.size());
  Generator generator(decoder, byte_tokenizer());
  std::vector<std::string> pieces;
  const GenerationResult r =
      generator.generate(prompt, greedy(100), [&](std::string_view p) { pieces.emplace_back(p); });
  std::vector<int64_t> expected_ids = bytes_of(reply);
  expected_ids.push_back(kEos);
  EXPECT_EQ(r.ids, expected_ids);
  EXPECT_EQ(r.text, reply);
  EXPECT_EQ(r.finish, FinishReason::Stop);
  std::string joined;
  for (const std::string& p : pieces) {
    EXPECT_TRUE(valid_utf8(p)) << "a piece splits a character: " << ::testing::PrintToString(p);
    joined += p;
  }
  EXPECT_EQ(joined, reply);
  // "O", then "ù" only once its second byte came, ...: one piece per character.
  EXPECT_EQ(pieces.size(), 9u);
  EXPECT_EQ(pieces[1], "ù");
  EXPECT_EQ(decoder.fed, (std::vector<int64_t>{'Q', ':', 'O', 0xC3, 0xB9, '?', ' ', 0xE6, 0x97, 0xA5, 0xE6, 0x9C, 0xAC,
                                               ' ', 0xF0, 0x9F, 0x99, 0x82, '!'}))
      << "the eos is drawn, not fed";
}

TEST(Generator, AStopStringEndsTheTextBeforeItAndIsNeverEmitted) {
  const std::vector<int64_t> prompt = bytes_of(">");
  ScriptedDecoder decoder = saying("hello world, more", prompt.size());
  Generator generator(decoder, byte_tokenizer());
  std::string streamed;
  const GenerationResult r = generator.generate(prompt, greedy(100, {"xyz", "lo w"}),
                                                [&](std::string_view p) { streamed += p; });
  EXPECT_EQ(r.text, "hel");
  EXPECT_EQ(streamed, "hel");
  EXPECT_EQ(r.finish, FinishReason::Stop);
  EXPECT_EQ(r.ids, bytes_of("hello w")) << "generation ends at the token that completes the stop string";
}

TEST(Generator, AHeldBackStopPrefixIsPrintedWhenItTurnsOutNotToBeOne) {
  const std::vector<int64_t> prompt = bytes_of(">");
  ScriptedDecoder decoder = saying("ab<|x", prompt.size());
  Generator generator(decoder, byte_tokenizer());
  std::vector<std::string> pieces;
  const GenerationResult r =
      generator.generate(prompt, greedy(100, {"<|end|>"}), [&](std::string_view p) { pieces.emplace_back(p); });
  EXPECT_EQ(r.text, "ab<|x");
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "b", "<|x"}));
}

TEST(Generator, MaxTokensAndTheContextEndWithLength) {
  const std::vector<int64_t> prompt = bytes_of("abc");
  {
    ScriptedDecoder decoder = saying("0123456789", prompt.size());
    Generator generator(decoder, byte_tokenizer());
    const GenerationResult r = generator.generate(prompt, greedy(4));
    EXPECT_EQ(r.ids, bytes_of("0123"));
    EXPECT_EQ(r.text, "0123");
    EXPECT_EQ(r.finish, FinishReason::Length);
    EXPECT_FALSE(r.context_full);
    EXPECT_EQ(decoder.fed.size(), 3u + 3u) << "the last token is not fed";
  }
  {
    ScriptedDecoder decoder = saying("0123456789", prompt.size(), /*context=*/6);
    Generator generator(decoder, byte_tokenizer());
    const GenerationResult r = generator.generate(prompt, greedy(100));
    // Positions 0-2 hold the prompt, 3-5 the first three tokens; the fourth has no room.
    EXPECT_EQ(r.ids, bytes_of("0123"));
    EXPECT_EQ(r.finish, FinishReason::Length);
    EXPECT_TRUE(r.context_full);
  }
}

TEST(Generator, AnInterruptStopsBetweenSteps) {
  const std::vector<int64_t> prompt = bytes_of("abc");
  ScriptedDecoder decoder = saying("0123456789", prompt.size());
  Generator generator(decoder, byte_tokenizer());
  std::atomic<bool> stop{false};
  const GenerationResult r = generator.generate(prompt, greedy(100), [&](std::string_view p) {
    if (p == "2") stop = true;  // Ctrl-C while the third token prints
  }, &stop);
  EXPECT_EQ(r.finish, FinishReason::Interrupted);
  EXPECT_EQ(r.ids, bytes_of("012"));
}

TEST(Generator, BadPromptsAreRefusedByName) {
  ScriptedDecoder decoder = saying("x", 1, 4);
  Generator generator(decoder, byte_tokenizer());
  EXPECT_THROW((void)generator.generate(std::vector<int64_t>{}, greedy(1)), std::invalid_argument);
  EXPECT_THROW((void)generator.generate(std::vector<int64_t>{999}, greedy(1)), std::invalid_argument);
  EXPECT_THROW((void)generator.generate(bytes_of("abcd"), greedy(1)), std::invalid_argument) << "no room";
  GenerationOptions bad = greedy(1);
  bad.sampling.top_p = 0;
  EXPECT_THROW((void)generator.generate(bytes_of("a"), bad), std::invalid_argument);
}

// A ChatML-like template over the byte tokenizer. Replies: after the generation prompt's last
// byte (']' or '>') the decoder says "ok", after "ok" the eos.
ModelText byte_chat(std::string template_source) {
  return ModelText{byte_tokenizer(), std::move(template_source), std::nullopt, std::string("<eos>"), {kEos}, "test"};
}

ScriptedDecoder answering_ok() {
  return ScriptedDecoder([](int64_t, int64_t token) -> int64_t {
    if (token == ']' || token == '>') return 'o';
    if (token == 'o') return 'k';
    return kEos;
  });
}

TEST(Conversation, KeepsTheCacheAcrossTurnsAndFeedsOnlyNewTokens) {
  const ModelText text = byte_chat(
      "{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}\n{% endfor %}"
      "{% if add_generation_prompt %}[assistant]{% endif %}");
  ScriptedDecoder decoder = answering_ok();
  Generator generator(decoder, text.tokenizer);
  Conversation chat(generator, text, "be brief");
  const GenerationResult first = chat.say("hi", greedy(10));
  EXPECT_EQ(first.text, "ok");
  EXPECT_EQ(first.reused_tokens, 0);
  const size_t fed_first = decoder.fed.size();
  // The first turn's prompt, then "o" "k" (the eos was drawn, not fed).
  EXPECT_EQ(fed_first, first.prompt_ids.size() + 2);

  const GenerationResult second = chat.say("again", greedy(10));
  EXPECT_EQ(second.text, "ok");
  EXPECT_FALSE(second.cache_reset);
  EXPECT_EQ(second.reused_tokens, int64_t(fed_first));
  EXPECT_EQ(decoder.resets, 0);
  EXPECT_EQ(decoder.fed.size() - fed_first, second.prompt_ids.size() - fed_first + 2) << "only the new tokens are fed";
  // The history the template rendered is what the cache holds.
  const std::vector<int64_t> rendered = conversation_ids(text, chat.messages(), false);
  std::vector<int64_t> held(decoder.fed.begin(), decoder.fed.end());
  ASSERT_GE(rendered.size(), held.size());
  EXPECT_TRUE(std::equal(held.begin(), held.end(), rendered.begin()));
  EXPECT_EQ(chat.messages().size(), 5u);
}

TEST(Conversation, ATemplateThatRewritesHistoryResetsTheCache) {
  // Only the last message is rendered: the second prompt does not start with the first.
  const ModelText text = byte_chat("{{ messages[-1].role }}:{{ messages[-1].content }}{% if add_generation_prompt %}>{% endif %}");
  ScriptedDecoder decoder = answering_ok();
  Generator generator(decoder, text.tokenizer);
  Conversation chat(generator, text);
  (void)chat.say("one", greedy(10));
  const GenerationResult second = chat.say("two", greedy(10));
  EXPECT_TRUE(second.cache_reset);
  EXPECT_EQ(second.reused_tokens, 0);
  EXPECT_EQ(decoder.resets, 1);
  EXPECT_EQ(second.text, "ok");
}

// ---- perplexity against transformers' logits ------------------------------------------------

// Forwards the steps of another decoder but samples on the host (Decoder's own step_sample),
// the way a decoder without a sampling program does.
class HostSampling final : public Decoder {
 public:
  explicit HostSampling(Decoder& inner) : inner_(inner) {}
  int64_t position() const override { return inner_.position(); }
  int64_t max_context() const override { return inner_.max_context(); }
  int64_t vocab_size() const override { return inner_.vocab_size(); }
  std::vector<float> step(int64_t token) override { return inner_.step(token); }
  int64_t last_next_token() const override { return inner_.last_next_token(); }
  void reset() override { inner_.reset(); }
  void seek(int64_t position, uint64_t seed) override { inner_.seek(position, seed); }

 private:
  Decoder& inner_;
};

// The lowered program's last level draws the token (SAMPLE_ARGMAX flags bit 1) with the settings
// the Generator sets per request: the tokens equal the host's draws from the same logits
// (amk/sampler.h), a seed repeats its tokens, another seed gives others, and temperature 0 is
// the greedy continuation. Settings are float32 in the program, so these are exact in float32.
TEST(Generator, SamplingInTheProgramDrawsTheHostsTokens) {
  const fs::path dir = fs::path(AMK_TESTDATA_DIR) / "fixtures" / "tiny-llama";
  const Checkpoint ck = Checkpoint::open(dir);
  const Program program = lower(ck.config(), {}, *find_target("h100"), 48);
  ASSERT_TRUE(std::any_of(program.buffers.begin(), program.buffers.end(),
                          [](const Buffer& b) { return b.name == lowered_names::kSamplingFloats; }));
  ReferenceDecoder in_program(ck, program), stepped(ck, program);
  HostSampling on_host(stepped);
  Generator device_side(in_program, byte_tokenizer()), host_side(on_host, byte_tokenizer());
  const std::vector<int64_t> prompt = bytes_of("Sampling ");
  std::vector<std::vector<int64_t>> runs;
  for (const SamplingParams& s : {SamplingParams{0.75, 0, 1.0, 0.0, 7}, SamplingParams{1.5, 40, 0.875, 0.0, 7},
                                  SamplingParams{1.0, 0, 0.5, 0.0625, 123456789012345ull},
                                  SamplingParams{0.75, 0, 1.0, 0.0, 8}}) {
    GenerationOptions o = greedy(12);
    o.sampling = s;
    o.first_draw = 5;
    const GenerationResult a = device_side.generate(prompt, o);
    const GenerationResult b = host_side.generate(prompt, o);
    EXPECT_EQ(a.ids, b.ids) << "temperature " << s.temperature << " top-k " << s.top_k << " top-p " << s.top_p;
    runs.push_back(a.ids);
    EXPECT_EQ(device_side.generate(prompt, o).ids, a.ids) << "the same seed again";
  }
  EXPECT_NE(runs[0], runs[3]) << "seeds 7 and 8 drew the same 12 tokens";
  const std::vector<int64_t> greedy_ids = device_side.generate(prompt, greedy(12)).ids;
  ReferenceDecoder fresh(ck, program);
  EXPECT_EQ(greedy_ids, fresh.generate(prompt, 12));
  EXPECT_NE(greedy_ids, runs[0]);
}

TEST(Perplexity, EqualsTheFixturesTeacherForcedLogits) {
  const fs::path dir = fs::path(AMK_TESTDATA_DIR) / "fixtures" / "tiny-llama";
  const Checkpoint ck = Checkpoint::open(dir);
  const ExpectedOutputs e = load_expected(dir / "expected.safetensors");
  const int64_t n = int64_t(e.sequence_ids.size());
  for (const int64_t context : {n, n / 2}) {
    ReferenceDecoder decoder(ck, lower(ck.config(), {}, *find_target("h100"), context));
    const PerplexityResult r = perplexity(decoder, e.sequence_ids, context);
    // llama.cpp's rule, from transformers' logits: chunk c covers [c*ctx, (c+1)*ctx); positions
    // j in [ctx/2, ctx-1) score token j+1. A chunk's logits are not the full sequence's after
    // the first chunk, so only chunk 0 reads the fixture directly; with two chunks the second is
    // checked through its own teacher-forced run below.
    double nll = 0;
    int64_t count = 0;
    for (int64_t c = 0; c < n / context; ++c) {
      ReferenceDecoder fresh(ck, lower(ck.config(), {}, *find_target("h100"), context));
      for (int64_t j = 0; j + 1 < context; ++j) {
        const size_t at = size_t(c * context + j);
        std::vector<float> row;
        if (c == 0) {
          row.assign(e.logits.begin() + std::ptrdiff_t(at * size_t(e.vocab)),
                     e.logits.begin() + std::ptrdiff_t((at + 1) * size_t(e.vocab)));
        } else {
          row = fresh.step(e.sequence_ids[at]);
        }
        if (j < context / 2) continue;
        double max = -INFINITY, sum = 0;
        for (float l : row) max = std::max(max, double(l));
        for (float l : row) sum += std::exp(double(l) - max);
        nll += -(double(row[size_t(e.sequence_ids[at + 1])]) - max - std::log(sum));
        ++count;
      }
    }
    ASSERT_EQ(r.scored_tokens, count);
    EXPECT_EQ(r.chunks, n / context);
    EXPECT_NEAR(r.perplexity, std::exp(nll / double(count)), 1e-4 * r.perplexity) << "context " << context;
    EXPECT_GT(r.perplexity, 1.0);
  }
  ReferenceDecoder decoder(ck, lower(ck.config(), {}, *find_target("h100"), 8));
  EXPECT_THROW((void)perplexity(decoder, std::vector<int64_t>(7, 1), 8), std::invalid_argument) << "fewer tokens than a chunk";
}

// ---- the real SmolLM2 GGUF -----------------------------------------------------------------------

// ../shared/models/README.md's reference chat case.
const std::vector<int64_t> kReadmePromptIds = {1,    9690, 198,   2683, 359,  253,  5356, 5646, 11173, 3365,
                                               3511, 308,  34519, 28,   7018, 411,  407,  19712, 8182, 2,
                                               198,  1,    4093,  198,  1780, 314,  260,  3575, 282,   4649,
                                               47,   2,    198,   1,    520,  9531, 198};
const std::vector<int64_t> kReadmeContinuation = {504, 3575, 282, 4649, 314, 7042, 30, 2};

fs::path smollm2() {
  const char* dir = std::getenv("AMK_ASSETS_DIR");
  return dir == nullptr || *dir == 0 ? fs::path() : fs::path(dir) / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}
#define SKIP_WITHOUT_SMOLLM2(path)                                                                            \
  const fs::path path = smollm2();                                                                            \
  if (path.empty()) GTEST_SKIP() << "AMK_ASSETS_DIR is not set (scripts/fetch_assets.sh fetches SmolLM2)"; \
  ASSERT_TRUE(fs::exists(path)) << path << " is missing: run scripts/fetch_assets.sh"

TEST(GenerateSmolLM2, TheGgufTemplateAndTokenizerGiveTheReadmePromptIds) {
  SKIP_WITHOUT_SMOLLM2(path);
  const ModelText text = load_model_text(path);
  ASSERT_TRUE(text.chat_template.has_value());
  EXPECT_EQ(text.bos_token, "<|im_start|>");
  EXPECT_EQ(text.eos_token, "<|im_end|>");
  EXPECT_EQ(conversation_ids(text, nlohmann::ordered_json::parse(R"([{"role":"user","content":"What is the capital of France?"}])"), true),
            kReadmePromptIds);
  const auto r = run_amk("tokenize " + shell_quote(path.string()) + " -p 'What is the capital of France?'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ids  1780 314 260 3575 282 4649 47\n"), std::string::npos) << r.out;
}

TEST(GenerateSmolLM2, JsonOnTheCpuGivesTheReadmeContinuationAndStopsAtEos) {
  SKIP_WITHOUT_SMOLLM2(path);
  const auto r = run_amk("generate " + shell_quote(path.string()) +
                         " -p 'What is the capital of France?' --chat --temp 0 -n 12 --json --device cpu");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("prompt_ids").get<std::vector<int64_t>>(), kReadmePromptIds);
  EXPECT_EQ(j.at("ids").get<std::vector<int64_t>>(), kReadmeContinuation);
  EXPECT_EQ(j.at("text"), "The capital of France is Paris.");
  EXPECT_EQ(j.at("finish_reason"), "stop");
  EXPECT_EQ(j.at("device"), "cpu");
  for (const char* key : {"prefill_s", "first_token_s", "decode_s", "total_s", "decode_tokens_per_s"})
    EXPECT_TRUE(j.at("timings").at(key).is_number()) << key;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
}

TEST(GenerateSmolLM2, PerplexityEqualsATeacherForcedComputation) {
  SKIP_WITHOUT_SMOLLM2(path);
  const fs::path file = fs::temp_directory_path() / ("amk_ppl_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(file) << "Paris is the capital and largest city of France.";
  const auto r = run_amk("perplexity " + shell_quote(path.string()) + " -f " + shell_quote(file.string()) + " --ctx 8 --device cpu");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t at = r.out.find("PPL = ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double reported = std::stod(r.out.substr(at + 6));
  // The same tokens teacher-forced through the decoder here; the scoring is this test's own.
  const ModelText text = load_model_text(path);
  const std::vector<int32_t> ids = text.tokenizer.encode("Paris is the capital and largest city of France.", true);
  ASSERT_GE(ids.size(), 8u);
  const Checkpoint ck = Checkpoint::open(path);
  ReferenceDecoder decoder(ck, lower(ck.config(), {}, *find_target("h100"), 8));
  double nll = 0;
  for (int j = 0; j + 1 < 8; ++j) {
    const std::vector<float> row = decoder.step(ids[size_t(j)]);
    if (j < 4) continue;
    double max = -INFINITY, sum = 0;
    for (float l : row) max = std::max(max, double(l));
    for (float l : row) sum += std::exp(double(l) - max);
    nll += -(double(row[size_t(ids[size_t(j) + 1])]) - max - std::log(sum));
  }
  EXPECT_NEAR(reported, std::exp(nll / 3), 1e-3 * reported) << r.out;
  fs::remove(file);
}

TEST(GenerateSmolLM2, ChatFromAScriptKeepsTheCacheBetweenTurns) {
  SKIP_WITHOUT_SMOLLM2(path);
  // Two user messages on stdin (a file: run_amk appends its own redirections to the command).
  const fs::path script = fs::temp_directory_path() / ("amk_chat_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(script) << "What is the capital of France?\nThanks!\n";
  const auto r = run_amk("chat " + shell_quote(path.string()) + " --temp 0 -n 10 --ctx 256 --device cpu < " +
                         shell_quote(script.string()));
  fs::remove(script);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with("The capital of France is Paris.\n")) << r.out;
  // Turn 1 reads its 37 prompt tokens; turn 2 reuses them and the 7 reply tokens fed back.
  EXPECT_NE(r.err.find("37 new prompt tokens (0 reused from the cache)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(44 reused from the cache)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("note:"), std::string::npos) << r.err;
}

// `amk chat` on a terminal: tmux gives it one, keys are typed, the screen is read back.
TEST(GenerateSmolLM2, ChatUnderTmuxAnswersOnTheScreen) {
  SKIP_WITHOUT_SMOLLM2(path);
  if (std::system("command -v tmux >/dev/null 2>&1") != 0) GTEST_SKIP() << "tmux is not installed";
  const std::string session = "amk_chat_" + std::to_string(::getpid());
  const std::string start = "tmux new-session -d -s " + session + " -x 160 -y 40 " +
                            shell_quote(std::string(AMK_BINARY) + " chat " + shell_quote(path.string()) +
                                        " --temp 0 -n 10 --ctx 128 --device cpu");
  ASSERT_EQ(std::system(start.c_str()), 0);
  const auto screen = [&] {
    std::string text;
    if (FILE* f = popen(("tmux capture-pane -p -t " + session).c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
      pclose(f);
    }
    return text;
  };
  const auto wait_for = [&](const std::string& what, int seconds) {
    for (int i = 0; i < seconds * 2; ++i) {
      if (screen().find(what) != std::string::npos) return true;
      ::usleep(500'000);
    }
    return false;
  };
  EXPECT_TRUE(wait_for("Ctrl-C stops a reply.", 120)) << screen();  // the banner, then the "> " prompt
  (void)std::system(("tmux send-keys -t " + session + " 'What is the capital of France?' Enter").c_str());
  EXPECT_TRUE(wait_for("The capital of France is Paris.", 240)) << screen();
  EXPECT_TRUE(wait_for("reused from the cache", 30)) << screen();
  (void)std::system(("tmux send-keys -t " + session + " /exit Enter").c_str());
  (void)std::system(("tmux kill-session -t " + session + " 2>/dev/null").c_str());
}

// ---- the commands' refusals ---------------------------------------------------------------------

TEST(GenerateCli, BadInputsExit2NamingTheProblem) {
  const std::string fixture = shell_quote((fs::path(AMK_TESTDATA_DIR) / "fixtures" / "tiny-llama").string());
  struct Case {
    std::string args, says;
  };
  const std::vector<Case> cases = {
      {"generate /nonexistent/model.gguf -p hi --device cpu", "/nonexistent/model.gguf"},
      {"generate " + fixture + " -p hi --device cpu", "tokenizer"},  // weights but no tokenizer
      {"generate " + fixture + " -p hi --device tpu", "--device 'tpu'"},
      {"generate " + fixture + " -p hi --device cuda:x", "cuda:N"},
      {"generate " + fixture + " -p hi --temp -1", "temperature"},
      {"generate " + fixture + " -p hi --top-p 2", "top-p"},
      {"generate " + fixture + " -p hi --system s", "--system needs --chat"},
      {"generate " + fixture + " -p ''", "-p is empty"},
      {"perplexity " + fixture + " -f /nonexistent.txt --device cpu", "/nonexistent.txt"},
      {"chat " + fixture + " --device cpu", "tokenizer"},
  };
  for (const Case& c : cases) {
    const auto r = run_amk(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
  }
}

}  // namespace
