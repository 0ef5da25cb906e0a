#include "template/evaluator.h"

#include <fmt/format.h>

#include <array>

#include "template/builtins.h"
#include "template/operations.h"
#include "template/python_format.h"

namespace amk::tmpl {
namespace {

// jinja2's filters and tests, so an error can say "not supported" for a real one and "unknown"
// for a misspelt one.
constexpr std::array<std::string_view, 50> kJinjaFilters = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "pprint",
    "random", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
    "truncate", "unique", "upper", "urlencode"};
constexpr std::array<std::string_view, 5> kMoreJinjaFilters = {"urlize", "wordcount", "wordwrap", "xmlattr", "pprint"};
constexpr std::array<std::string_view, 4> kJinjaOnlyTests = {"escaped", "filter", "test", "float"};

bool one_of(std::string_view name, auto const& names) {
  for (const auto n : names)
    if (n == name) return true;
  return false;
}

void check_expr(const Expr& e) {
  if (e.kind == ExprKind::Filter && !is_known_filter(e.name)) {
    if (one_of(e.name, kJinjaFilters) || one_of(e.name, kMoreJinjaFilters))
      throw TemplateError(fmt::format("unsupported filter '{}'", e.name), e.line);
    throw TemplateError(fmt::format("unknown filter '{}'", e.name), e.line);
  }
  if (e.kind == ExprKind::Test && !is_known_test(e.name)) {
    if (one_of(e.name, kJinjaOnlyTests)) throw TemplateError(fmt::format("unsupported test '{}'", e.name), e.line);
    throw TemplateError(fmt::format("unknown test '{}'", e.name), e.line);
  }
  for (const auto& child : e.items)
    if (child) check_expr(*child);
  for (const auto& kw : e.keywords) check_expr(*kw.second);
}

void check_body(const Body& body) {
  for (const auto& s : body) {
    if (s->expr) check_expr(*s->expr);
    if (s->condition) check_expr(*s->condition);
    for (const auto& v : s->values)
      if (v) check_expr(*v);
    check_body(s->body);
    check_body(s->else_body);
  }
}

// One scope. Lookups walk outwards; assignments go to the innermost scope.
struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  const Frame* parent = nullptr;

  const Value* find(std::string_view name) const {
    for (const Frame* f = this; f; f = f->parent)
      for (auto it = f->vars.rbegin(); it != f->vars.rend(); ++it)
        if (it->first == name) return &it->second;
    return nullptr;
  }
  void set(const std::string& name, Value value) {
    for (auto& [n, v] : vars)
      if (n == name) {
        v = std::move(value);
        return;
      }
    vars.emplace_back(name, std::move(value));
  }
};

enum class Flow { Normal, Break, Continue };

class Evaluator {
 public:
  Evaluator(const TemplateLimits& limits) : limits_(limits) {}
  // Namespaces are the only values that can form reference cycles; emptying them all when the
  // render ends (normally or by an error) frees whatever the cycles held.
  ~Evaluator() {
    for (const auto& ns : namespaces_) ns->attributes.entries.clear();
  }
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  std::string render(const Template& tmpl, const nlohmann::ordered_json& variables) {
    if (!variables.is_object()) throw TemplateError("the template variables must be a JSON object", 0);
    Frame builtins;
    for (auto& [name, fn] : global_functions([this](const auto& ns) { namespaces_.push_back(ns); }).entries) builtins.vars.emplace_back(name, fn);
    Frame top;
    top.parent = &builtins;
    for (const auto& [name, value] : variables.items()) top.set(name, from_json(value, limits_.max_value_depth));
    template_frame_ = frame_ = &top;
    std::string out;
    out_ = &out;
    exec_body(tmpl.body);
    return out;
  }

 private:
  // Bounds the evaluator's recursion, which macros can make deeper than the source's nesting.
  struct DepthGuard {
    Evaluator& ev;
    DepthGuard(Evaluator& e, int line) : ev(e) {
      if (++ev.depth_ > kMaxRecursion)
        throw TemplateError(fmt::format("template recursion deeper than {} levels", kMaxRecursion), line);
    }
    ~DepthGuard() { --ev.depth_; }
  };
  // Enough for real templates' nesting times a few macro levels; small enough for the stack.
  static constexpr int kMaxRecursion = 1500;

  [[noreturn]] static void fail(const std::string& message, int line) { throw TemplateError(message, line); }

  void emit(std::string_view s, int line) {
    if (out_->size() + s.size() > limits_.max_output_bytes)
      fail(fmt::format("output longer than the {}-byte limit", limits_.max_output_bytes), line);
    out_->append(s);
  }

  // Runs `body` with output going to a fresh string (block set, filter block, macro body).
  std::string capture(const Body& body, Flow* flow = nullptr) {
    std::string buffer;
    std::string* saved = out_;
    out_ = &buffer;
    try {
      const Flow f = exec_body(body);
      if (flow) *flow = f;
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buffer;
  }

  Flow exec_body(const Body& body) {
    for (const auto& s : body) {
      const Flow flow = exec(*s);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& s) {
    DepthGuard guard(*this, s.line);
    try {
      return exec_statement(s);
    } catch (const ValueError& e) {
      throw TemplateError(e.what(), s.line);
    }
  }

  void assign(const std::vector<std::string>& targets, const Value& value, int line) {
    if (targets.size() == 1) {
      frame_->set(targets[0], value);
      return;
    }
    const std::vector<Value> parts = iterate(value);
    if (parts.size() != targets.size())
      fail(parts.size() > targets.size()
               ? fmt::format("too many values to unpack (expected {})", targets.size())
               : fmt::format("not enough values to unpack (expected {}, got {})", targets.size(), parts.size()),
           line);
    for (size_t i = 0; i < targets.size(); ++i) frame_->set(targets[i], parts[i]);
  }

  // Runs `run` with `frame` as the innermost scope.
  template <typename F>
  auto in_frame(Frame& frame, F&& run) {
    Frame* saved = frame_;
    frame.parent = saved;
    frame_ = &frame;
    struct Restore {
      Evaluator& ev;
      Frame* saved;
      ~Restore() { ev.frame_ = saved; }
    } restore{*this, saved};
    return run();
  }

  void count_iteration(int line) {
    if (++iterations_ > limits_.max_loop_iterations)
      fail(fmt::format("more than {} loop iterations", limits_.max_loop_iterations), line);
  }

  Flow exec_statement(const Stmt& s) {
    switch (s.kind) {
      case StmtKind::Text:
        emit(s.text, s.line);
        return Flow::Normal;
      case StmtKind::Print:
        emit(to_text(eval(*s.expr), limits_), s.line);
        return Flow::Normal;
      case StmtKind::If:
        return exec_body(eval(*s.expr).truthy() ? s.body : s.else_body);
      case StmtKind::For:
        return exec_for(s);
      case StmtKind::Set: {
        const Value value = eval(*s.expr);
        if (!s.is_attribute) {
          assign(s.targets, value, s.line);
          return Flow::Normal;
        }
        const Value* target = frame_->find(s.targets[0]);
        if (!target || !target->is_namespace())
          fail(fmt::format("cannot assign attribute '{}' on '{}': only a namespace() takes attributes",
                           s.targets[1], s.targets[0]), s.line);
        DictValue& attributes = target->as_namespace().attributes;
        for (auto& entry : attributes.entries)
          if (entry.first == s.targets[1]) {
            entry.second = value;
            return Flow::Normal;
          }
        attributes.entries.emplace_back(s.targets[1], value);
        return Flow::Normal;
      }
      case StmtKind::BlockSet: {
        Flow flow = Flow::Normal;
        Value value = Value::string(capture(s.body, &flow));
        if (s.expr) value = eval_with_subject(*s.expr, value);
        frame_->set(s.targets[0], value);
        return flow;
      }
      case StmtKind::FilterBlock: {
        Flow flow = Flow::Normal;
        const Value body = Value::string(capture(s.body, &flow));
        emit(to_text(eval_with_subject(*s.expr, body), limits_), s.line);
        return flow;
      }
      case StmtKind::Macro: {
        const Stmt* macro = &s;
        frame_->set(s.text, Value::function(s.text, [this, macro](CallArgs& args) { return call_macro(*macro, args); }));
        return Flow::Normal;
      }
      case StmtKind::With: {
        Frame frame;
        for (size_t i = 0; i < s.targets.size(); ++i) frame.set(s.targets[i], eval(*s.values[i]));
        return in_frame(frame, [&] { return exec_body(s.body); });
      }
      case StmtKind::Break:
        return Flow::Break;
      case StmtKind::Continue:
        return Flow::Continue;
    }
    return Flow::Normal;
  }

  Flow exec_for(const Stmt& s) {
    std::vector<Value> items = iterate(eval(*s.expr));
    if (s.condition) {  // `for x in xs if cond`: filtered before the loop, so loop.length counts the kept
      std::vector<Value> kept;
      for (const Value& item : items) {
        count_iteration(s.line);
        Frame frame;
        const bool keep = in_frame(frame, [&] {
          assign(s.targets, item, s.line);
          return eval(*s.condition).truthy();
        });
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(s.else_body);
    const auto length = int64_t(items.size());
    for (int64_t i = 0; i < length; ++i) {
      count_iteration(s.line);
      Frame frame;
      const Flow flow = in_frame(frame, [&] {
        assign(s.targets, items[size_t(i)], s.line);
        frame_->set("loop", loop_object(items, i));
        return exec_body(s.body);
      });
      if (flow == Flow::Break) break;
    }
    return Flow::Normal;
  }

  static Value loop_object(const std::vector<Value>& items, int64_t i) {
    const auto length = int64_t(items.size());
    DictValue loop;
    loop.entries.reserve(12);
    loop.entries.emplace_back("index", Value::integer(i + 1));
    loop.entries.emplace_back("index0", Value::integer(i));
    loop.entries.emplace_back("revindex", Value::integer(length - i));
    loop.entries.emplace_back("revindex0", Value::integer(length - i - 1));
    loop.entries.emplace_back("first", Value::boolean(i == 0));
    loop.entries.emplace_back("last", Value::boolean(i == length - 1));
    loop.entries.emplace_back("length", Value::integer(length));
    loop.entries.emplace_back("depth", Value::integer(1));
    loop.entries.emplace_back("depth0", Value::integer(0));
    loop.entries.emplace_back("previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("there is no previous item"));
    loop.entries.emplace_back("nextitem", i + 1 < length ? items[size_t(i + 1)] : Value::undefined("there is no next item"));
    loop.entries.emplace_back("cycle", Value::function("loop.cycle", [i](CallArgs& args) {
      if (args.positional.empty()) throw ValueError("no items for cycling given");
      return args.positional[size_t(i) % args.positional.size()];
    }));
    return Value::dict(std::move(loop));
  }

  Value call_macro(const Stmt& macro, CallArgs& args) {
    if (call_depth_ >= limits_.max_call_depth)
      fail(fmt::format("macro calls nested deeper than {} (runaway recursion in '{}'?)", limits_.max_call_depth, macro.text), macro.line);
    ++call_depth_;
    struct Unwind {
      int& depth;
      ~Unwind() { --depth; }
    } unwind{call_depth_};
    const std::vector<std::string>& params = macro.targets;
    if (args.positional.size() > params.size())
      throw ValueError(fmt::format("macro '{}' takes not more than {} argument(s)", macro.text, params.size()));
    Frame frame;
    frame.parent = template_frame_;
    std::vector<const Value*> bound(params.size(), nullptr);
    for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = &args.positional[i];
    for (const auto& [name, value] : args.keyword) {
      size_t i = 0;
      while (i < params.size() && params[i] != name) ++i;
      if (i == params.size()) throw ValueError(fmt::format("macro '{}' has no argument named '{}'", macro.text, name));
      if (bound[i]) throw ValueError(fmt::format("macro '{}' got multiple values for argument '{}'", macro.text, name));
      bound[i] = &value;
    }
    Frame* saved = frame_;
    frame_ = &frame;
    struct Restore {
      Evaluator& ev;
      Frame* saved;
      ~Restore() { ev.frame_ = saved; }
    } restore{*this, saved};
    for (size_t i = 0; i < params.size(); ++i) {
      if (bound[i]) frame.set(params[i], *bound[i]);
      else if (macro.values[i]) frame.set(params[i], eval(*macro.values[i]));  // defaults see earlier params
      else frame.set(params[i], Value::undefined(fmt::format("parameter '{}' was not provided", params[i])));
    }
    return Value::string(capture(macro.body));
  }

  Value eval(const Expr& e) {
    DepthGuard guard(*this, e.line);
    try {
      return eval_node(e);
    } catch (const ValueError& err) {
      throw TemplateError(err.what(), e.line);
    }
  }

  // A filter chain whose innermost subject is null gets `subject` there ({% filter %}, block set).
  Value eval_with_subject(const Expr& e, const Value& subject) {
    const Value* saved = block_subject_;
    block_subject_ = &subject;
    struct Restore {
      const Value*& slot;
      const Value* saved;
      ~Restore() { slot = saved; }
    } restore{block_subject_, saved};
    return eval(e);
  }

  CallArgs eval_arguments(const Expr& e, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.items.size(); ++i) args.positional.push_back(eval(*e.items[i]));
    for (const auto& [name, value] : e.keywords) args.keyword.emplace_back(name, eval(*value));
    return args;
  }

  Value eval_node(const Expr& e) {
    switch (e.kind) {
      case ExprKind::Constant:
        return e.value;
      case ExprKind::Name: {
        if (const Value* v = frame_->find(e.name)) return *v;
        return Value::undefined(fmt::format("'{}' is undefined", e.name));
      }
      case ExprKind::List:
      case ExprKind::Tuple: {
        std::vector<Value> items;
        for (const auto& item : e.items) items.push_back(eval(*item));
        return Value::list(std::move(items), e.kind == ExprKind::Tuple);
      }
      case ExprKind::Dict: {
        DictValue dict;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value key = eval(*e.items[i]);
          if (!key.is_string())
            throw ValueError(fmt::format("dict keys must be strings in amk's templates, not {}", type_name(key)));
          Value value = eval(*e.items[i + 1]);
          bool replaced = false;
          for (auto& entry : dict.entries)
            if (entry.first == key.as_string()) {
              entry.second = value;
              replaced = true;
            }
          if (!replaced) dict.entries.emplace_back(key.as_string(), std::move(value));
        }
        return Value::dict(std::move(dict));
      }
      case ExprKind::Negate:
        return negate(eval(*e.items[0]));
      case ExprKind::Positive: {
        Value v = eval(*e.items[0]);
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number()) throw ValueError(fmt::format("bad operand type for unary +: '{}'", type_name(v)));
        return v.is_bool() ? Value::integer(v.as_bool()) : v;
      }
      case ExprKind::Not:
        return Value::boolean(!eval(*e.items[0]).truthy());
      case ExprKind::And: {
        Value left = eval(*e.items[0]);
        return left.truthy() ? eval(*e.items[1]) : left;
      }
      case ExprKind::Or: {
        Value left = eval(*e.items[0]);
        return left.truthy() ? left : eval(*e.items[1]);
      }
      case ExprKind::Binary:
        return binary_operation(e.name, eval(*e.items[0]), eval(*e.items[1]), limits_);
      case ExprKind::Compare: {
        Value left = eval(*e.items[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.items[i + 1]);
          const std::string& op = e.ops[i];
          bool holds;
          if (op == "==") holds = python_equals(left, right, limits_.max_value_depth);
          else if (op == "!=") holds = !python_equals(left, right, limits_.max_value_depth);
          else if (op == "in") holds = python_contains(right, left, limits_.max_value_depth);
          else if (op == "not in") holds = !python_contains(right, left, limits_.max_value_depth);
          else holds = python_order(op, left, right, limits_.max_value_depth);
          if (!holds) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::Conditional:
        if (eval(*e.items[1]).truthy()) return eval(*e.items[0]);
        if (e.items[2]) return eval(*e.items[2]);
        return Value::undefined(fmt::format("the inline if-expression on line {} evaluated to false and no else "
                                            "section was defined", e.line));
      case ExprKind::Attribute:
        return get_attribute(eval(*e.items[0]), e.name, limits_);
      case ExprKind::Subscript: {
        const Value obj = eval(*e.items[0]);
        return get_item(obj, eval(*e.items[1]), limits_);
      }
      case ExprKind::Slice: {
        const Value obj = eval(*e.items[0]);
        Value parts[3];
        for (int i = 0; i < 3; ++i)
          if (e.items[size_t(i) + 1]) parts[i] = eval(*e.items[size_t(i) + 1]);
        return slice(obj, parts[0], parts[1], parts[2]);
      }
      case ExprKind::Call: {
        const Value callee = eval(*e.items[0]);
        CallArgs args = eval_arguments(e, 1);
        if (callee.is_undefined()) fail_undefined(callee);
        if (!callee.is_callable()) throw ValueError(fmt::format("'{}' object is not callable", type_name(callee)));
        return callee.as_callable().call(args);
      }
      case ExprKind::Filter: {
        Value subject;
        if (e.items[0]) {
          subject = eval(*e.items[0]);
        } else if (block_subject_) {
          subject = *block_subject_;
        }
        CallArgs args = eval_arguments(e, 1);
        return apply_filter(e.name, subject, args, limits_);
      }
      case ExprKind::Test: {
        const Value subject = eval(*e.items[0]);
        CallArgs args = eval_arguments(e, 1);
        return Value::boolean(apply_test(e.name, subject, args, limits_));
      }
    }
    throw ValueError("unknown expression");
  }

  const TemplateLimits& limits_;
  std::string* out_ = nullptr;
  Frame* frame_ = nullptr;
  const Frame* template_frame_ = nullptr;
  const Value* block_subject_ = nullptr;
  int depth_ = 0;
  int call_depth_ = 0;
  int64_t iterations_ = 0;
  std::vector<std::shared_ptr<NamespaceValue>> namespaces_;
};

}  // namespace

void check_names(const Template& tmpl) { check_body(tmpl.body); }

std::string render_template(const Template& tmpl, const nlohmann::ordered_json& variables,
                            const TemplateLimits& limits) {
  try {
    return Evaluator(limits).render(tmpl, variables);
  } catch (const ValueError& e) {
    throw TemplateError(e.what(), 0);
  }
}

}  // namespace amk::tmpl
