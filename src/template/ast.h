// The parsed template: statements and expressions, each with the line it came from so that
// runtime errors can name it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace amk::tmpl {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  Constant,     // value
  Name,         // name
  List,         // items
  Tuple,        // items
  Dict,         // items: key, value, key, value, ...
  Negate,       // items[0]
  Positive,     // items[0]
  Not,          // items[0]
  And,          // items[0] and items[1]
  Or,           // items[0] or items[1]
  Binary,       // items[0] name items[1]; name is + - * / // % ** ~
  Compare,      // items[0] ops[0] items[1] ops[1] items[2] ... (Python's chained comparison)
  Conditional,  // items[0] if items[1] else items[2] (items[2] null: no else)
  Attribute,    // items[0].name
  Subscript,    // items[0][items[1]]
  Slice,        // items[0][items[1]:items[2]:items[3]], absent parts null
  Call,         // items[0](items[1..], keywords)
  Filter,       // items[0] | name(items[1..], keywords); items[0] null inside {% filter %}
  Test,         // items[0] is name(items[1..], keywords)
};

struct Expr {
  ExprKind kind;
  int line;
  std::string name;
  Value value;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;
  int depth = 1;  // of the subtree; the parser bounds it
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class StmtKind {
  Text,       // text
  Print,      // {{ expr }}
  If,         // if expr: body, else: else_body (an elif is an If alone in else_body)
  For,        // for targets in expr [if condition]: body, else: else_body
  Set,        // set targets = expr; or set namespace.attribute = expr
  BlockSet,   // {% set targets[0] [| filter] %} body {% endset %}
  Macro,      // macro name(params = defaults) body
  FilterBlock,// {% filter expr %} body, expr a Filter chain whose innermost subject is null
  With,       // {% with targets = values %} body
  Break,
  Continue,
};

struct Stmt {
  StmtKind kind;
  int line;
  std::string text;                  // Text; the macro's name
  ExprPtr expr;                      // Print, If, For (the iterable), Set, FilterBlock, BlockSet's filter
  ExprPtr condition;                 // For's "if" filter
  std::vector<std::string> targets;  // For/Set/BlockSet names; Set: {namespace, attribute} when is_attribute
  bool is_attribute = false;
  std::vector<ExprPtr> values;       // With's values, Macro's defaults (null where none)
  Body body, else_body;
};

struct Template {
  Body body;
};

}  // namespace amk::tmpl
