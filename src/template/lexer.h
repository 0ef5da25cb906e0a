// Splits template source into tokens the way jinja2's lexer does with trim_blocks and
// lstrip_blocks on: text between tags (with whitespace control already applied), and the tokens
// inside {{ }} and {% %}. Comments disappear here and {% raw %} bodies become text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace amk::tmpl {

enum class TokenKind {
  Text,        // literal output
  PrintBegin,  // {{
  PrintEnd,    // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,      // value already unescaped
  Integer,     // text without '_' separators
  Float,
  Operator,    // + - * / // % ** ~ ( ) [ ] { } == != < > <= >= = . : | ,
  End,
};

struct Token {
  TokenKind kind;
  std::string text;
  int line;
};

// Throws TemplateError for an unterminated tag, comment, string or raw block, or a character
// that is not part of the language.
std::vector<Token> tokenize(std::string_view source);

}  // namespace amk::tmpl
