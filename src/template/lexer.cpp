#include "template/lexer.h"

#include <fmt/format.h>

#include <cstdint>

#include "amk/chat_template.h"
#include "model/strict_json.h"
#include "template/utf8.h"

namespace amk::tmpl {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// jinja2 (keep_trailing_newline off) reads "\r\n", "\r" and "\n" all as "\n" and drops one
// newline at the very end of the template.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// The body of a string literal as jinja2 reads it: Python's "unicode-escape" decoding of the
// text with non-ASCII characters first turned into backslash escapes (so they survive, and a
// backslash before one stays a backslash).
std::string unescape_string(std::string_view body, int line) {
  std::string out;
  size_t i = 0;
  auto hex_value = [&](size_t at, int digits) -> uint32_t {
    if (at + digits > body.size())
      throw TemplateError("truncated \\x, \\u or \\U escape in a string literal", line);
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      const char c = body[at + k];
      int d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else throw TemplateError("malformed \\x, \\u or \\U escape in a string literal", line);
      v = v * 16 + uint32_t(d);
    }
    return v;
  };
  auto put_code_point = [&](uint32_t cp) {
    if (cp > 0x10FFFF) throw TemplateError("escape beyond U+10FFFF in a string literal", line);
    if (cp >= 0xD800 && cp <= 0xDFFF)
      throw TemplateError("escape of a lone surrogate in a string literal (not encodable)", line);
    append_utf8(out, cp);
  };
  while (i < body.size()) {
    const char c = body[i];
    if (c != '\\') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 >= body.size()) {  // cannot happen: the lexer never ends a string on a backslash
      out += '\\';
      break;
    }
    const char e = body[i + 1];
    i += 2;
    switch (e) {
      case '\n': break;  // a line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': put_code_point(hex_value(i, 2)); i += 2; break;
      case 'u': put_code_point(hex_value(i, 4)); i += 4; break;
      case 'U': put_code_point(hex_value(i, 8)); i += 8; break;
      case 'N': throw TemplateError("\\N{...} escapes in string literals are not supported", line);
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = uint32_t(e - '0');
          for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k, ++i)
            v = v * 8 + uint32_t(body[i] - '0');
          put_code_point(v);
        } else if (static_cast<unsigned char>(e) >= 0x80) {
          // Python escaped the character itself first, so the backslash escapes that escape's
          // backslash: "\é" reads as the four characters \xe9.
          size_t at = i - 1;
          const uint32_t cp = decode_utf8(body, at);
          i = at;
          out += '\\';
          out += cp < 0x100 ? fmt::format("x{:02x}", cp)
                 : cp < 0x10000 ? fmt::format("u{:04x}", cp) : fmt::format("U{:08x}", cp);
        } else {
          out += '\\';  // an unknown escape keeps its backslash
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_text(src_.substr(pos_), line_);
        advance_to(src_.size());
        break;
      }
      const char kind = src_[tag + 1];
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')
                            ? src_[tag + 2] : '\0';
      std::string text = src_.substr(pos_, tag - pos_);
      apply_whitespace_control(text, sign, kind != '{');
      emit_text(std::move(text), line_);
      advance_to(tag);
      const int tag_line = line_;
      if (kind == '#') {
        lex_comment(tag + 2 + (sign ? 1 : 0), tag_line);
      } else if (kind == '%' && try_raw(tag, tag_line)) {
        // done: the raw body is text
      } else {
        lex_tag(kind, tag + 2 + (sign ? 1 : 0), tag_line);
      }
    }
    tokens_.push_back({TokenKind::End, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return std::string::npos;
  }

  void advance_to(size_t to) {
    for (size_t i = pos_; i < to; ++i)
      if (src_[i] == '\n') ++line_;
    pos_ = to;
  }

  void emit_text(std::string text, int line) {
    if (!text.empty()) tokens_.push_back({TokenKind::Text, std::move(text), line});
  }

  // "{%-" strips all whitespace before the tag. Otherwise lstrip_blocks strips the spaces and
  // tabs between the start of the line and a block or comment tag, unless "{%+" asks not to;
  // "the start of the line" includes the point right after a tag that ended with a newline.
  void apply_whitespace_control(std::string& text, char sign, bool block_or_comment) const {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0 && is_space(text[end - 1])) --end;
      text.resize(end);
    } else if (sign != '+' && block_or_comment) {
      const size_t newline = text.rfind('\n');
      const size_t line_start = newline == std::string::npos ? 0 : newline + 1;
      if (line_start > 0 || line_starting_) {
        bool blank = true;
        for (size_t i = line_start; i < text.size(); ++i) blank = blank && is_space(text[i]);
        if (blank) text.resize(line_start);
      }
    }
  }

  // After a tag's closing delimiter: "-" strips all whitespace that follows, "+" nothing, and
  // a plain block or comment end eats one newline (trim_blocks).
  void finish_tag(size_t after_delimiter, char sign, bool trims_newline) {
    size_t end = after_delimiter;
    if (sign == '-') {
      while (end < src_.size() && is_space(src_[end])) ++end;
    } else if (sign != '+' && trims_newline && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    advance_to(end);
    line_starting_ = end > 0 && src_[end - 1] == '\n';
  }

  void lex_comment(size_t body, int open_line) {
    const size_t close = src_.find("#}", body);
    if (close == std::string::npos)
      throw TemplateError(fmt::format("unterminated comment (opened on line {})", open_line), open_line);
    const char sign = close > body && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : '\0';
    advance_to(close);
    finish_tag(close + 2, sign, true);
  }

  // {% raw %} ... {% endraw %}: the body is text, tags in it untouched. The opening tag never
  // eats a newline (jinja2's rule for it has no trim_blocks suffix).
  bool try_raw(size_t tag, int open_line) {
    size_t i = tag + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    while (i < src_.size() && is_space(src_[i])) ++i;
    if (src_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    while (i < src_.size() && is_space(src_[i])) ++i;
    size_t body;
    if (src_.compare(i, 3, "-%}") == 0) {
      body = i + 3;
      while (body < src_.size() && is_space(src_[body])) ++body;
    } else if (src_.compare(i, 2, "%}") == 0) {
      body = i + 2;
    } else {
      return false;
    }
    advance_to(body);
    line_starting_ = body > 0 && src_[body - 1] == '\n';
    for (size_t end = src_.find("{%", body); end != std::string::npos; end = src_.find("{%", end + 1)) {
      size_t j = end + 2;
      const char sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : '\0';
      if (sign) ++j;
      while (j < src_.size() && is_space(src_[j])) ++j;
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      while (j < src_.size() && is_space(src_[j])) ++j;
      char close_sign = '\0';
      if (src_.compare(j, 3, "-%}") == 0 || src_.compare(j, 3, "+%}") == 0) {
        close_sign = src_[j];
        j += 3;
      } else if (src_.compare(j, 2, "%}") == 0) {
        j += 2;
      } else {
        continue;
      }
      std::string text = src_.substr(body, end - body);
      apply_whitespace_control(text, sign, true);
      emit_text(std::move(text), line_);
      advance_to(j);
      finish_tag(j, close_sign, true);
      return true;
    }
    throw TemplateError(fmt::format("unterminated raw block (opened on line {}): missing "
                                    "{{% endraw %}}", open_line), open_line);
  }

  void lex_tag(char kind, size_t start, int open_line) {
    const bool block = kind == '%';
    tokens_.push_back({block ? TokenKind::BlockBegin : TokenKind::PrintBegin, "", open_line});
    advance_to(start);
    std::string brackets;  // open ( [ { inside the tag: a '}}' there closes a dict, not the tag
    const char* close = block ? "%}" : "}}";
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= src_.size())
        throw TemplateError(fmt::format("unterminated '{}' tag (opened on line {}): missing '{}'",
                                        block ? "{%" : "{{", open_line, close), open_line);
      if (brackets.empty()) {
        if ((src_[pos_] == '-' || src_[pos_] == '+') && src_.compare(pos_ + 1, 2, close) == 0 &&
            (block || src_[pos_] == '-')) {
          const char sign = src_[pos_];
          tokens_.push_back({block ? TokenKind::BlockEnd : TokenKind::PrintEnd, "", line_});
          finish_tag(pos_ + 3, sign, block);
          return;
        }
        if (src_.compare(pos_, 2, close) == 0) {
          tokens_.push_back({block ? TokenKind::BlockEnd : TokenKind::PrintEnd, "", line_});
          finish_tag(pos_ + 2, '\0', block);
          return;
        }
      }
      lex_token(brackets);
    }
  }

  void lex_token(std::string& brackets) {
    const char c = src_[pos_];
    const int line = line_;
    if (is_digit(c)) return lex_number();
    if (is_name_start(c)) {
      size_t end = pos_;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      tokens_.push_back({TokenKind::Name, src_.substr(pos_, end - pos_), line});
      advance_to(end);
      return;
    }
    if (c == '\'' || c == '"') {
      size_t end = pos_ + 1;
      while (end < src_.size() && src_[end] != c) end += src_[end] == '\\' ? 2 : 1;
      if (end >= src_.size())
        throw TemplateError("unterminated string literal", line);
      tokens_.push_back({TokenKind::String, unescape_string(std::string_view(src_).substr(pos_ + 1, end - pos_ - 1), line), line});
      advance_to(end + 1);
      return;
    }
    static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const std::string_view op : kTwoChar) {
      if (src_.compare(pos_, 2, op) == 0) {
        tokens_.push_back({TokenKind::Operator, std::string(op), line});
        advance_to(pos_ + 2);
        return;
      }
    }
    if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos)
      throw TemplateError(fmt::format("unexpected character {} in a tag", model_detail::quote_name(std::string(1, c))), line);
    if (c == '(' || c == '[' || c == '{') {
      brackets += c;
    } else if (c == ')' || c == ']' || c == '}') {
      const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (brackets.empty() || brackets.back() != open)
        throw TemplateError(fmt::format("unexpected '{}'", c), line);
      brackets.pop_back();
    }
    tokens_.push_back({TokenKind::Operator, std::string(1, c), line});
    advance_to(pos_ + 1);
  }

  // Digits with optional '_' separators; a float needs digits after the '.' or an exponent.
  void lex_number() {
    const int line = line_;
    auto digits = [&](size_t i) {
      const size_t start = i;
      while (i < src_.size() && (is_digit(src_[i]) || (src_[i] == '_' && i > start && i + 1 < src_.size() && is_digit(src_[i + 1])))) ++i;
      return i;
    };
    size_t end = digits(pos_);
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
      end = digits(end + 1);
      is_float = true;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && is_digit(src_[e])) {
        end = digits(e);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = pos_; i < end; ++i)
      if (src_[i] != '_') text += src_[i];
    tokens_.push_back({is_float ? TokenKind::Float : TokenKind::Integer, text, line});
    advance_to(end);
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace amk::tmpl
