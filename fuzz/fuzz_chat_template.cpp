// libFuzzer target for the chat-template interpreter (amk/chat_template.h): parse the input as a
// template and render it over a fixed conversation.
//
// Properties, for any bytes: ChatTemplate() and render() return or throw TemplateError with a
// message, nothing else (no crash, sanitizer report, hang or unbounded memory); a template that
// renders renders the same text again (rendering has no hidden state) within the output limit.
// The limits are tightened so that hostile loops and output bombs end quickly.
//
// Build and run: README "Benchmarks and fuzzing"; results in docs/FUZZING.md.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "amk/chat_template.h"

namespace {

[[noreturn]] void die(const char* what, std::string_view input) {
  std::fprintf(stderr, "fuzz_chat_template: %s\n%.*s\n", what,
               static_cast<int>(std::min<size_t>(input.size(), 4000)), input.data());
  std::abort();
}

const nlohmann::ordered_json& variables() {
  static const nlohmann::ordered_json vars = [] {
    nlohmann::ordered_json v = nlohmann::ordered_json::object();
    v["messages"] = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Hi <b>there</b> \u00e9\u65e5"},
      {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!", "reasoning_content": null,
       "tool_calls": [{"function": {"name": "f", "arguments": {"x": [1, 2.5, true, null]}}}]},
      {"role": "tool", "content": "{\"ok\": 1}"},
      {"role": "user", "content": ""}
    ])");
    v["tools"] = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
    v["add_generation_prompt"] = true;
    v["bos_token"] = "<s>";
    v["eos_token"] = "</s>";
    v["enable_thinking"] = false;
    return v;
  }();
  return vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  amk::TemplateLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_loop_iterations = 20'000;
  try {
    const amk::ChatTemplate tmpl(source, limits);
    std::string first;
    try {
      first = tmpl.render(variables());
    } catch (const amk::TemplateError& e) {
      if (std::string_view(e.what()).empty()) die("render refused without a message", source);
      return 0;
    }
    if (first.size() > limits.max_output_bytes) die("output beyond the limit", source);
    // strftime_now can change between two calls; everything else must repeat exactly.
    if (source.find("strftime_now") == std::string_view::npos && tmpl.render(variables()) != first)
      die("two renders differ", source);
  } catch (const amk::TemplateError& e) {
    if (std::string_view(e.what()).empty()) die("refused without a message", source);
  } catch (const std::exception& e) {
    die(e.what(), source);  // anything but TemplateError is a bug
  }
  return 0;
}
