#include "chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

namespace strata::jinja {
namespace {

bool is_keyword(const std::string& s) {
  static const char* kw[] = {"and", "or", "not", "in", "is", "if", "else", "elif", "for", "recursive"};
  return std::any_of(std::begin(kw), std::end(kw), [&](const char* k) { return s == k; });
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : toks_(t) {}

  Body parse_template() {
    std::string end;
    Body b = parse_body({}, end, "", {});
    return b;
  }

 private:
  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(i_ + n, toks_.size() - 1)]; }
  const Token& next() { return toks_[i_ < toks_.size() - 1 ? i_++ : i_]; }
  bool is_op(const char* op) const { return cur().kind == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == Tok::Name && cur().text == n; }
  bool accept_op(const char* op) { if (is_op(op)) { next(); return true; } return false; }
  bool accept_name(const char* n) { if (is_name(n)) { next(); return true; } return false; }

  [[noreturn]] void unexpected(const char* wanted) const {
    const Token& t = cur();
    std::string got = t.kind == Tok::Op || t.kind == Tok::Name ? fmt::format("'{}'", t.text)
                      : t.kind == Tok::String ? fmt::format("string \"{}\"", t.text)
                                              : std::string(tok_name(t.kind));
    fail_at(t.pos, "syntax error: expected {}, got {}", wanted, got);
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) unexpected(fmt::format("'{}'", op).c_str());
  }
  std::string expect_name() {
    if (cur().kind != Tok::Name) unexpected("a name");
    return next().text;
  }
  void expect_block_end() {
    if (cur().kind != Tok::BlockEnd) unexpected("'%}'");
    next();
  }

  static ExprPtr make(Expr::Kind k, SourcePos p) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = p;
    return e;
  }

  // ---- statements ----

  // Parses until a block tag named in `ends`; the tag name is consumed and returned in `which`.
  Body parse_body(std::initializer_list<const char*> ends, std::string& which, const char* opener, SourcePos open_pos) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.kind == Tok::Eof) {
        if (ends.size() == 0) return body;
        fail_at(open_pos, "unclosed '{}' block (expected '{{% {} %}}' before the end of the template)", opener,
                *ends.begin() == std::string("else") || *ends.begin() == std::string("elif") ? *(ends.end() - 1) : *ends.begin());
      }
      if (t.kind == Tok::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Text;
        s->pos = t.pos;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.kind == Tok::VarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Output;
        s->pos = t.pos;
        next();
        s->expr = parse_tuple();
        if (cur().kind != Tok::VarEnd) unexpected("'}}'");
        next();
        body.push_back(std::move(s));
      } else if (t.kind == Tok::BlockBegin) {
        const Token& name = peek();
        if (name.kind != Tok::Name) { next(); unexpected("a tag name"); }
        for (const char* e : ends)
          if (name.text == e) {
            next();
            next();
            which = e;
            return body;
          }
        const std::string& n = name.text;
        if (ends.size() != 0 && (n.rfind("end", 0) == 0 || n == "elif" || n == "else"))
          fail_at(t.pos, "unexpected '{{% {} %}}': the innermost open block is '{}' at {}:{}", n, opener, open_pos.line,
                  open_pos.col);
        next();
        body.push_back(parse_statement(t.pos));
      } else {
        unexpected("text or a tag");
      }
    }
  }

  StmtPtr parse_statement(SourcePos tag_pos) {
    DepthGuard guard(*this);
    Token tag = next();
    tag.pos = tag_pos;  // errors and unclosed-block reports point at the '{%'
    auto s = std::make_unique<Stmt>();
    s->pos = tag.pos;
    const std::string& n = tag.text;
    std::string which;
    if (n == "if") {
      s->kind = Stmt::Kind::If;
      ExprPtr cond = parse_expression();
      expect_block_end();
      SourcePos open = tag.pos;
      while (true) {
        Body b = parse_body({"elif", "else", "endif"}, which, "if", open);
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (which == "elif") {
          cond = parse_expression();
          expect_block_end();
        } else if (which == "else") {
          expect_block_end();
          Body e = parse_body({"endif"}, which, "if", open);
          s->branches.emplace_back(nullptr, std::move(e));
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (n == "for") {
      s->kind = Stmt::Kind::For;
      do {
        if (cur().kind != Tok::Name || is_keyword(cur().text)) unexpected("a loop variable name");
        s->targets.push_back(next().text);
      } while (accept_op(","));
      if (!accept_name("in")) unexpected("'in'");
      s->expr = parse_tuple(/*with_ternary=*/false);
      if (accept_name("if")) s->cond = parse_expression(false);
      if (accept_name("recursive")) s->recursive = true;
      expect_block_end();
      s->body = parse_body({"else", "endfor"}, which, "for", tag.pos);
      expect_block_end();
      if (which == "else") {
        s->else_body = parse_body({"endfor"}, which, "for", tag.pos);
        expect_block_end();
      }
    } else if (n == "set") {
      const std::string first = expect_name();
      if (accept_op(".")) {
        s->kind = Stmt::Kind::Set;
        auto obj = make(Expr::Kind::Name, tag.pos);
        obj->name = first;
        s->attr_target = std::move(obj);
        s->name = expect_name();
      } else {
        s->targets.push_back(first);
        while (accept_op(",")) s->targets.push_back(expect_name());
      }
      if (accept_op("=")) {
        s->kind = Stmt::Kind::Set;
        s->expr = parse_tuple();
        expect_block_end();
      } else if (cur().kind == Tok::BlockEnd && !s->attr_target && s->targets.size() == 1) {
        next();
        s->kind = Stmt::Kind::SetBlock;
        s->body = parse_body({"endset"}, which, "set", tag.pos);
        expect_block_end();
      } else {
        unexpected("'='");
      }
    } else if (n == "macro") {
      s->kind = Stmt::Kind::Macro;
      s->name = expect_name();
      expect_op("(");
      while (!accept_op(")")) {
        std::string p = expect_name();
        ExprPtr def;
        if (accept_op("=")) def = parse_expression();
        s->params.emplace_back(std::move(p), std::move(def));
        if (!is_op(")")) expect_op(",");
      }
      expect_block_end();
      s->body = parse_body({"endmacro"}, which, "macro", tag.pos);
      if (cur().kind == Tok::Name) next();  // {% endmacro name %}
      expect_block_end();
    } else if (n == "call") {
      s->kind = Stmt::Kind::CallBlock;
      s->expr = parse_expression();
      if (s->expr->kind != Expr::Kind::Call) fail_at(s->expr->pos, "'call' block needs a macro call");
      expect_block_end();
      s->body = parse_body({"endcall"}, which, "call", tag.pos);
      expect_block_end();
    } else if (n == "filter") {
      s->kind = Stmt::Kind::Scope;
      auto f = make(Expr::Kind::Filter, cur().pos);
      f->args.push_back(make(Expr::Kind::Literal, cur().pos));
      f->name = expect_name();
      if (is_op("(")) parse_call_args(*f);
      s->expr = std::move(f);
      expect_block_end();
      s->body = parse_body({"endfilter"}, which, "filter", tag.pos);
      expect_block_end();
    } else if (n == "generation") {
      s->kind = Stmt::Kind::Scope;
      expect_block_end();
      s->body = parse_body({"endgeneration"}, which, "generation", tag.pos);
      expect_block_end();
    } else if (n == "break" || n == "continue") {
      s->kind = n == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
      expect_block_end();
    } else if (n.rfind("end", 0) == 0 || n == "elif" || n == "else") {
      fail_at(tag.pos, "unexpected '{{% {} %}}' with no matching open block", n);
    } else {
      fail_at(tag.pos, "unknown or unsupported tag '{}'", n);
    }
    return s;
  }

  // ---- expressions ----

  ExprPtr parse_tuple(bool with_ternary = true) {
    const SourcePos p = cur().pos;
    ExprPtr first = parse_expression(with_ternary);
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::List, p);
    t->args.push_back(std::move(first));
    while (accept_op(",")) {
      if (cur().kind == Tok::BlockEnd || cur().kind == Tok::VarEnd || is_op(")")) break;
      t->args.push_back(parse_expression(with_ternary));
    }
    return t;
  }

  ExprPtr parse_expression(bool with_ternary = true) {
    DepthGuard guard(*this);
    ExprPtr e = parse_or();
    while (with_ternary && is_name("if")) {
      const SourcePos p = cur().pos;
      next();
      auto t = make(Expr::Kind::Ternary, p);
      t->args.push_back(parse_or());
      t->args.push_back(std::move(e));
      t->args.push_back(accept_name("else") ? parse_expression() : nullptr);
      e = std::move(t);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, SourcePos p) {
    auto b = make(Expr::Kind::Binary, p);
    b->name = op;
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) { const SourcePos p = next().pos; l = binary("or", std::move(l), parse_and(), p); }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) { const SourcePos p = next().pos; l = binary("and", std::move(l), parse_not(), p); }
    return l;
  }
  ExprPtr parse_not() {
    DepthGuard guard(*this);
    if (is_name("not")) {
      auto u = make(Expr::Kind::Unary, next().pos);
      u->name = "not";
      u->args.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr l = parse_math1();
    while (true) {
      const SourcePos p = cur().pos;
      if (cur().kind == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        std::string op = next().text;
        l = binary(op, std::move(l), parse_math1(), p);
      } else if (is_name("in")) {
        next();
        l = binary("in", std::move(l), parse_math1(), p);
      } else if (is_name("not") && peek().kind == Tok::Name && peek().text == "in") {
        next();
        next();
        l = binary("not in", std::move(l), parse_math1(), p);
      } else {
        return l;
      }
    }
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      l = binary(t.text, std::move(l), parse_concat(), t.pos);
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) { const SourcePos p = next().pos; l = binary("~", std::move(l), parse_math2(), p); }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      l = binary(t.text, std::move(l), parse_pow(), t.pos);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) { const SourcePos p = next().pos; l = binary("**", std::move(l), parse_unary(true), p); }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      e = make(Expr::Kind::Unary, t.pos);
      e->name = t.text;
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filters(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.kind) {
      case Tok::Name: {
        next();
        auto e = make(Expr::Kind::Literal, t.pos);
        if (t.text == "true" || t.text == "True") e->value = Value(true);
        else if (t.text == "false" || t.text == "False") e->value = Value(false);
        else if (t.text == "none" || t.text == "None") e->value = Value::none();
        else if (is_keyword(t.text)) fail_at(t.pos, "syntax error: unexpected keyword '{}'", t.text);
        else { e->kind = Expr::Kind::Name; e->name = t.text; }
        return e;
      }
      case Tok::String: {
        std::string s;
        const SourcePos p = t.pos;
        while (cur().kind == Tok::String) s += next().text;  // adjacent literals concatenate
        auto e = make(Expr::Kind::Literal, p);
        e->value = Value(std::move(s));
        return e;
      }
      case Tok::Int:
      case Tok::Float: {
        next();
        auto e = make(Expr::Kind::Literal, t.pos);
        e->value = t.kind == Tok::Int ? Value(t.ival) : Value(t.fval);
        return e;
      }
      case Tok::Op: {
        if (t.text == "(") {
          next();
          if (accept_op(")")) return make(Expr::Kind::List, t.pos);
          ExprPtr e = parse_tuple();
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          auto e = make(Expr::Kind::List, t.pos);
          while (!accept_op("]")) {
            e->args.push_back(parse_expression());
            if (!is_op("]")) expect_op(",");
          }
          return e;
        }
        if (t.text == "{") {
          next();
          auto e = make(Expr::Kind::Dict, t.pos);
          while (!accept_op("}")) {
            ExprPtr k = parse_expression();
            expect_op(":");
            ExprPtr v = parse_expression();
            e->pairs.emplace_back(std::move(k), std::move(v));
            if (!is_op("}")) expect_op(",");
          }
          return e;
        }
        break;
      }
      default: break;
    }
    unexpected("an expression");
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    while (!accept_op(")")) {
      if (cur().kind == Tok::Name && peek().kind == Tok::Op && peek().text == "=") {
        std::string k = next().text;
        next();
        call.kwargs.emplace_back(std::move(k), parse_expression());
      } else {
        if (!call.kwargs.empty()) fail_at(cur().pos, "positional argument after keyword argument");
        call.args.push_back(parse_expression());
      }
      if (!is_op(")")) expect_op(",");
    }
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const SourcePos p = cur().pos;
      if (accept_op(".")) {
        if (cur().kind == Tok::Int) {
          auto g = make(Expr::Kind::GetItem, p);
          auto idx = make(Expr::Kind::Literal, cur().pos);
          idx->value = Value(next().ival);
          g->args.push_back(std::move(e));
          g->args.push_back(std::move(idx));
          e = std::move(g);
          continue;
        }
        auto g = make(Expr::Kind::GetAttr, p);
        g->name = expect_name();
        g->args.push_back(std::move(e));
        e = std::move(g);
      } else if (accept_op("[")) {
        ExprPtr parts[3];
        int colons = 0;
        for (;;) {
          if (!is_op(":") && !is_op("]")) parts[colons] = parse_expression();
          if (colons < 2 && accept_op(":")) { ++colons; continue; }
          break;
        }
        expect_op("]");
        if (colons == 0 && !parts[0]) fail_at(p, "syntax error: empty subscript");
        auto g = make(colons ? Expr::Kind::Slice : Expr::Kind::GetItem, p);
        g->args.push_back(std::move(e));
        g->args.push_back(std::move(parts[0]));
        if (colons) { g->args.push_back(std::move(parts[1])); g->args.push_back(std::move(parts[2])); }
        e = std::move(g);
      } else if (is_op("(")) {
        auto c = make(Expr::Kind::Call, p);
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        const SourcePos p = next().pos;
        auto f = make(Expr::Kind::Filter, p);
        f->name = expect_name();
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        const SourcePos p = next().pos;
        auto t = make(Expr::Kind::Test, p);
        t->negated = accept_name("not");
        t->name = expect_name();
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((cur().kind == Tok::Name && !is_keyword(cur().text)) || cur().kind == Tok::String ||
                   cur().kind == Tok::Int || cur().kind == Tok::Float || is_op("[") || is_op("{")) {
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  // Bounds recursion so that hostile input fails cleanly instead of overflowing the stack.
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) fail_at(p.cur().pos, "template nested deeper than {} levels", kMaxNesting);
    }
    ~DepthGuard() { --p.depth_; }
  };
  static constexpr int kMaxNesting = 200;

  const std::vector<Token>& toks_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& toks) { return Parser(toks).parse_template(); }

}  // namespace strata::jinja
