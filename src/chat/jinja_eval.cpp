// The tree-walking evaluator: statements write to an output string, expressions yield Values.
#include <cmath>
#include <cstdint>
#include <unordered_map>

#include "chat/jinja.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_parser.h"

namespace strata::jinja {
namespace {

constexpr int kMaxCallDepth = 256;
constexpr uint64_t kMaxRepeatItems = uint64_t{1} << 26;

// A variable scope. `for` bodies and macro calls open one; `if` does not (as in Jinja2).
struct Frame {
  std::unordered_map<std::string, Value> vars;
  const Frame* parent = nullptr;

  const Value* lookup(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

enum class Flow { Normal, Break, Continue };

std::string describe(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Name: return e.name;
    case Expr::Kind::GetAttr: return describe(*e.args[0]) + "." + e.name;
    case Expr::Kind::GetItem: return describe(*e.args[0]) + "[...]";
    case Expr::Kind::Call: return describe(*e.args[0]) + "(...)";
    default: return "expression";
  }
}

class Interp {
 public:
  explicit Interp(Frame& root) : root_(root) {}

  Flow exec(const Body& body, Frame& f, std::string& out) {
    for (const auto& s : body) {
      Flow fl = exec(*s, f, out);
      if (fl != Flow::Normal) return fl;
    }
    return Flow::Normal;
  }

 private:
  Flow exec(const Stmt& s, Frame& f, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::Text: out += s.text; return Flow::Normal;
      case Stmt::Kind::Output: {
        const Value v = eval(*s.expr, f);
        try {
          out += v.str();
        } catch (const Error& e) {  // value-level failures (nesting depth) get the position here
          fail_at(s.expr->pos, "{}", e.what());
        }
        return Flow::Normal;
      }
      case Stmt::Kind::If:
        for (const auto& [cond, body] : s.branches)
          if (!cond || eval(*cond, f).truthy()) return exec(body, f, out);
        return Flow::Normal;
      case Stmt::Kind::For: exec_for(s, f, out); return Flow::Normal;
      case Stmt::Kind::Set: {
        Value v = eval(*s.expr, f);
        if (s.attr_target) {
          Value obj = eval(*s.attr_target, f);
          if (!obj.is_object())
            fail_at(s.pos, "cannot assign attribute '{}' on a {} (use namespace())", s.name, obj.type_name());
          if (v.reaches(obj.identity())) fail_at(s.pos, "assigning '{}' would make the namespace contain itself", s.name);
          obj.as_object().set(s.name, std::move(v));
        } else {
          assign(s.targets, std::move(v), f, s.pos);
        }
        return Flow::Normal;
      }
      case Stmt::Kind::SetBlock: {
        std::string buf;
        exec(s.body, f, buf);
        f.vars[s.targets[0]] = Value(std::move(buf));
        return Flow::Normal;
      }
      case Stmt::Kind::Macro: f.vars[s.name] = make_macro(s, nullptr, nullptr); return Flow::Normal;
      case Stmt::Kind::CallBlock: {
        const Expr& call = *s.expr;
        Value caller = make_macro(s, &f, nullptr);
        out += call_expr(call, f, &caller).str();
        return Flow::Normal;
      }
      case Stmt::Kind::Scope: {
        if (!s.expr) return exec(s.body, f, out);
        std::string buf;
        exec(s.body, f, buf);
        CallArgs a = eval_args(*s.expr, f, 1);
        out += apply_filter(s.expr->name, Value(std::move(buf)), a).str();
        return Flow::Normal;
      }
      case Stmt::Kind::Break:
      case Stmt::Kind::Continue:
        if (loop_depth_ == 0) fail_at(s.pos, "'{}' outside of a for loop", s.kind == Stmt::Kind::Break ? "break" : "continue");
        return s.kind == Stmt::Kind::Break ? Flow::Break : Flow::Continue;
    }
    return Flow::Normal;
  }

  void assign(const std::vector<std::string>& targets, Value v, Frame& f, SourcePos where) {
    if (targets.size() == 1) { f.vars[targets[0]] = std::move(v); return; }
    if (!v.is_array() || v.as_array().size() != targets.size())
      fail_at(where, "cannot unpack {} into {} names", v.is_array() ? fmt::format("{} values", v.as_array().size())
                                                                     : std::string("a ") + v.type_name(),
              targets.size());
    for (size_t i = 0; i < targets.size(); ++i) f.vars[targets[i]] = v.as_array()[i];
  }

  void exec_for(const Stmt& s, Frame& f, std::string& out) {
    const Value seq = eval(*s.expr, f);
    if (s.recursive) fail_at(s.pos, "recursive for loops are not supported");
    std::vector<Value> items = iterate(seq, s.expr->pos);
    Frame lf;
    lf.parent = &f;
    if (s.cond) {  // `for x in xs if cond`: filter first, so loop.length counts kept items
      std::vector<Value> kept;
      for (auto& it : items) {
        assign(s.targets, it, lf, s.pos);
        if (eval(*s.cond, lf).truthy()) kept.push_back(std::move(it));
      }
      items = std::move(kept);
      lf.vars.clear();
    }
    if (items.empty()) {
      exec(s.else_body, f, out);
      return;
    }
    ++loop_depth_;
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      auto loop = std::make_shared<Object>();
      loop->items = {{"index", Value(i + 1)},          {"index0", Value(i)},
                     {"revindex", Value(n - i)},       {"revindex0", Value(n - i - 1)},
                     {"first", Value(i == 0)},         {"last", Value(i == n - 1)},
                     {"length", Value(n)},             {"depth", Value(1)}, {"depth0", Value(0)},
                     {"previtem", i > 0 ? items[i - 1] : Value::undefined("loop.previtem")},
                     {"nextitem", i + 1 < n ? items[i + 1] : Value::undefined("loop.nextitem")}};
      loop->items.emplace_back("cycle", Value::function([i](CallArgs& a) -> Value {
        if (a.pos.empty()) fail_at(a.where, "loop.cycle() needs at least one argument");
        return a.pos[static_cast<size_t>(i) % a.pos.size()];
      }));
      lf.vars["loop"] = Value(std::move(loop));
      assign(s.targets, items[i], lf, s.pos);
      if (exec(s.body, lf, out) == Flow::Break) break;
    }
    --loop_depth_;
  }

  // A macro (or a call block's `caller`) as a callable value. Parameters bind by position
  // then keyword; missing ones take their default or stay undefined (as in Jinja2).
  Value make_macro(const Stmt& s, const Frame* scope, const Value* caller) {
    const Stmt* def = &s;
    const Frame* parent = scope ? scope : &root_;
    return Value::function([this, def, parent](CallArgs& a) -> Value {
      if (++call_depth_ > kMaxCallDepth) fail_at(a.where, "macro recursion deeper than {}", kMaxCallDepth);
      if (a.pos.size() > def->params.size())
        fail_at(a.where, "macro '{}' takes {} arguments, got {}", def->name, def->params.size(), a.pos.size());
      Frame mf;
      mf.parent = parent;
      for (size_t i = 0; i < def->params.size(); ++i) {
        const auto& [pname, pdef] = def->params[i];
        if (i < a.pos.size()) mf.vars[pname] = a.pos[i];
        else if (pdef) mf.vars[pname] = eval(*pdef, mf);
        else mf.vars[pname] = Value::undefined(pname);
      }
      for (auto& [k, v] : a.kw) {
        bool known = k == "caller";
        for (const auto& p : def->params) known = known || p.first == k;
        if (!known) fail_at(a.where, "macro '{}' has no parameter named '{}'", def->name, k);
        mf.vars[k] = v;
      }
      std::string buf;
      const int saved_loops = loop_depth_;
      loop_depth_ = 0;
      exec(def->body, mf, buf);
      loop_depth_ = saved_loops;
      --call_depth_;
      return Value(std::move(buf));
    });
  }

  CallArgs eval_args(const Expr& e, Frame& f, size_t first) {
    CallArgs a;
    a.where = e.pos;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i], f));
    for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v, f));
    return a;
  }

  Value call_expr(const Expr& e, Frame& f, const Value* caller) {
    const Expr& callee = *e.args[0];
    CallArgs a = eval_args(e, f, 1);
    if (caller) a.kw.emplace_back("caller", *caller);
    if (callee.kind == Expr::Kind::GetAttr) {
      Value obj = eval(*callee.args[0], f);
      if (obj.is_object()) {
        const Value* m = obj.as_object().find(callee.name);
        if (m && m->is_function()) return m->as_function()(a);
      }
      if (auto r = call_method(obj, callee.name, a)) return *r;
      if (obj.is_undefined())
        fail_at(callee.pos, "cannot call method '{}' on undefined '{}'", callee.name, describe(*callee.args[0]));
      fail_at(callee.pos, "unknown method '{}' on a {}", callee.name, obj.type_name());
    }
    Value fn = eval(callee, f);
    if (!fn.is_function()) {
      if (fn.is_undefined()) fail_at(e.pos, "'{}' is undefined (unknown function)", describe(callee));
      fail_at(e.pos, "'{}' is a {}, not callable", describe(callee), fn.type_name());
    }
    return fn.as_function()(a);
  }

  [[noreturn]] void undefined_operand(const Expr& e, const Expr& operand) {
    fail_at(e.pos, "'{}' is undefined (operand of '{}')", describe(operand), e.name);
  }

  Value eval(const Expr& e, Frame& f) {
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: {
        const Value* v = f.lookup(e.name);
        return v ? *v : Value::undefined(e.name);
      }
      case Expr::Kind::List: {
        Array a;
        for (const auto& x : e.args) a.push_back(eval(*x, f));
        return Value(std::move(a));
      }
      case Expr::Kind::Dict: {
        auto o = std::make_shared<Object>();
        for (const auto& [k, v] : e.pairs) {
          Value key = eval(*k, f);
          if (!key.is_string()) fail_at(k->pos, "dict literal keys must be strings, got a {}", key.type_name());
          o->set(key.as_string(), eval(*v, f));
        }
        return Value(std::move(o));
      }
      case Expr::Kind::GetAttr: {
        Value obj = eval(*e.args[0], f);
        if (obj.is_object()) {
          const Value* v = obj.as_object().find(e.name);
          if (v) return *v;
        }
        return Value::undefined(describe(e));
      }
      case Expr::Kind::GetItem: return get_item(eval(*e.args[0], f), eval(*e.args[1], f), e.pos);
      case Expr::Kind::Slice: {
        auto opt = [&](size_t i) { return e.args[i] ? eval(*e.args[i], f) : Value::none(); };
        return get_slice(eval(*e.args[0], f), opt(1), opt(2), opt(3), e.pos);
      }
      case Expr::Kind::Call: return call_expr(e, f, nullptr);
      case Expr::Kind::Filter: {
        Value v = eval(*e.args[0], f);
        CallArgs a = eval_args(e, f, 1);
        return apply_filter(e.name, v, a);
      }
      case Expr::Kind::Test: {
        Value v = eval(*e.args[0], f);
        CallArgs a = eval_args(e, f, 1);
        return Value(apply_test(e.name, v, a) != e.negated);
      }
      case Expr::Kind::Unary: {
        Value v = eval(*e.args[0], f);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_undefined()) undefined_operand(e, *e.args[0]);
        if (v.is_int() || v.is_bool()) return e.name == "-" ? Value(-v.as_int()) : Value(v.as_int());
        if (v.is_float()) return e.name == "-" ? Value(-v.as_double()) : v;
        fail_at(e.pos, "bad operand type for unary '{}': {}", e.name, v.type_name());
      }
      case Expr::Kind::Ternary:
        if (eval(*e.args[0], f).truthy()) return eval(*e.args[1], f);
        return e.args[2] ? eval(*e.args[2], f) : Value::undefined("ternary without else");
      case Expr::Kind::Binary: return eval_binary(e, f);
    }
    fail_at(e.pos, "internal error: unknown expression kind");
  }

  Value eval_binary(const Expr& e, Frame& f) {
    const std::string& op = e.name;
    Value l = eval(*e.args[0], f);
    if (op == "and") return l.truthy() ? eval(*e.args[1], f) : l;
    if (op == "or") return l.truthy() ? l : eval(*e.args[1], f);
    Value r = eval(*e.args[1], f);
    if (op == "~") return Value(l.str() + r.str());
    if (op == "==") return Value(values_equal(l, r));
    if (op == "!=") return Value(!values_equal(l, r));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (r.is_string()) {
        if (!l.is_string()) fail_at(e.pos, "'in <string>' requires a string on the left, got a {}", l.type_name());
        found = r.as_string().find(l.as_string()) != std::string::npos;
      } else if (r.is_array()) {
        for (const auto& x : r.as_array()) found = found || values_equal(l, x);
      } else if (r.is_object()) {
        found = l.is_string() && r.as_object().find(l.as_string()) != nullptr;
      } else if (r.is_undefined()) {
        undefined_operand(e, *e.args[1]);
      } else {
        fail_at(e.pos, "argument of type {} is not iterable (right side of '{}')", r.type_name(), op);
      }
      return Value(op == "in" ? found : !found);
    }
    if (l.is_undefined()) undefined_operand(e, *e.args[0]);
    if (r.is_undefined()) undefined_operand(e, *e.args[1]);
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      const int c = values_compare(l, r, e.pos);
      return Value(op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0);
    }
    const bool ln = l.is_number() || l.is_bool(), rn = r.is_number() || r.is_bool();
    if (op == "+") {
      if (l.is_string() && r.is_string()) return Value(l.as_string() + r.as_string());
      if (l.is_array() && r.is_array()) {
        Array a = l.as_array();
        a.insert(a.end(), r.as_array().begin(), r.as_array().end());
        return Value(std::move(a));
      }
    }
    if (op == "*" && (l.is_string() || l.is_array()) && (r.is_int() || r.is_bool())) {
      const size_t unit = l.is_string() ? l.as_string().size() : l.as_array().size();
      if (r.as_int() > 0 && unit > 0 && static_cast<uint64_t>(r.as_int()) > kMaxRepeatItems / unit)
        fail_at(e.pos, "repetition '*' would create more than {} items", kMaxRepeatItems);
      if (l.is_string()) {
        std::string s;
        for (int64_t i = 0; i < r.as_int(); ++i) s += l.as_string();
        return Value(std::move(s));
      }
      Array a;
      for (int64_t i = 0; i < r.as_int(); ++i) a.insert(a.end(), l.as_array().begin(), l.as_array().end());
      return Value(std::move(a));
    }
    if (!ln || !rn)
      fail_at(e.pos, "unsupported operand types for '{}': {} and {}", op, l.type_name(), r.type_name());
    const bool ints = !l.is_float() && !r.is_float();
    const double x = l.as_double(), y = r.as_double();
    const int64_t a = l.as_int(), b = r.as_int();
    int64_t res = 0;
    auto checked = [&](bool overflow) {
      if (overflow) fail_at(e.pos, "integer overflow in '{}'", op);
      return Value(res);
    };
    if (op == "+") return ints ? checked(__builtin_add_overflow(a, b, &res)) : Value(x + y);
    if (op == "-") return ints ? checked(__builtin_sub_overflow(a, b, &res)) : Value(x - y);
    if (op == "*") return ints ? checked(__builtin_mul_overflow(a, b, &res)) : Value(x * y);
    if (op == "**") {
      if (ints && b >= 0) {
        res = 1;  // exponentiation by squaring, overflow-checked
        int64_t base = a;
        for (int64_t ex = b; ex > 0;) {
          if ((ex & 1) && __builtin_mul_overflow(res, base, &res)) fail_at(e.pos, "integer overflow in '**'");
          ex >>= 1;
          if (ex > 0 && __builtin_mul_overflow(base, base, &base)) fail_at(e.pos, "integer overflow in '**'");
        }
        return Value(res);
      }
      return Value(std::pow(x, y));
    }
    if (y == 0) fail_at(e.pos, "division by zero in '{}'", op);
    if (op == "/") return Value(x / y);
    if (ints && b == -1 && a == INT64_MIN) fail_at(e.pos, "integer overflow in '{}'", op);
    if (op == "//") {
      if (ints) {
        int64_t q = l.as_int() / r.as_int();
        if ((l.as_int() % r.as_int() != 0) && ((l.as_int() < 0) != (r.as_int() < 0))) --q;
        return Value(q);
      }
      return Value(std::floor(x / y));
    }
    if (op == "%") {
      if (ints) {
        int64_t m = l.as_int() % r.as_int();
        if (m != 0 && ((m < 0) != (r.as_int() < 0))) m += r.as_int();
        return Value(m);
      }
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    fail_at(e.pos, "unsupported operator '{}'", op);
  }

  Frame& root_;
  int loop_depth_ = 0;
  int call_depth_ = 0;
};

}  // namespace

Template Template::parse(std::string_view source, const LexOptions& opts) {
  Template t;
  t.body_ = std::make_shared<const Body>(jinja::parse(lex(source, opts)));
  return t;
}

std::string Template::render(const Value& context) const {
  Frame globals;
  for (auto& [k, v] : builtin_globals()) globals.vars[k] = std::move(v);
  Frame root;
  root.parent = &globals;
  if (context.is_object()) {
    for (const auto& [k, v] : context.as_object().items) root.vars[k] = v;
  } else if (!context.is_undefined() && !context.is_none()) {
    throw Error(fmt::format("jinja: render context must be a dict, got a {}", context.type_name()));
  }
  Interp interp(root);
  std::string out;
  interp.exec(*body_, root, out);
  return out;
}

}  // namespace strata::jinja
