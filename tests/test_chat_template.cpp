// Chat templates (amk/chat_template.h) against jinja2, the renderer transformers uses: every
// expectation here comes from jinja2 run by tests/support/jinja_oracle.py (AMK_PYTHON), never
// from amk itself. Real templates (SmolLM2's from its GGUF, Qwen3's from its
// tokenizer_config.json, two Llama 3-style ones in tests/data/templates) must render
// byte-identically over multi-turn conversations; a table of small templates covers each
// language feature; hostile templates must fail with a TemplateError that names the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "amk/chat_template.h"
#include "support/amk_command.h"

namespace amk {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

std::string read_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The oracle's python, or empty (the caller skips) when AMK_PYTHON is unset.
std::string oracle_python() {
  const char* python = std::getenv("AMK_PYTHON");
  return python && *python ? python : "";
}

#define REQUIRE_ORACLE()                                                                    \
  const std::string python = oracle_python();                                               \
  if (python.empty()) GTEST_SKIP() << "AMK_PYTHON is unset (scripts/test.sh sets it: the "  \
                                      "virtualenv with jinja2, the oracle)"

#define REQUIRE_ASSETS()                                                                    \
  const char* assets_env = std::getenv("AMK_ASSETS_DIR");                                   \
  if (!assets_env || !*assets_env)                                                          \
    GTEST_SKIP() << "AMK_ASSETS_DIR is unset (scripts/test.sh sets it: the real model and " \
                    "tokenizer files)";                                                     \
  const fs::path assets(assets_env)

fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("amk_chat_template_" + std::to_string(::getpid()) + "_" + name);
}

void run_oracle(const std::string& python, const std::string& args) {
  const std::string command = testing::shell_quote(python) + " " +
                              testing::shell_quote(std::string(AMK_SOURCE_DIR) + "/tests/support/jinja_oracle.py") +
                              " " + args;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

struct Rendered {
  bool ok;
  std::string text;  // the output, or jinja2's error
};

// Renders each {template, context} with jinja2 the way transformers does.
std::vector<Rendered> render_with_jinja2(const std::string& python, const Json& cases) {
  const fs::path in = scratch("cases.json"), out = scratch("rendered.json");
  {
    std::ofstream f(in, std::ios::binary);
    f << cases.dump();
  }
  run_oracle(python, "render " + testing::shell_quote(in.string()) + " " + testing::shell_quote(out.string()));
  std::vector<Rendered> results;
  if (::testing::Test::HasFatalFailure()) return results;
  const Json parsed = Json::parse(read_file(out));
  for (const Json& r : parsed)
    results.push_back({r["ok"].get<bool>(), r["ok"].get<bool>() ? r["output"].get<std::string>() : r["error"].get<std::string>()});
  fs::remove(in);
  fs::remove(out);
  EXPECT_EQ(results.size(), cases.size());
  return results;
}

std::string render_amk(const std::string& source, const Json& context) {
  return ChatTemplate(source).render(context);
}

// ---- real chat templates over conversations -------------------------------------------------

Json msg(const std::string& role, const std::string& content) { return Json{{"role", role}, {"content", content}}; }

// Conversations every template must handle: with and without a system message, one and
// several turns, ending on a user or an assistant turn.
std::vector<Json> plain_conversations() {
  return {
      Json::array({msg("user", "What is the capital of France?")}),
      Json::array({msg("system", "You are terse."), msg("user", "Hi!")}),
      Json::array({msg("user", "Hello"), msg("assistant", "Hi, how can I help?"), msg("user", "Tell me a joke.")}),
      Json::array({msg("system", "  Answer in French.\n"), msg("user", "2+2?"), msg("assistant", "Quatre."),
                   msg("user", "And 3+3?"), msg("assistant", "Six."), msg("user", "Merci — très bien ✓")}),
      Json::array({msg("user", "Quote: \"x\" and 'y' \\ {{ not a tag }}\n\tindented"), msg("assistant", "Done.")}),
  };
}

struct ChatCase {
  Json messages;
  bool add_generation_prompt;
  Json extra = Json::object();
  Json tools = nullptr;
};

// Renders every case with amk's render_chat and with jinja2 (given the variables transformers'
// apply_chat_template passes) and requires byte-identical output.
void expect_same_as_jinja2(const std::string& python, const std::string& source, const std::vector<ChatCase>& cases,
                           const std::optional<std::string>& bos, const std::optional<std::string>& eos) {
  Json oracle_cases = Json::array();
  for (const ChatCase& c : cases) {
    Json vars = Json::object();
    vars["messages"] = c.messages;
    vars["tools"] = c.tools;
    vars["documents"] = nullptr;
    vars["add_generation_prompt"] = c.add_generation_prompt;
    if (bos) vars["bos_token"] = *bos;
    if (eos) vars["eos_token"] = *eos;
    for (const auto& [k, v] : c.extra.items()) vars[k] = v;
    oracle_cases.push_back(Json{{"template", source}, {"context", vars}});
  }
  const std::vector<Rendered> expected = render_with_jinja2(python, oracle_cases);
  ASSERT_EQ(expected.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "case " << i << ": " << cases[i].messages.dump().substr(0, 200)
                                      << " add_generation_prompt=" << cases[i].add_generation_prompt
                                      << " extra=" << cases[i].extra.dump());
    ASSERT_TRUE(expected[i].ok) << "jinja2 failed: " << expected[i].text;
    ChatOptions options;
    options.add_generation_prompt = cases[i].add_generation_prompt;
    options.bos_token = bos;
    options.eos_token = eos;
    options.extra = cases[i].extra;
    options.tools = cases[i].tools;
    std::string actual;
    try {
      actual = render_chat(source, cases[i].messages, options);
    } catch (const TemplateError& e) {
      FAIL() << "amk failed: " << e.what();
    }
    EXPECT_EQ(actual, expected[i].text);
  }
}

std::vector<ChatCase> with_and_without_generation_prompt(const std::vector<Json>& conversations, const Json& extra = Json::object()) {
  std::vector<ChatCase> cases;
  for (const Json& messages : conversations)
    for (const bool add : {false, true}) cases.push_back({messages, add, extra});
  return cases;
}

TEST(ChatTemplateReal, SmolLM2ChatMLFromTheGguf) {
  REQUIRE_ORACLE();
  REQUIRE_ASSETS();
  const fs::path gguf = assets / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(gguf)) GTEST_SKIP() << gguf << " is missing (scripts/fetch_assets.sh fetches it)";
  const fs::path out = scratch("smollm2.jinja");
  run_oracle(python, "gguf-template " + testing::shell_quote(gguf.string()) + " " + testing::shell_quote(out.string()));
  const std::string source = read_file(out);
  fs::remove(out);
  ASSERT_NE(source.find("SmolLM"), std::string::npos) << "not the expected template:\n" << source;
  expect_same_as_jinja2(python, source, with_and_without_generation_prompt(plain_conversations()),
                        "<|im_start|>", "<|im_end|>");

  // The README's reference prompt: the default system prompt and the generation prompt.
  ChatOptions options;
  options.add_generation_prompt = true;
  EXPECT_EQ(render_chat(source, Json::array({msg("user", "What is the capital of France?")}), options),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateReal, Qwen3ThinkingAndTools) {
  REQUIRE_ORACLE();
  REQUIRE_ASSETS();
  const fs::path config = assets / "qwen3" / "tokenizer_config.json";
  if (!fs::exists(config)) GTEST_SKIP() << config << " is missing (scripts/fetch_assets.sh fetches it)";
  const std::string source = chat_template_from_tokenizer_config(read_file(config));
  ASSERT_NE(source.find("enable_thinking"), std::string::npos);

  std::vector<Json> conversations = plain_conversations();
  // Assistant turns that carry their reasoning inline, before and after the last user turn.
  conversations.push_back(Json::array({msg("user", "Why is the sky blue?"),
                                       msg("assistant", "<think>\nRayleigh scattering.\n</think>\n\nBecause of scattering.")}));
  conversations.push_back(Json::array({msg("system", "Be brief."), msg("user", "1+1?"),
                                       msg("assistant", "<think>easy</think>2"), msg("user", "2+2?"),
                                       msg("assistant", "<think>\n\n</think>\n\n4")}));
  // reasoning_content as a field, a tool call and tool responses.
  Json call_turn = msg("assistant", "");
  call_turn["tool_calls"] = Json::array({Json{{"type", "function"},
                                              {"function", Json{{"name", "get_weather"},
                                                                {"arguments", Json{{"city", "Paris"}, {"unit", "°C"}}}}}},
                                         Json{{"function", Json{{"name", "get_time"}, {"arguments", "{\"tz\": \"CET\"}"}}}}});
  Json reasoned = msg("assistant", "It is 18 °C in Paris.");
  reasoned["reasoning_content"] = "The tool said 18.";
  conversations.push_back(Json::array({msg("user", "Weather in Paris?"), call_turn,
                                       msg("tool", "{\"temperature\": 18}"), msg("tool", "12:00"), reasoned}));

  const Json tools = Json::array({Json{{"type", "function"},
                                       {"function", Json{{"name", "get_weather"},
                                                         {"description", "Current weather — in a city"},
                                                         {"parameters", Json{{"type", "object"},
                                                                             {"properties", Json{{"city", Json{{"type", "string"}}}}},
                                                                             {"required", Json::array({"city"})}}}}}}});
  std::vector<ChatCase> cases;
  for (const Json& extra : {Json::object(), Json{{"enable_thinking", true}}, Json{{"enable_thinking", false}}}) {
    for (ChatCase& c : with_and_without_generation_prompt(conversations, extra)) cases.push_back(c);
  }
  for (const bool add : {false, true}) {
    cases.push_back({conversations.back(), add, Json{{"enable_thinking", false}}, tools});
    cases.push_back({plain_conversations()[1], add, Json::object(), tools});
  }
  expect_same_as_jinja2(python, source, cases, std::nullopt, "<|im_end|>");
}

std::vector<ChatCase> llama_cases() {
  std::vector<Json> conversations = plain_conversations();
  conversations.push_back(Json::array({msg("user", "Weather?"), msg("assistant", "{\"name\": \"get_weather\"}"),
                                       msg("tool", "{\"temperature\": 18}")}));
  std::vector<ChatCase> cases = with_and_without_generation_prompt(conversations, Json{{"date_string", "24 Nov 2026"}});
  const Json tools = Json::array({Json{{"name", "get_weather"}, {"parameters", Json{{"city", "string"}, {"days", Json::array({1, 2.5})}}}}});
  cases.push_back({conversations.back(), true, Json{{"date_string", "01 Jan 2025"}}, tools});
  cases.push_back({conversations[1], false, Json{{"date_string", "01 Jan 2025"}}, tools});
  return cases;
}

TEST(ChatTemplateReal, Llama31Style) {
  REQUIRE_ORACLE();
  const std::string source = read_file(fs::path(AMK_TESTDATA_DIR) / "templates" / "llama31_style.jinja");
  expect_same_as_jinja2(python, source, llama_cases(), "<|begin_of_text|>", "<|eot_id|>");
}

TEST(ChatTemplateReal, Llama32Style) {
  REQUIRE_ORACLE();
  const std::string source = read_file(fs::path(AMK_TESTDATA_DIR) / "templates" / "llama32_style.jinja");
  std::vector<ChatCase> cases = llama_cases();
  Json parts = msg("user", "");
  parts["content"] = Json::array({Json{{"type", "text"}, {"text", "Describe"}}, Json{{"type", "image"}},
                                  Json{{"type", "text"}, {"text", "this picture."}}});
  cases.push_back({Json::array({msg("system", "S1"), parts, msg("system", "S2")}), true});
  cases.push_back({Json::array({msg("user", "no date")}), true});  // the template's default date
  expect_same_as_jinja2(python, source, cases, "<|begin_of_text|>", "<|eot_id|>");
}

TEST(ChatTemplateReal, TemplateFromTokenizerConfig) {
  EXPECT_EQ(chat_template_from_tokenizer_config(R"({"chat_template": "{{ x }}"})"), "{{ x }}");
  const std::string named = R"({"chat_template": [{"name": "default", "template": "D"},
                                                  {"name": "tool_use", "template": "T"}]})";
  EXPECT_EQ(chat_template_from_tokenizer_config(named), "D");
  EXPECT_EQ(chat_template_from_tokenizer_config(named, "", /*want_tools=*/true), "T");
  EXPECT_EQ(chat_template_from_tokenizer_config(named, "tool_use"), "T");
  try {
    chat_template_from_tokenizer_config(named, "rag");
    FAIL() << "accepted a missing name";
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("no chat template named 'rag' (it has 'default', 'tool_use')"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(chat_template_from_tokenizer_config(R"({"bos_token": "<s>"})"), TemplateError);
  EXPECT_THROW(chat_template_from_tokenizer_config(R"({"chat_template": 3})"), TemplateError);
  EXPECT_THROW(chat_template_from_tokenizer_config(R"({"chat_template": [{"name": 1}]})"), TemplateError);
  EXPECT_THROW(chat_template_from_tokenizer_config("not json"), TemplateError);
}

// ---- each language feature against jinja2 ----------------------------------------------------

struct FeatureCase {
  const char* name;
  const char* source;
  const char* context;  // JSON
};

// Small templates, each aimed at one feature; jinja2 renders them (or refuses them, and then
// amk must refuse too).
const FeatureCase kFeatures[] = {
    {"text and print", "Hello {{ name }}!", R"({"name": "world"})"},
    {"trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter", "{}"},
    {"lstrip_blocks", "a\n    {% if true %}\n    b\n    {% endif %}\nc", "{}"},
    {"lstrip not on a line with text", "x  {% if true %}\n  y\n  {%+ endif %}\nz\n", "{}"},
    {"minus strips both sides", "a   {%- if true -%}   b   {%- endif -%}   c", "{}"},
    {"print minus", "a \n {{- 'b' -}} \n c", "{}"},
    {"plus keeps trailing newline", "{% if true +%}\nx{% endif %}", "{}"},
    {"comments", "a {# note #} b\n  {# own line #}\nc{#- tight -#}  d", "{}"},
    {"raw", "a\n  {% raw %}\n {{ x }} {% if %}{% endraw %}\nb", "{}"},
    {"trailing newline dropped", "x\n", "{}"},
    {"crlf normalised", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", "{}"},
    {"string escapes", R"({{ 'a\x41\u00e9\q\n\t"' ~ "it's" }})", "{}"},
    {"adjacent strings", "{{ 'a' 'b' \"c\" }}", "{}"},
    {"numbers", "{{ 1_000 }} {{ 1.5e3 }} {{ 2.0 }} {{ 1e16 }} {{ 1.5e-5 }} {{ 0.1 + 0.2 }} {{ -0.0 }} {{ 1e100 }}", "{}"},
    {"arithmetic", "{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 + true }} {{ 2 * 1.5 }} {{ 3 - 5 }}", "{}"},
    {"precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ 1 ~ 2 * 3 }} {{ 1 + 2 ~ 3 if false }} {{ not 1 == 2 }}", "{}"},
    {"repetition", "{{ 'ab' * 3 }} {{ [1] * 2 }} {{ 3 * 'c' }} {{ 'x' * -1 }}|", "{}"},
    {"concat", "{{ 1 ~ 2 ~ none ~ true ~ missing ~ 1.0 }}", "{}"},
    {"comparisons", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ none == none }}", "{}"},
    {"in and not in", "{{ 'a' in 'cat' }} {{ 2 in [1,2] }} {{ 'k' in d }} {{ 'z' not in d }} {{ 1 not in [1] }} {{ 'x' in missing }}", R"({"d": {"k": 1}})"},
    {"and or not", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 1 }} {{ not [] }} {{ not 'a' or false }}", "{}"},
    {"ternary", "{{ 'yes' if 1 else 'no' }} {{ 'a' if 0 else 'b' if 1 else 'c' }} [{{ 'x' if false }}]", "{}"},
    {"literals printed", "{{ [1, 'a', none, true, 1.5, {'k': [2]}] }} {{ (1, 2) }} {{ (1,) }} {{ () }} {{ {'a': 1, 'b': 'x'} }}", "{}"},
    {"repr quoting", R"({{ ["it's", 'a"b', 'x\ny', 'both\'"'] }})", "{}"},
    {"subscripts", "{{ xs[0] }} {{ xs[-1] }} {{ d['k'] }} {{ d.k }} {{ xs[9] }}|{{ d.nope }}|{{ 'héllo'[1] }} {{ xs.0 }}",
     R"({"xs": [1, 2, 3], "d": {"k": "v"}})"},
    {"slices", "{{ xs[1:] }} {{ xs[::2] }} {{ xs[::-1] }} {{ xs[:-5:-1] }} {{ xs[5:] }} {{ 'hello'[1:-1] }} {{ 'héllo'[::-1] }} {{ xs[-2:] }} {{ xs[1:3:0] if false }}",
     R"({"xs": [1, 2, 3, 4]})"},
    {"undefined", "[{{ u }}] {{ u is defined }} {{ u is undefined }} {{ u | default('d') }} {{ u | length }} {% for x in u %}x{% endfor %} {{ u == u2 }} {{ u is none }}", "{}"},
    {"none vs undefined", "{{ n }} {{ n is none }} {{ n is defined }} {{ n | default('d') }} {{ n | default('d', true) }} {{ d.x is defined }}",
     R"({"n": null, "d": {"x": null}})"},
    {"truthiness", "{% for v in [0, 1, '', 'a', [], [0], {}, none, 0.0] %}{{ 'T' if v else 'F' }}{% endfor %}", "{}"},
    {"for loop variables", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
     R"({"xs": ["a", "b", "c"]})"},
    {"loop previtem nextitem cycle", "{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('o', 'e') }};{% endfor %}", R"({"xs": [1, 2, 3]})"},
    {"for else", "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in [1] %}{{ x }}{% else %}no{% endfor %}", "{}"},
    {"for filter", "{% for a in [1,2,3,4] if a is even %}{{ loop.index }}/{{ loop.length }}:{{ a }} {% endfor %}", "{}"},
    {"for over dict and items", "{% for k in d %}{{ k }}{% endfor %} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}",
     R"({"d": {"b": 1, "a": 2}})"},
    {"for unpack tuple", "{% for (a, b) in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}", "{}"},
    {"for over string", "{% for c in 'hé' %}[{{ c }}]{% endfor %}", "{}"},
    {"nested loops", "{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}", "{}"},
    {"break continue", "{% for i in range(6) %}{% if i == 4 %}{% break %}{% endif %}{% if i is odd %}{% continue %}{% endif %}{{ i }}{% endfor %}", "{}"},
    {"loop scope", "{% set y = 1 %}{% for x in [1,2] %}{% if loop.first %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}[{{ y }}]", "{}"},
    {"if elif else", "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %} {% endfor %}", "{}"},
    {"set and unpack", "{% set a = 1 %}{% set b, c = [2, 'x'] %}{{ a }}{{ b }}{{ c }}{% set t = 1, 2 %}{{ t }}", "{}"},
    {"block set", "{% set x %}hi {{ 1 + 1 }}{% endset %}[{{ x }}]{% set y | upper %}up{% endset %}{{ y }}", "{}"},
    {"namespace", "{% set ns = namespace(a=1, found=false) %}{% for x in [1,2,3] %}{% if x == 2 %}{% set ns.found = true %}{% set ns.a = ns.a + x %}{% endif %}{% endfor %}{{ ns.a }} {{ ns.found }} {{ ns.missing }}|{{ ns }}", "{}"},
    {"with", "{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}[{{ a }}]", "{}"},
    {"macro", "{% macro f(a, b='d', c=none) %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{{ f(1) }}{{ f(1, 2) }}{{ f(a=3, c=4) }}{{ f() }}", "{}"},
    {"recursive macro", "{% macro count(n) %}{{ n }}{% if n > 0 %}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(5) }}", "{}"},
    {"macro sees globals", "{% macro greet() %}hi {{ name }}{% endmacro %}{% set name = 'bob' %}{{ greet() }}", R"({"name": "amy"})"},
    {"filter block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}{% filter replace('a', 'o') | trim %}  banana  {% endfilter %}", "{}"},
    {"filters: strings", "{{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'aXbX' | replace('X', 'y') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'Hi' | upper }}{{ 'Hi' | lower }}|{{ 'hello wORLD foo-bar' | title }}|{{ 'hELLO' | capitalize }}",
     "{}"},
    {"filters: conversion", "{{ 3.7 | int }} {{ '12' | int }} {{ ' 4 ' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ '2.5' | int }} {{ 3 | float }} {{ '1.5' | float }} {{ none | string }} {{ [1] | string }} {{ true | lower }}", "{}"},
    {"filters: sequences", "{{ xs | length }} {{ xs | count }} {{ xs | first }} {{ xs | last }} {{ xs | join }} {{ xs | join(', ') }} {{ xs | list }} {{ 'abc' | list }} {{ xs | reverse | list }} {{ 'abc' | reverse }} {{ 'héé' | length }}",
     R"({"xs": [3, 1, 2]})"},
    {"filters: sort unique sum min max", "{{ xs | sort }} {{ xs | sort(reverse=true) }} {{ ['b', 'A', 'a'] | sort }} {{ xs | unique | list }} {{ xs | sum }} {{ xs | min }} {{ xs | max }} {{ ds | sort(attribute='n') | map(attribute='n') | list }} {{ ds | sum(attribute='n') }}",
     R"({"xs": [3, 1, 2, 3], "ds": [{"n": 2}, {"n": 1}]})"},
    {"filters: select and map", "{{ xs | selectattr('a') | list }} {{ xs | selectattr('a', 'equalto', 2) | list }} {{ xs | rejectattr('a') | list }} {{ xs | map(attribute='a') | list }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 0, 2] | reject | list }} {{ ['a', 'b'] | map('upper') | join }} {{ xs | map(attribute='z', default='-') | join }}",
     R"({"xs": [{"a": 1}, {"a": 0}, {"a": 2}]})"},
    {"filters: items and dicts", "{{ d | items | list }} {{ d | length }} {{ d | first }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('b') }} {{ d.get('z', 5) }} {{ d.get('z') }}",
     R"({"d": {"b": 1, "a": 2}})"},
    {"filters: numbers", "{{ -3 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(2) }} {{ 2.561 | round(1, 'floor') }} {{ 2.521 | round(1, 'ceil') }} {{ 3 | round }}", "{}"},
    {"filters: misc", "{{ 'a <b> & \"c\"' | e }} {{ 'x' | safe }} {{ 'one two  three' | wordcount }} [{{ 'a\nb\n\nc' | indent(2) }}] [{{ 'a\nb' | indent(2, true) }}] [{{ 'a\n\nb' | indent(width=3, blank=true) }}]", "{}"},
    {"tojson", "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(sort_keys=true) }}|{{ 'é\u2028' | tojson }}|{{ 'é' | tojson(ensure_ascii=true) }}|{{ none | tojson }}|{{ 1.0 | tojson }}|{{ (1, 2) | tojson }}|{{ x | tojson(separators=(',', ':')) }}",
     R"({"x": {"b": [1, 2.5, "é\n\u0001\"\\"], "a": {}, "c": [], "d": true, "e": null}})"},
    {"tests", "{{ 1 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ 'a' is string }} {{ 'a' is iterable }} {{ {} is sequence }} {{ {} is mapping }} {{ [] is mapping }} {{ none is none }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ true is boolean }}",
     "{}"},
    {"tests with arguments", "{{ 6 is divisibleby 3 }} {{ 5 is divisibleby(3) }} {{ 4 is even }} {{ 3 is odd }} {{ 'a' is equalto 'a' }} {{ 2 is eq(2) }} {{ 1 is lt 2 }} {{ 2 is ge(3) }} {{ 'a' is in 'cat' }} {{ 2 is ne 2 }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ x is not none }}",
     R"({"x": 1})"},
    {"callable test", "{{ range is callable }} {{ 1 is callable }} {{ 'a'.upper is callable }}", "{}"},
    {"string methods", "{{ '  x '.strip() }}|{{ 'xax'.strip('x') }}|{{ '\nab\n'.lstrip('\n') }}|{{ 'ab  '.rstrip() }}|{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'aXa'.replace('a', 'b') }} {{ 'Hi'.upper() }}{{ 'Hi'.lower() }} {{ \"they're bill's\".title() }} {{ 'hELLO'.capitalize() }} {{ 'abc'.find('c') }} {{ 'abca'.count('a') }} {{ ', '.join(['a', 'b']) }} {{ 'a\nb\r\nc'.splitlines() }} {{ '12'.isdigit() }}",
     "{}"},
    {"split then index", "{{ s.split('</think>')[-1].lstrip('\n') }}|{{ s.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') }}",
     R"({"s": "<think>\nreason\n</think>\n\nanswer"})"},
    {"range and dict", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b='x') }} {{ dict({'a': 1}, c=2) }} {{ namespace({'q': 1}).q }}", "{}"},
    {"messages style", "{% for m in messages %}{{ m['role'] }}:{{ m.content }}{% if not loop.last %}\n{% endif %}{% endfor %}",
     R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"},
    {"messages reversed", "{% for m in messages[::-1] %}{{ (messages|length - 1) - loop.index0 }}{{ m.role[0] }}{% endfor %}",
     R"({"messages": [{"role": "user"}, {"role": "assistant"}, {"role": "user"}]})"},
    {"unicode passthrough", "{{ s }} {{ s | length }} {{ s[0] }} {{ s | upper }}", R"({"s": "日本語 ok"})"},
    {"loop outside a loop", "[{{ loop }}] [{{ loop is defined }}]", "{}"},
    {"whitespace heavy", "{%- for m in ms -%}\n  {{- m -}}\n  {%- if not loop.last %}, {% endif -%}\n{%- endfor %}\n  {# c #}\nend", R"({"ms": [1, 2, 3]})"},
    {"strftime_now year", "{{ strftime_now('%Y') | length }}", "{}"},
    // jinja2 refuses these at render time; amk must refuse them too.
    {"error: raise_exception", "{{ raise_exception('boom') }}", "{}"},
    {"error: undefined attribute", "{{ u.x }}", "{}"},
    {"error: attribute of missing key", "{{ d.x.y }}", R"({"d": {}})"},
    {"error: add str and int", "{{ 'a' + 1 }}", "{}"},
    {"error: undefined arithmetic", "{{ u + 1 }}", "{}"},
    {"error: calling a string", "{{ 'a'() }}", "{}"},
    {"error: iterate an int", "{% for x in 3 %}{% endfor %}", "{}"},
    {"error: division by zero", "{{ 1 / 0 }}", "{}"},
    {"error: order of mixed types", "{{ 1 < 'a' }}", "{}"},
    {"error: set attribute on dict", "{% set d = {} %}{% set d.x = 1 %}", "{}"},
    {"error: unpack mismatch", "{% set a, b = [1, 2, 3] %}", "{}"},
    {"error: too many macro args", "{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", "{}"},
    {"error: range too big", "{{ range(1000000) | length }}", "{}"},
    {"error: unknown filter", "{{ 1 | frobnicate }}", "{}"},
    {"error: unknown test", "{{ 1 is frobnicated }}", "{}"},
};

TEST(ChatTemplateFeatures, MatchJinja2) {
  REQUIRE_ORACLE();
  Json cases = Json::array();
  for (const FeatureCase& f : kFeatures) cases.push_back(Json{{"template", f.source}, {"context", Json::parse(f.context)}});
  const std::vector<Rendered> expected = render_with_jinja2(python, cases);
  ASSERT_EQ(expected.size(), std::size(kFeatures));
  for (size_t i = 0; i < expected.size(); ++i) {
    const FeatureCase& f = kFeatures[i];
    SCOPED_TRACE(::testing::Message() << f.name << ": " << f.source);
    const bool expect_error = std::string(f.name).rfind("error:", 0) == 0;
    EXPECT_EQ(expected[i].ok, !expect_error) << "jinja2: " << expected[i].text;
    if (!expected[i].ok) {
      try {
        const std::string actual = render_amk(f.source, Json::parse(f.context));
        ADD_FAILURE() << "amk rendered " << testing::shell_quote(actual) << " where jinja2 failed: " << expected[i].text;
      } catch (const TemplateError& e) {
        EXPECT_FALSE(e.detail().empty());
      }
      continue;
    }
    try {
      EXPECT_EQ(render_amk(f.source, Json::parse(f.context)), expected[i].text);
    } catch (const TemplateError& e) {
      ADD_FAILURE() << "amk failed: " << e.what() << "\njinja2 rendered: " << expected[i].text;
    }
  }
}

// ---- errors: named, located, and never a crash ------------------------------------------------

std::string error_of(const std::string& source, const Json& context = Json::object(), TemplateLimits limits = {}) {
  try {
    const std::string out = ChatTemplate(source, limits).render(context);
    ADD_FAILURE() << "rendered without error (" << out.size() << " bytes): " << source.substr(0, 120);
  } catch (const TemplateError& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& source, const std::string& needle, const Json& context = Json::object(),
                  TemplateLimits limits = {}) {
  const std::string error = error_of(source, context, limits);
  EXPECT_NE(error.find(needle), std::string::npos) << "error: " << error << "\nexpected it to contain: " << needle;
}

TEST(ChatTemplateErrors, UnsupportedConstructsAreNamedWithTheirLine) {
  expect_error("a\n{% include 'x.jinja' %}", "line 2: unsupported tag 'include'");
  expect_error("{% extends 'base' %}", "unsupported tag 'extends'");
  expect_error("{% call m() %}{% endcall %}", "unsupported tag 'call'");
  expect_error("\n\n{% frobnicate %}", "line 3: unknown tag 'frobnicate'");
  expect_error("{{ x | dictsort }}", "unsupported filter 'dictsort'");
  expect_error("{{ x | nope }}", "unknown filter 'nope'");
  expect_error("{% for x in xs recursive %}{% endfor %}", "recursive for loops are not supported");
  expect_error("{{ f(*args) }}", "*args and **kwargs");
  expect_error("{{ '%s' % 1 }}", "printf-style string formatting");
  expect_error("{{ '{}'.format(1) }}", "str.format() is not supported");
  expect_error("{{ {1: 2} }}", "dict keys must be strings");
  expect_error("{{ 99999999999999999999 }}", "does not fit in 64 bits");
  expect_error("{{ 9223372036854775807 + 1 }}", "integer overflow");
}

TEST(ChatTemplateErrors, SyntaxErrorsSayWhatIsWrong) {
  expect_error("{{ x", "unterminated '{{' tag (opened on line 1): missing '}}'");
  expect_error("a\n{% if x", "line 2: unterminated '{%' tag");
  expect_error("{# note", "unterminated comment (opened on line 1)");
  expect_error("{% raw %}x", "unterminated raw block");
  expect_error("{{ 'abc }}", "unterminated string literal");
  expect_error("{% if x %}a", "'if' opened on line 1 is never closed (expected 'endif')");
  expect_error("{% for x in y %}\n{% endif %}", "line 2: unexpected 'endif' inside 'for' opened on line 1");
  expect_error("{% endfor %}", "unexpected 'endfor': no block is open");
  expect_error("{% break %}", "'break' outside a for loop");
  expect_error("{% if %}{% endif %}", "expected an expression, got end of statement block");
  expect_error("{{ (1 }}", "unexpected '}'");
  expect_error("{{ (1 ]", "unexpected ']'");
  expect_error("{{ f(1 2) }}", "expected ',', got number 2");
  expect_error("{{ 1 ] }}", "unexpected ']'");
  expect_error("{{ a $ b }}", "unexpected character '$'");
  expect_error("{% set x = 1 %}{% set x.y = 2 %}", "only a namespace() takes attributes");
}

TEST(ChatTemplateErrors, RuntimeErrorsCarryTheLine) {
  const std::string error = error_of("line one\n{{ raise_exception('no system role allowed') }}");
  EXPECT_NE(error.find("line 2: raise_exception(): no system role allowed"), std::string::npos) << error;
  expect_error("\n\n{{ missing.attribute }}", "line 3: 'missing' is undefined");
  expect_error("{{ d.x.y }}", "'dict object' has no attribute 'x'", Json{{"d", Json::object()}});
  expect_error("{{ 'a' + 1 }}", "can only concatenate str (not \"int\") to str");
}

TEST(ChatTemplateErrors, HostileTemplatesFailWithinTheLimits) {
  // Deep nesting in the source: refused while parsing, long before the stack is at risk.
  expect_error("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}", "nested more than");
  expect_error("{{ " + std::string(50000, '[') + std::string(50000, ']') + " }}", "nested more than");
  expect_error("{{ " + std::string(50000, '-') + "1 }}", "nested more than");
  std::string chain = "{{ 1";
  for (int i = 0; i < 20000; ++i) chain += " + 1";
  expect_error(chain + " }}", "expression nested more than");
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  expect_error(ifs, "template nested more than");
  std::string nots = "{{ ";
  for (int i = 0; i < 50000; ++i) nots += "not ";
  expect_error(nots + "x }}", "nested more than");

  // Runaway recursion, loops and output.
  expect_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "macro calls nested deeper than 50");
  expect_error("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
               "more than 1000000 loop iterations");
  expect_error("{% for a in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "output longer than");
  expect_error("{% set ns = namespace(s='xx') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               "longer than the");
  expect_error("{{ 'x' * 100000000000 }}", "string repetition beyond");
  expect_error("{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
               "a list longer than");
  // Values nested by hand or containing themselves cannot recurse without bound either.
  expect_error("{% set ns = namespace(v=[]) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}{% endfor %}",
               "a list or dict nested deeper than 512 levels");
  expect_error("{% set ns = namespace(v=[]) %}{% for i in range(300) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}",
               "nested too deeply");
  // A chain of namespaces (each holding the previous one) is freed without deep recursion, and a
  // namespace holding itself through a tuple (found by the fuzzer as a leak) renders and is freed.
  EXPECT_EQ(ChatTemplate("{% set ns = namespace(v=0) %}{% for i in range(100000) %}{% set ns.v = namespace(v=ns.v) %}"
                         "{% endfor %}done").render(Json::object()), "done");
  EXPECT_EQ(ChatTemplate("{% set ns = namespace(s='') %}{% set ns.s = ns, 'x' %}{{ ns.s[1] }}").render(Json::object()), "x");
  expect_error("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}", "nested too deeply");
  expect_error("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns | tojson }}", "not JSON serializable");

  // Limits are the caller's to choose.
  TemplateLimits tight;
  tight.max_output_bytes = 10;
  expect_error("{{ 'x' * 11 }}", "10-byte limit", Json::object(), tight);
  EXPECT_EQ(ChatTemplate("{{ 'x' * 10 }}", tight).render(Json::object()), "xxxxxxxxxx");
}

TEST(ChatTemplateErrors, ArbitraryBytesNeverCrash) {
  // Invalid UTF-8 and NULs pass through text and strings; lengths count them one per byte.
  const std::string bytes("a\xff\xfe\x00b", 5);
  EXPECT_EQ(ChatTemplate(bytes).render(Json::object()), bytes);
  EXPECT_EQ(ChatTemplate("{{ s | length }}").render(Json{{"s", "\xc3\xa9"}}), "1");
  EXPECT_THROW(ChatTemplate("{{ '\\ud800' }}"), TemplateError);  // a lone surrogate cannot be encoded
}

TEST(ChatTemplateApi, RenderChatPassesTransformersVariables) {
  const std::string source =
      "{{ bos_token }}|{{ eos_token is defined }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|"
      "{{ messages | length }}|{{ enable_thinking }}";
  ChatOptions options;
  options.bos_token = "<s>";
  options.add_generation_prompt = true;
  options.extra = Json{{"enable_thinking", false}};
  EXPECT_EQ(render_chat(source, Json::array({msg("user", "x")}), options), "<s>|False|None|None|True|1|False");
  EXPECT_THROW(render_chat(source, Json::object(), options), std::invalid_argument);
  // A template is parsed once and rendered many times.
  const ChatTemplate t("{{ n * 2 }}");
  EXPECT_EQ(t.render(Json{{"n", 2}}), "4");
  EXPECT_EQ(t.render(Json{{"n", 21}}), "42");
}

}  // namespace
}  // namespace amk

namespace amk {
namespace {

TEST(ChatTemplateCli, TemplateCommandPrintsWhatJinja2Renders) {
  REQUIRE_ORACLE();
  const fs::path source = fs::path(AMK_TESTDATA_DIR) / "templates" / "llama31_style.jinja";
  const Json messages = Json::array({msg("system", "Be kind."), msg("user", "Hi — there"), msg("assistant", "Hello."),
                                     msg("user", "Bye")});
  const fs::path messages_file = scratch("messages.json");
  {
    std::ofstream f(messages_file, std::ios::binary);
    f << messages.dump();
  }
  Json vars = Json{{"messages", messages}, {"tools", nullptr}, {"documents", nullptr},
                   {"add_generation_prompt", true}, {"bos_token", "<|begin_of_text|>"}, {"date_string", "2 Feb 2025"}};
  const std::vector<Rendered> expected =
      render_with_jinja2(python, Json::array({Json{{"template", read_file(source)}, {"context", vars}}}));
  ASSERT_EQ(expected.size(), 1u);
  ASSERT_TRUE(expected[0].ok) << expected[0].text;

  const testing::CommandResult r = testing::run_amk(
      "template " + testing::shell_quote(source.string()) + " --messages " + testing::shell_quote(messages_file.string()) +
      " --add-generation-prompt --var bos_token='<|begin_of_text|>' --var 'date_string=\"2 Feb 2025\"'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expected[0].text);

  // A template error exits 1 and names the line; a missing file exits 2.
  const fs::path bad = scratch("bad.jinja");
  {
    std::ofstream f(bad, std::ios::binary);
    f << "ok\n{{ raise_exception('no tools here') }}";
  }
  const testing::CommandResult failed = testing::run_amk("template " + testing::shell_quote(bad.string()) +
                                                         " --messages " + testing::shell_quote(messages_file.string()));
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_NE(failed.err.find("line 2: raise_exception(): no tools here"), std::string::npos) << failed.err;
  const testing::CommandResult missing = testing::run_amk("template /nonexistent/t.jinja --messages " +
                                                          testing::shell_quote(messages_file.string()));
  EXPECT_EQ(missing.exit_code, 2);
  fs::remove(bad);
  fs::remove(messages_file);
}

}  // namespace
}  // namespace amk
