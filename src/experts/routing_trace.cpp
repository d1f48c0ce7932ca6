#include "experts/routing_trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include "core/error.h"

namespace strata {

PhaseFilter parse_phase_filter(std::string_view s) {
  if (s == "all") return PhaseFilter::all;
  if (s == "prefill") return PhaseFilter::prefill;
  if (s == "decode") return PhaseFilter::decode;
  fail("unknown phase '{}' (all, prefill, decode)", s);
}

bool phase_selected(Phase p, PhaseFilter f) {
  return f == PhaseFilter::all || (f == PhaseFilter::prefill && p == Phase::prefill) || (f == PhaseFilter::decode && p == Phase::decode);
}

void RoutingRun::add(uint32_t token, int32_t layer, Phase phase, std::span<const int32_t> ex, bool predicted) {
  STRATA_CHECK(ex.size() <= UINT16_MAX, "routing event with {} experts", ex.size());
  RoutingEvent e;
  e.predicted = predicted;
  e.token = token;
  e.layer = layer;
  e.phase = phase;
  e.offset = static_cast<uint32_t>(experts.size());
  e.n = static_cast<uint16_t>(ex.size());
  experts.insert(experts.end(), ex.begin(), ex.end());
  events.push_back(e);
}

size_t RoutingTrace::n_events() const {
  size_t n = 0;
  for (const auto& r : runs) n += r.events.size();
  return n;
}

size_t RoutingTrace::n_predictions() const {
  size_t n = 0;
  for (const auto& r : runs)
    for (const auto& e : r.events) n += e.predicted;
  return n;
}

void RoutingTrace::infer_shape() {
  for (const auto& r : runs) {
    for (const auto& e : r.events) {
      n_layer = std::max(n_layer, e.layer + 1);
      if (!e.predicted) top_k = std::max(top_k, int(e.n));
    }
    for (int32_t x : r.experts) n_expert = std::max(n_expert, x + 1);
  }
}

namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t b = 0;
  for (;;) {
    size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) return out;
    b = e + 1;
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

template <typename T>
T to_num(std::string_view s, const std::string& what, size_t line) {
  s = trim(s);
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  STRATA_CHECK(ec == std::errc() && p == s.data() + s.size() && !s.empty(), "{}:{}: '{}' is not a number", what, line, s);
  return v;
}

}  // namespace

RoutingTrace parse_trace(std::istream& in, const std::string& what) {
  RoutingTrace t;
  std::map<std::string, size_t, std::less<>> run_index;
  int col_run = -1, col_phase = -1, col_token = -1, col_layer = -1, col_experts = -1, col_kind = -1;
  std::vector<int> col_expert_k;  // expert_0, expert_1, ...
  bool have_header = false;
  std::string line;
  size_t lineno = 0;
  std::vector<int32_t> ex;
  while (std::getline(in, line)) {
    ++lineno;
    std::string_view l = trim(line);
    if (l.empty()) continue;
    if (l.front() == '#') {
      for (auto tok : split(l.substr(1), ' ')) {
        auto eq = tok.find('=');
        if (eq == std::string_view::npos) continue;
        auto key = tok.substr(0, eq), val = tok.substr(eq + 1);
        if (key == "n_layer") t.n_layer = to_num<int>(val, what, lineno);
        if (key == "n_expert") t.n_expert = to_num<int>(val, what, lineno);
        STRATA_CHECK(t.n_layer >= 0 && t.n_layer <= kMaxTraceLayers && t.n_expert >= 0 && t.n_expert <= kMaxTraceExperts,
                     "{}:{}: n_layer={} n_expert={} outside the limits ({} layers, {} experts)", what, lineno, t.n_layer, t.n_expert, kMaxTraceLayers,
                     kMaxTraceExperts);
      }
      continue;
    }
    auto f = split(l, ',');
    if (!have_header) {
      have_header = true;
      std::map<std::string, int, std::less<>> cols;
      for (size_t i = 0; i < f.size(); ++i) cols[std::string(trim(f[i]))] = int(i);
      auto col = [&](std::initializer_list<std::string_view> names) {
        for (auto n : names)
          if (auto it = cols.find(n); it != cols.end()) return it->second;
        return -1;
      };
      col_run = col({"run"});
      col_phase = col({"phase"});
      col_token = col({"token", "token_index"});
      col_layer = col({"layer"});
      col_experts = col({"experts"});
      col_kind = col({"kind"});
      for (int k = 0;; ++k) {
        int c = col({fmt::format("expert_{}", k)});
        if (c < 0) break;
        col_expert_k.push_back(c);
      }
      STRATA_CHECK(col_token >= 0 && col_layer >= 0 && (col_experts >= 0 || !col_expert_k.empty()),
                   "{}: header needs token (or token_index), layer and experts (or expert_0..): got '{}'", what, l);
      continue;
    }
    auto field = [&](int c) -> std::string_view {
      STRATA_CHECK(c < int(f.size()), "{}:{}: {} fields, expected more", what, lineno, f.size());
      return trim(f[c]);
    };
    const std::string_view run = col_run >= 0 ? field(col_run) : std::string_view("run");
    Phase phase = Phase::decode;
    if (col_phase >= 0) {
      auto p = field(col_phase);
      if (p == "prefill")
        phase = Phase::prefill;
      else
        STRATA_CHECK(p == "decode", "{}:{}: phase '{}' is neither prefill nor decode", what, lineno, p);
    }
    bool predicted = false;
    if (col_kind >= 0) {
      auto k = field(col_kind);
      predicted = k == "predict";
      STRATA_CHECK(predicted || k == "route", "{}:{}: kind '{}' is neither route nor predict", what, lineno, k);
    }
    const auto token = to_num<uint32_t>(field(col_token), what, lineno);
    const auto layer = to_num<int32_t>(field(col_layer), what, lineno);
    ex.clear();
    if (col_experts >= 0) {
      for (auto x : split(field(col_experts), ' '))
        if (!trim(x).empty()) ex.push_back(to_num<int32_t>(x, what, lineno));
    } else {
      for (int c : col_expert_k) ex.push_back(to_num<int32_t>(field(c), what, lineno));
    }
    STRATA_CHECK(layer >= 0 && layer < kMaxTraceLayers, "{}:{}: layer {} outside 0..{}", what, lineno, layer, kMaxTraceLayers - 1);
    for (int32_t x : ex) STRATA_CHECK(x >= 0 && x < kMaxTraceExperts, "{}:{}: expert id {} outside 0..{}", what, lineno, x, kMaxTraceExperts - 1);
    auto it = run_index.find(run);
    if (it == run_index.end()) {
      it = run_index.emplace(std::string(run), t.runs.size()).first;
      t.runs.emplace_back().name = std::string(run);
    }
    t.runs[it->second].add(token, layer, phase, ex, predicted);
  }
  STRATA_CHECK(have_header, "{}: empty trace", what);
  t.infer_shape();
  return t;
}

RoutingTrace read_trace(const std::string& path) {
  std::ifstream in(path);
  STRATA_CHECK(in, "cannot open trace {}", path);
  return parse_trace(in, path);
}

void write_trace(const RoutingTrace& t, std::ostream& out) {
  out << "# strata expert trace v1\n";
  out << fmt::format("# n_layer={} n_expert={}\n", t.n_layer, t.n_expert);
  const bool kinds = t.n_predictions() > 0;
  out << (kinds ? "run,phase,token,layer,experts,kind\n" : "run,phase,token,layer,experts\n");
  for (const auto& r : t.runs)
    for (const auto& e : r.events) {
      out << r.name << ',' << (e.phase == Phase::prefill ? "prefill" : "decode") << ',' << e.token << ',' << e.layer << ',';
      auto ex = r.experts_of(e);
      for (size_t i = 0; i < ex.size(); ++i) out << (i ? " " : "") << ex[i];
      if (kinds) out << (e.predicted ? ",predict" : ",route");
      out << '\n';
    }
}

void write_trace(const RoutingTrace& t, const std::string& path) {
  std::ofstream out(path);
  STRATA_CHECK(out, "cannot write trace {}", path);
  write_trace(t, out);
  STRATA_CHECK(out.good(), "error writing trace {}", path);
}

SyntheticOptions parse_synthetic(std::string_view spec) {
  SyntheticOptions o;
  for (auto kv : split(spec, ',')) {
    kv = trim(kv);
    if (kv.empty()) continue;
    auto eq = kv.find('=');
    STRATA_CHECK(eq != std::string_view::npos, "synthetic trace: '{}' is not key=value", kv);
    auto k = kv.substr(0, eq);
    auto v = std::string(kv.substr(eq + 1));
    const std::string what = "synthetic trace";
    if (k == "layers") o.n_layer = to_num<int>(v, what, 0);
    else if (k == "experts") o.n_expert = to_num<int>(v, what, 0);
    else if (k == "k") o.top_k = to_num<int>(v, what, 0);
    else if (k == "tokens") o.tokens = to_num<int>(v, what, 0);
    else if (k == "runs") o.runs = to_num<int>(v, what, 0);
    else if (k == "zipf") o.zipf = to_num<double>(v, what, 0);
    else if (k == "reuse") o.reuse = to_num<double>(v, what, 0);
    else if (k == "shift") o.shift_every = to_num<int>(v, what, 0);
    else if (k == "seed") o.seed = to_num<uint64_t>(v, what, 0);
    else fail("synthetic trace: unknown key '{}' (layers, experts, k, tokens, runs, zipf, reuse, shift, seed)", k);
  }
  STRATA_CHECK(o.n_layer > 0 && o.n_expert > 0 && o.top_k > 0 && o.top_k <= o.n_expert && o.tokens > 0 && o.runs > 0,
               "synthetic trace: need layers, experts, tokens, runs > 0 and 0 < k <= experts");
  STRATA_CHECK(o.n_layer <= kMaxTraceLayers && o.n_expert <= kMaxTraceExperts, "synthetic trace: at most {} layers and {} experts (got {} x {})",
               kMaxTraceLayers, kMaxTraceExperts, o.n_layer, o.n_expert);
  STRATA_CHECK(uint64_t(o.tokens) * uint64_t(o.runs) * uint64_t(o.n_layer) * uint64_t(o.top_k) <= (uint64_t(1) << 28),
               "synthetic trace: tokens x runs x layers x k = {} accesses, more than the limit of 2^28", uint64_t(o.tokens) * o.runs * o.n_layer * o.top_k);
  return o;
}

namespace {

// mt19937_64 output is specified by the standard; the distributions are not, so draw by hand.
struct Rng {
  std::mt19937_64 g;
  double uniform() { return double(g() >> 11) * 0x1.0p-53; }
  uint64_t below(uint64_t n) { return g() % n; }
};

void shuffle(std::vector<int32_t>& v, Rng& r) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[r.below(i)]);
}

}  // namespace

RoutingTrace make_synthetic(const SyntheticOptions& o) {
  RoutingTrace t;
  t.n_layer = o.n_layer;
  t.n_expert = o.n_expert;
  t.top_k = o.top_k;
  Rng rng{std::mt19937_64(o.seed)};
  std::vector<double> rank_w(o.n_expert);
  for (int r = 0; r < o.n_expert; ++r) rank_w[r] = 1.0 / std::pow(double(r + 1), o.zipf);
  std::vector<std::vector<int32_t>> perm(o.n_layer, std::vector<int32_t>(o.n_expert));  // rank -> expert
  auto repermute = [&](int l) {
    std::iota(perm[l].begin(), perm[l].end(), 0);
    shuffle(perm[l], rng);
  };
  for (int l = 0; l < o.n_layer; ++l) repermute(l);
  std::vector<std::vector<int32_t>> prev(o.n_layer);
  std::vector<uint8_t> taken(o.n_expert);
  std::vector<int32_t> ex, pool;
  for (int run = 0; run < o.runs; ++run) {
    auto& r = t.runs.emplace_back();
    r.name = fmt::format("synthetic_{}", run);
    for (auto& p : prev) p.clear();
    for (int tok = 0; tok < o.tokens; ++tok) {
      for (int l = 0; l < o.n_layer; ++l) {
        if (o.shift_every > 0 && tok > 0 && tok % o.shift_every == 0) repermute(l);
        ex.clear();
        std::fill(taken.begin(), taken.end(), 0);
        while (int(ex.size()) < o.top_k) {
          int32_t pick = -1;
          if (!prev[l].empty() && rng.uniform() < o.reuse) {
            pool.clear();
            for (int32_t x : prev[l])
              if (!taken[x]) pool.push_back(x);
            if (!pool.empty()) pick = pool[rng.below(pool.size())];
          }
          if (pick < 0) {
            double total = 0;
            for (int rk = 0; rk < o.n_expert; ++rk)
              if (!taken[perm[l][rk]]) total += rank_w[rk];
            double u = rng.uniform() * total;
            for (int rk = 0; rk < o.n_expert; ++rk) {
              if (taken[perm[l][rk]]) continue;
              pick = perm[l][rk];
              if ((u -= rank_w[rk]) < 0) break;
            }
          }
          taken[pick] = 1;
          ex.push_back(pick);
        }
        r.add(uint32_t(tok), l, Phase::decode, ex);
        prev[l] = ex;
      }
    }
  }
  return t;
}

}  // namespace strata
