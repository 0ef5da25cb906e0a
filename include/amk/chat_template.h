// Chat templates: the Jinja programs that tokenizer_config.json (and GGUF's
// tokenizer.chat_template) use to turn a conversation into the prompt text a model was trained on.
//
// amk renders them with its own interpreter of the Jinja subset that real chat templates use, and
// aims to be byte-identical to Hugging Face transformers (jinja2's ImmutableSandboxedEnvironment
// with trim_blocks and lstrip_blocks, loop controls, and transformers' raise_exception, tojson and
// strftime_now). Templates are untrusted input: anything outside the subset is a TemplateError
// that names the construct and the line, and the limits below stop hostile templates from
// exhausting the stack, memory or time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace amk {

// A template that cannot be parsed or rendered: syntax errors, unsupported constructs, runtime
// errors (undefined values used, type errors), raise_exception() and exceeded limits. The message
// starts with "line N: " when the problem has a line (lines count from 1).
class TemplateError : public std::runtime_error {
 public:
  TemplateError(const std::string& message, int line);
  int line() const { return line_; }  // 0 when not tied to a line
  const std::string& detail() const { return detail_; }  // the message without the line

 private:
  int line_;
  std::string detail_;
};

struct TemplateLimits {
  size_t max_output_bytes = size_t{16} << 20;  // also bounds every string and list built
  int64_t max_loop_iterations = 1'000'000;     // over the whole render
  int max_nesting = 100;       // blocks and expressions nested in the source
  int max_call_depth = 50;     // macro calls inside macro calls (recursion)
  int max_value_depth = 100;   // nesting of lists/dicts printed, compared or given to tojson
};

// A parsed template; render() may be called any number of times.
class ChatTemplate {
 public:
  // Throws TemplateError on a syntax error or a construct outside the subset.
  explicit ChatTemplate(std::string_view source, TemplateLimits limits = {});
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // `variables` is a JSON object: each member becomes a template variable. Throws TemplateError.
  std::string render(const nlohmann::ordered_json& variables) const;

 private:
  struct Parsed;
  std::unique_ptr<Parsed> parsed_;
  TemplateLimits limits_;
};

struct ChatOptions {
  bool add_generation_prompt = false;
  // Special tokens as transformers passes them; an absent one is an undefined variable.
  std::optional<std::string> bos_token, eos_token;
  // The `tools` list; null (the default) renders as None, as transformers passes it.
  nlohmann::ordered_json tools = nullptr;
  // Any further variables (an object): enable_thinking, date_string, ...
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// Renders `messages` (a JSON array of {"role", "content", ...}) through the template source.
// Throws TemplateError (std::invalid_argument when `messages` is not an array or `extra` not an
// object).
std::string render_chat(std::string_view template_source, const nlohmann::ordered_json& messages,
                        const ChatOptions& options = {});

// The chat template in a tokenizer_config.json's text: "chat_template" is either the template
// or a list of {"name", "template"}; from a list, `name` picks one ("" picks "default", or
// "tool_use" when `want_tools` and it exists, as transformers does). Throws TemplateError
// naming what is missing or malformed.
std::string chat_template_from_tokenizer_config(std::string_view json_text,
                                                std::string_view name = "",
                                                bool want_tools = false);

}  // namespace amk
