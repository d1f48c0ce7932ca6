#pragma once
// Jinja AST: expressions and statements. One node struct per family with a kind tag;
// fields unused by a kind stay empty.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace strata::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Expr {
  enum class Kind {
    Literal,   // value
    Name,      // name
    List,      // args (also tuples)
    Dict,      // kwargs-like pairs in `pairs`
    GetAttr,   // args[0] . name
    GetItem,   // args[0] [ args[1] ]
    Slice,     // args[0] [ args[1] : args[2] : args[3] ] (null = omitted)
    Call,      // args[0] ( args[1..] , kwargs )
    Filter,    // args[0] | name ( args[1..], kwargs )
    Test,      // args[0] is [not] name ( args[1..] )
    Unary,     // name in {"-", "+", "not"} applied to args[0]
    Binary,    // args[0] name args[1]; name is the operator ("and", "or", "in", "not in", ...)
    Ternary,   // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind = Kind::Literal;
  SourcePos pos;
  Value value;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<ExprPtr, ExprPtr>> pairs;
};

struct Stmt {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches (cond null = else)
    For,       // targets in expr [if cond] body [else else_body]
    Set,       // targets = expr, or attr_target.name = expr
    SetBlock,  // {% set x %}body{% endset %}
    Macro,     // name(params) body
    CallBlock, // {% call macro(args) %}body{% endcall %}: expr is the call, body is caller()
    Scope,     // body rendered in place ({% generation %}, {% filter %} has filter in expr)
    Break,
    Continue,
  };
  Kind kind = Kind::Text;
  SourcePos pos;
  std::string text;
  std::string name;
  ExprPtr expr;
  ExprPtr cond;
  ExprPtr attr_target;  // `set ns.attr = ...`: the object expression; name is the attribute
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro params with defaults (null = none)
  Body body;
  Body else_body;
  bool recursive = false;
};

}  // namespace strata::jinja
