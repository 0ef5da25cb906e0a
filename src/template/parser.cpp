#include "template/parser.h"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <set>

#include "amk/chat_template.h"
#include "template/lexer.h"

namespace amk::tmpl {
namespace {

// Tags jinja2 has that this interpreter does not; named so the error says "not supported"
// rather than "unknown".
const std::set<std::string, std::less<>> kUnsupportedTags = {
    "extends", "include", "import", "from", "block", "call", "autoescape", "do", "trans",
    "pluralize", "generation", "endgeneration", "debug"};

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::Text: return "text";
    case TokenKind::PrintBegin: return "'{{'";
    case TokenKind::PrintEnd: return "end of print statement '}}'";
    case TokenKind::BlockBegin: return "'{%'";
    case TokenKind::BlockEnd: return "end of statement block '%}'";
    case TokenKind::End: return "end of template";
    case TokenKind::String: return "a string";
    case TokenKind::Integer: case TokenKind::Float: return "number " + t.text;
    default: return "'" + t.text + "'";
  }
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_nesting) : tokens_(std::move(tokens)), max_nesting_(max_nesting) {}

  Template run() {
    Template t;
    t.body = parse_body({}, "", 0);
    return t;
  }

 private:
  // ---- token helpers --------------------------------------------------------------------------
  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() {
    const Token& t = peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool is_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::Operator && peek(ahead).text == op;
  }
  bool is_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::Name && peek(ahead).text == name;
  }
  [[noreturn]] void fail(const std::string& message, int line) const { throw TemplateError(message, line); }
  [[noreturn]] void fail_expected(std::string_view what) const {
    fail(fmt::format("expected {}, got {}", what, describe(peek())), peek().line);
  }
  void expect_op(std::string_view op) {
    if (!is_op(op)) fail_expected(fmt::format("'{}'", op));
    next();
  }
  void expect_block_end(std::string_view tag) {
    if (peek().kind != TokenKind::BlockEnd)
      fail(fmt::format("expected '%}}' to end the '{}' tag, got {}", tag, describe(peek())), peek().line);
    next();
  }
  std::string expect_name(std::string_view what) {
    if (peek().kind != TokenKind::Name) fail_expected(what);
    return next().text;
  }

  // Bounds the parser's own recursion.
  struct NestingGuard {
    Parser& p;
    NestingGuard(Parser& parser, int line) : p(parser) {
      if (++p.nesting_ > p.max_nesting_)
        p.fail(fmt::format("template nested more than {} levels deep", p.max_nesting_), line);
    }
    ~NestingGuard() { --p.nesting_; }
  };

  // Bounds the tree: a node is one level deeper than its deepest child, so long operator chains
  // (1+1+...+1), which the parser builds in a loop, are refused as well.
  ExprPtr make(ExprKind kind, int line, std::vector<ExprPtr> items = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    e->items = std::move(items);
    return e;
  }
  ExprPtr checked(ExprPtr e) {
    int depth = 0;
    for (const auto& child : e->items)
      if (child) depth = std::max(depth, depth_of(*child));
    for (const auto& kw : e->keywords) depth = std::max(depth, depth_of(*kw.second));
    if (depth + 1 > max_nesting_)
      fail(fmt::format("expression nested more than {} levels deep", max_nesting_), e->line);
    e->depth = depth + 1;
    return e;
  }
  static int depth_of(const Expr& e) { return e.depth; }

  // ---- statements -----------------------------------------------------------------------------
  // Parses until a {% NAME %} with NAME in `ends`; consumes "{%" and NAME and returns NAME.
  // `open_tag`/`open_line` describe the block being parsed, for "never closed" errors.
  Body parse_body(const std::vector<std::string>& ends, std::string_view open_tag, int open_line,
                  std::string* end_found = nullptr) {
    NestingGuard guard(*this, open_line);
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::End) {
        if (ends.empty()) return body;
        fail(fmt::format("unexpected end of template: '{}' opened on line {} is never closed "
                         "(expected '{}')", open_tag, open_line, ends.back()), t.line);
      }
      if (t.kind == TokenKind::Text) {
        auto s = stmt(StmtKind::Text, t.line);
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::PrintBegin) {
        next();
        auto s = stmt(StmtKind::Print, t.line);
        s->expr = parse_tuple(true);
        if (peek().kind != TokenKind::PrintEnd) fail_expected("'}}' to end the print statement");
        next();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::BlockBegin) {
        next();
        const Token& name = peek();
        if (name.kind != TokenKind::Name) fail_expected("a tag name after '{%'");
        for (const std::string& end : ends) {
          if (name.text == end) {
            next();
            if (end_found) *end_found = end;
            return body;
          }
        }
        body.push_back(parse_statement(open_tag, open_line));
      } else {
        fail(fmt::format("unexpected {}", describe(t)), t.line);
      }
    }
  }

  std::unique_ptr<Stmt> stmt(StmtKind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  std::unique_ptr<Stmt> parse_statement(std::string_view enclosing, int enclosing_line) {
    const Token& name_token = next();
    const std::string name = name_token.text;
    const int line = name_token.line;
    if (name == "if") return parse_if(line);
    if (name == "for") return parse_for(line);
    if (name == "set") return parse_set(line);
    if (name == "macro") return parse_macro(line);
    if (name == "filter") return parse_filter_block(line);
    if (name == "with") return parse_with(line);
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail(fmt::format("'{}' outside a for loop", name), line);
      expect_block_end(name);
      return stmt(name == "break" ? StmtKind::Break : StmtKind::Continue, line);
    }
    if (kUnsupportedTags.count(name))
      fail(fmt::format("unsupported tag '{}' (amk renders a subset of Jinja: if, for, set, macro, "
                       "filter, with, raw, break, continue)", name), line);
    if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") {
      if (enclosing.empty()) fail(fmt::format("unexpected '{}': no block is open", name), line);
      fail(fmt::format("unexpected '{}' inside '{}' opened on line {}", name, enclosing, enclosing_line), line);
    }
    fail(fmt::format("unknown tag '{}'", name), line);
  }

  std::unique_ptr<Stmt> parse_if(int line) {
    auto s = stmt(StmtKind::If, line);
    s->expr = parse_tuple(false);
    expect_block_end("if");
    std::string end;
    s->body = parse_body({"elif", "else", "endif"}, "if", line, &end);
    if (end == "elif") {
      s->else_body.push_back(parse_if(tokens_[pos_ - 1].line));
      return s;  // the nested if consumed the endif
    }
    if (end == "else") {
      expect_block_end("else");
      s->else_body = parse_body({"endif"}, "if", line);
    }
    expect_block_end("endif");
    return s;
  }

  // Names for `for` and `set`: a, or a, b, or (a, b).
  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool parens = is_op("(");
    if (parens) next();
    names.push_back(expect_name("a variable name"));
    while (is_op(",")) {
      next();
      if (peek().kind != TokenKind::Name) break;
      names.push_back(next().text);
    }
    if (parens) expect_op(")");
    return names;
  }

  std::unique_ptr<Stmt> parse_for(int line) {
    auto s = stmt(StmtKind::For, line);
    s->targets = parse_targets();
    if (!is_name("in")) fail_expected("'in'");
    next();
    s->expr = parse_tuple(false, /*stop_at_if=*/true);
    if (is_name("if")) {
      next();
      s->condition = parse_expression();
    }
    if (is_name("recursive")) fail("recursive for loops are not supported", peek().line);
    expect_block_end("for");
    ++loop_depth_;
    std::string end;
    s->body = parse_body({"else", "endfor"}, "for", line, &end);
    --loop_depth_;
    if (end == "else") {
      expect_block_end("else");
      s->else_body = parse_body({"endfor"}, "for", line);
    }
    expect_block_end("endfor");
    return s;
  }

  std::unique_ptr<Stmt> parse_set(int line) {
    if (peek().kind == TokenKind::Name && is_op(".", 1)) {
      auto s = stmt(StmtKind::Set, line);
      s->is_attribute = true;
      s->targets.push_back(next().text);
      next();
      s->targets.push_back(expect_name("an attribute name"));
      expect_op("=");
      s->expr = parse_tuple(true);
      expect_block_end("set");
      return s;
    }
    std::vector<std::string> targets = parse_targets();
    if (is_op("=")) {
      next();
      auto s = stmt(StmtKind::Set, line);
      s->targets = std::move(targets);
      s->expr = parse_tuple(true);
      expect_block_end("set");
      return s;
    }
    auto s = stmt(StmtKind::BlockSet, line);
    if (targets.size() != 1) fail("a block set ({% set x %}...{% endset %}) takes one name", line);
    s->targets = std::move(targets);
    if (is_op("|")) s->expr = parse_filter_chain(nullptr);
    expect_block_end("set");
    s->body = parse_body({"endset"}, "set", line);
    expect_block_end("endset");
    return s;
  }

  std::unique_ptr<Stmt> parse_macro(int line) {
    auto s = stmt(StmtKind::Macro, line);
    s->text = expect_name("a macro name");
    expect_op("(");
    while (!is_op(")")) {
      if (!s->targets.empty()) expect_op(",");
      if (is_op(")")) break;
      s->targets.push_back(expect_name("a parameter name"));
      if (is_op("=")) {
        next();
        s->values.push_back(parse_expression());
      } else {
        if (!s->values.empty() && s->values.back())
          fail("a macro parameter without a default follows one with a default", line);
        s->values.push_back(nullptr);
      }
    }
    next();
    expect_block_end("macro");
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;  // a loop around the definition does not make break legal inside it
    s->body = parse_body({"endmacro"}, "macro", line);
    loop_depth_ = saved_loops;
    if (peek().kind == TokenKind::Name) next();  // {% endmacro name %}
    expect_block_end("endmacro");
    return s;
  }

  std::unique_ptr<Stmt> parse_filter_block(int line) {
    auto s = stmt(StmtKind::FilterBlock, line);
    s->expr = parse_filter_chain(nullptr, /*leading_pipe=*/false);
    expect_block_end("filter");
    s->body = parse_body({"endfilter"}, "filter", line);
    expect_block_end("endfilter");
    return s;
  }

  std::unique_ptr<Stmt> parse_with(int line) {
    auto s = stmt(StmtKind::With, line);
    while (peek().kind != TokenKind::BlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(expect_name("a variable name"));
      expect_op("=");
      s->values.push_back(parse_expression());
    }
    expect_block_end("with");
    s->body = parse_body({"endwith"}, "with", line);
    expect_block_end("endwith");
    return s;
  }

  // ---- expressions ----------------------------------------------------------------------------
  bool at_tuple_end() const {
    const Token& t = peek();
    return t.kind == TokenKind::PrintEnd || t.kind == TokenKind::BlockEnd || is_op(")") ||
           t.kind == TokenKind::End;
  }

  // Comma-separated expressions; more than one (or a trailing comma) makes a tuple.
  // `with_condexpr` false: `x if y` is not read as a conditional (for `if` and `for` heads).
  ExprPtr parse_tuple(bool with_condexpr, bool stop_at_if = false) {
    const int line = peek().line;
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!is_op(",")) break;
        next();
        comma = true;
        if (at_tuple_end() || (stop_at_if && is_name("if"))) break;
      }
      items.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    if (!comma) return std::move(items[0]);
    return checked(make(ExprKind::Tuple, line, std::move(items)));
  }

  ExprPtr parse_expression() {
    NestingGuard guard(*this, peek().line);
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const int line = next().line;
      ExprPtr condition = parse_or();
      ExprPtr otherwise;
      if (is_name("else")) {
        next();
        otherwise = parse_expression();
      }
      std::vector<ExprPtr> items;
      items.push_back(std::move(expr));
      items.push_back(std::move(condition));
      items.push_back(std::move(otherwise));
      expr = checked(make(ExprKind::Conditional, line, std::move(items)));
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, int line, ExprPtr left, ExprPtr right, std::string op = {}) {
    std::vector<ExprPtr> items;
    items.push_back(std::move(left));
    items.push_back(std::move(right));
    auto e = make(kind, line, std::move(items));
    e->name = std::move(op);
    return checked(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      left = binary(ExprKind::Or, line, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      left = binary(ExprKind::And, line, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      NestingGuard guard(*this, peek().line);
      const int line = next().line;
      std::vector<ExprPtr> items;
      items.push_back(parse_not());
      return checked(make(ExprKind::Not, line, std::move(items)));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = peek().line;
    ExprPtr first = parse_math1();
    std::vector<ExprPtr> items;
    std::vector<std::string> ops;
    while (true) {
      const Token& t = peek();
      std::string op;
      if (t.kind == TokenKind::Operator &&
          (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" || t.text == "<=" || t.text == ">=")) {
        op = t.text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        next();
        next();
      } else {
        break;
      }
      if (items.empty()) items.push_back(std::move(first));
      ops.push_back(op);
      items.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = make(ExprKind::Compare, line, std::move(items));
    e->ops = std::move(ops);
    return checked(std::move(e));
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      left = binary(ExprKind::Binary, t.line, std::move(left), parse_concat(), t.text);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const int line = next().line;
      left = binary(ExprKind::Binary, line, std::move(left), parse_math2(), "~");
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      left = binary(ExprKind::Binary, t.line, std::move(left), parse_pow(), t.text);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const int line = next().line;
      left = binary(ExprKind::Binary, line, std::move(left), parse_unary(true), "**");
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    NestingGuard guard(*this, peek().line);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      std::vector<ExprPtr> items;
      items.push_back(parse_unary(false));
      node = checked(make(t.text == "-" ? ExprKind::Negate : ExprKind::Positive, t.line, std::move(items)));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr constant(Value v, int line) {
    auto e = make(ExprKind::Constant, line);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    const int line = t.line;
    switch (t.kind) {
      case TokenKind::Name: {
        next();
        if (t.text == "true" || t.text == "True") return constant(Value::boolean(true), line);
        if (t.text == "false" || t.text == "False") return constant(Value::boolean(false), line);
        if (t.text == "none" || t.text == "None") return constant(Value::none(), line);
        auto e = make(ExprKind::Name, line);
        e->name = t.text;
        return e;
      }
      case TokenKind::String: {
        std::string s;
        while (peek().kind == TokenKind::String) s += next().text;  // 'a' 'b' is 'ab'
        return constant(Value::string(std::move(s)), line);
      }
      case TokenKind::Integer: {
        next();
        int64_t v = 0;
        const auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (r.ec != std::errc() || r.ptr != t.text.data() + t.text.size())
          fail(fmt::format("integer literal {} does not fit in 64 bits", t.text), line);
        return constant(Value::integer(v), line);
      }
      case TokenKind::Float: {
        next();
        return constant(Value::real(std::strtod(t.text.c_str(), nullptr)), line);
      }
      case TokenKind::Operator:
        if (t.text == "(") {
          next();
          if (is_op(")")) {
            next();
            return checked(make(ExprKind::Tuple, line));
          }
          ExprPtr inner = parse_tuple(true);
          expect_op(")");
          return inner;
        }
        if (t.text == "[") {
          next();
          std::vector<ExprPtr> items;
          while (!is_op("]")) {
            if (!items.empty()) {
              expect_op(",");
              if (is_op("]")) break;
            }
            items.push_back(parse_expression());
          }
          next();
          return checked(make(ExprKind::List, line, std::move(items)));
        }
        if (t.text == "{") {
          next();
          std::vector<ExprPtr> items;
          while (!is_op("}")) {
            if (!items.empty()) {
              expect_op(",");
              if (is_op("}")) break;
            }
            items.push_back(parse_expression());
            expect_op(":");
            items.push_back(parse_expression());
          }
          next();
          return checked(make(ExprKind::Dict, line, std::move(items)));
        }
        break;
      default:
        break;
    }
    fail_expected("an expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        const int line = next().line;
        if (peek().kind == TokenKind::Integer) {  // x.0 is x[0]
          ExprPtr index = parse_primary();
          node = binary(ExprKind::Subscript, line, std::move(node), std::move(index));
          continue;
        }
        std::vector<ExprPtr> items;
        items.push_back(std::move(node));
        auto e = make(ExprKind::Attribute, line, std::move(items));
        e->name = expect_name("an attribute name after '.'");
        node = checked(std::move(e));
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target) {
    const int line = next().line;  // '['
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!is_op("]")) {
      if (is_op(":")) {
        next();
        is_slice = true;
        if (++part > 2) fail("a slice has at most three parts", line);
        continue;
      }
      if (parts[part]) fail_expected("':' or ']'");
      parts[part] = parse_expression();
      if (is_op(",")) fail("tuple subscripts (x[a, b]) are not supported", line);
    }
    next();
    std::vector<ExprPtr> items;
    items.push_back(std::move(target));
    if (!is_slice) {
      if (!parts[0]) fail("empty subscript []", line);
      items.push_back(std::move(parts[0]));
      return checked(make(ExprKind::Subscript, line, std::move(items)));
    }
    for (auto& p : parts) items.push_back(std::move(p));
    return checked(make(ExprKind::Slice, line, std::move(items)));
  }

  // Arguments of a call, filter or test: positional first, then name=value.
  void parse_arguments(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported", peek().line);
      if (peek().kind == TokenKind::Name && is_op("=", 1)) {
        std::string name = next().text;
        next();
        e.keywords.emplace_back(std::move(name), parse_expression());
      } else {
        if (!e.keywords.empty()) fail("a positional argument follows a keyword argument", peek().line);
        e.items.push_back(parse_expression());
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    const int line = peek().line;
    std::vector<ExprPtr> items;
    items.push_back(std::move(callee));
    auto e = make(ExprKind::Call, line, std::move(items));
    parse_arguments(*e);
    return checked(std::move(e));
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  // One or more "| name(args)" applied to `subject` (null inside {% filter %} and block set,
  // where the body's output is the subject).
  ExprPtr parse_filter_chain(ExprPtr subject, bool leading_pipe = true) {
    bool first = true;
    while (is_op("|") || (first && !leading_pipe)) {
      if (is_op("|")) next();
      first = false;
      const int line = peek().line;
      std::vector<ExprPtr> items;
      items.push_back(std::move(subject));
      auto e = make(ExprKind::Filter, line, std::move(items));
      e->name = expect_name("a filter name");
      if (is_op(".")) fail("dotted filter names are not supported", line);
      if (is_op("(")) parse_arguments(*e);
      subject = checked(std::move(e));
    }
    return subject;
  }

  ExprPtr parse_test(ExprPtr subject) {
    const int line = next().line;  // 'is'
    bool negated = false;
    if (is_name("not")) {
      next();
      negated = true;
    }
    std::vector<ExprPtr> items;
    items.push_back(std::move(subject));
    auto e = make(ExprKind::Test, line, std::move(items));
    e->name = expect_name("a test name after 'is'");
    const Token& t = peek();
    if (is_op("(")) {
      parse_arguments(*e);
    } else if ((t.kind == TokenKind::Name && t.text != "else" && t.text != "or" && t.text != "and") ||
               t.kind == TokenKind::String || t.kind == TokenKind::Integer ||
               t.kind == TokenKind::Float || is_op("[") || is_op("{")) {
      // `x is divisibleby 3`: one argument without parentheses
      e->items.push_back(parse_postfix(parse_primary()));
    }
    ExprPtr test = checked(std::move(e));
    if (!negated) return test;
    std::vector<ExprPtr> wrapped;
    wrapped.push_back(std::move(test));
    return checked(make(ExprKind::Not, line, std::move(wrapped)));
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int max_nesting_;
  int nesting_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Template parse_template(std::string_view source, int max_nesting) {
  return Parser(tokenize(source), max_nesting).run();
}

}  // namespace amk::tmpl
