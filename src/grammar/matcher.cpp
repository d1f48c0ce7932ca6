// Matching: a set of pushdown stacks over code points, determinized lazily into byte states.
//
// A parse stack is a chain of positions in Grammar::elems (top = the next element to match),
// interned as nodes (pos, parent), so equal stacks have equal ids. A stack set in canonical form
// has a Class element on top of every stack (or is the empty stack: the grammar may end). A state
// is (stack set, partial UTF-8 code point); its 256 byte transitions are computed on first use
// and cached, so the mask walk over the vocabulary trie costs one table load per trie node, and a
// rejected byte skips the node's whole subtree. A state that enters or loops on a wide class (in a
// JSON string every char but a quote, a backslash or a control leads to the same loop state) is
// answered by the vocabulary's bitmap of the tokens wholly inside the class plus a walk of the other
// tokens only (VocabIndex::class_tokens).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "grammar/grammar_internal.h"
#include "grammar/vocab_trie.h"

namespace strata::grammar {
namespace {

constexpr int32_t kUnknown = -1;
constexpr int32_t kDead = -2;
constexpr size_t kSoftStates = 4096;      // above this between calls, the caches restart
constexpr size_t kHardStates = 32768;     // one walk may not create more (1 KiB of table each)
constexpr size_t kSoftNodes = 1u << 20;
constexpr size_t kHardNodes = 8u << 20;
constexpr size_t kMaxExpandSteps = 1u << 20;
constexpr size_t kCachedMasks = 16;
constexpr uint64_t kWideClass = 0x10000;  // a class this wide (code points) takes the bitmap path
constexpr int32_t kNoLoop = -2;
constexpr uint32_t kMinForLen[5] = {0, 0, 0x80, 0x800, 0x10000};

struct VecHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

}  // namespace

struct Matcher::Impl {
  struct Node {
    uint32_t pos;
    int32_t parent;  // 0: the bottom (node 0 is the empty stack)
    uint32_t depth;
  };
  struct State {
    int32_t set;
    uint32_t partial;  // bits of the code point read so far
    uint8_t need;      // continuation bytes still to come (0: on a code point boundary)
    uint8_t len;       // length of the sequence being read
    bool can_end, must_end;
    int32_t loop = kUnknown;  // need == 0: index into `loops`, or kNoLoop (not a wide loop class)
  };

  std::shared_ptr<const Grammar> g;
  std::shared_ptr<const VocabIndex> vocab;
  std::vector<Node> nodes;
  std::unordered_map<uint64_t, int32_t> node_ids;
  std::vector<uint32_t> seen;  // [nodes]: expansion generation that last queued the node
  uint32_t gen = 0;
  std::vector<std::vector<int32_t>> sets;  // sorted node ids
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> set_ids;
  std::vector<State> states;
  std::unordered_map<uint64_t, int32_t> state_ids;
  std::vector<int32_t> next;  // [states, 256]: kUnknown, kDead or a state
  int32_t cur = 0;
  bool ended = false;
  std::vector<int32_t> work, out;           // expansion scratch
  std::vector<int32_t> walk;                // [max token length + 1]: state at each trie depth
  // Masks of recent states (the allowed set depends on the state only): inside a string or free
  // text the same state comes back token after token, and its mask is then a lookup.
  struct Mask {
    int32_t state = -1;
    uint64_t last_use = 0;
    size_t count = 0;              // allowed tokens
    std::vector<uint64_t> bits;    // [ceil(n_vocab / 64)]
  };
  std::vector<Mask> masks;         // at most kCachedMasks
  uint64_t uses = 0;
  std::vector<std::shared_ptr<const VocabIndex::ClassTokens>> loops;
  bool fast = true;

  void reset_caches() {
    nodes.assign(1, Node{0, 0, 0});
    node_ids.clear();
    seen.assign(1, 0);
    sets.clear();
    set_ids.clear();
    states.clear();
    state_ids.clear();
    next.clear();
    masks.clear();
    loops.clear();
    parts.clear();
  }

  int32_t node(uint32_t pos, int32_t parent) {
    const uint64_t key = (uint64_t{pos} << 32) | static_cast<uint32_t>(parent);
    const auto [it, added] = node_ids.emplace(key, static_cast<int32_t>(nodes.size()));
    if (added) {
      if (nodes.size() >= kHardNodes) throw GrammarError(fmt::format("grammar too complex: more than {} parse stack nodes", kHardNodes));
      nodes.push_back(Node{pos, parent, nodes[parent].depth + 1});
      seen.push_back(0);
    }
    return it->second;
  }

  void queue(int32_t n) {
    if (seen[n] == gen) return;
    seen[n] = gen;
    work.push_back(n);
  }

  // Expands every queued stack until a Class is on top (or the stack is empty), into `out`.
  void expand() {
    size_t steps = 0;
    while (!work.empty()) {
      int32_t n = work.back();
      work.pop_back();
      while (true) {
        if (++steps > kMaxExpandSteps) throw GrammarError("grammar too complex: parse stack expansion does not end");
        if (n == 0) {
          out.push_back(0);
          break;
        }
        const Node nd = nodes[n];
        const Elem e = g->elems[nd.pos];
        if (e.kind == Elem::Class) {
          out.push_back(n);
          break;
        }
        if (e.kind == Elem::End) {
          n = nd.parent;
          continue;
        }
        // A Ref: continue after it (a tail call keeps no frame), under each alternative.
        const int32_t cont = g->elems[nd.pos + 1].kind == Elem::End ? nd.parent : node(nd.pos + 1, nd.parent);
        if (nodes[cont].depth >= kMaxStackDepth) break;  // nesting too deep: this stack is dropped
        for (uint32_t alt : g->rule_alts[e.arg]) queue(node(alt, cont));
        break;
      }
    }
  }

  // The set id of `out` (sorted, deduplicated); kDead when empty.
  int32_t finish_set() {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    if (out.empty()) return kDead;
    if (out.size() > kMaxStacks)
      throw GrammarError(fmt::format("grammar too ambiguous: more than {} parse stacks at once", kMaxStacks));
    const auto [it, added] = set_ids.emplace(out, static_cast<int32_t>(sets.size()));
    if (added) sets.push_back(out);
    return it->second;
  }

  int32_t advance(int32_t set, uint32_t cp) {
    out.clear();
    ++gen;
    for (int32_t n : sets[set]) {
      if (n == 0) continue;
      const Node nd = nodes[n];
      if (g->classes[g->elems[nd.pos].arg].contains(cp)) queue(node(nd.pos + 1, nd.parent));
    }
    expand();
    return finish_set();
  }

  int32_t state(int32_t set, uint32_t partial, uint8_t need, uint8_t len) {
    const uint64_t key = (uint64_t{static_cast<uint32_t>(set)} << 32) | (uint64_t{partial} << 8) | (uint64_t{need} << 4) | len;
    const auto [it, added] = state_ids.emplace(key, static_cast<int32_t>(states.size()));
    if (added) {
      if (states.size() >= kHardStates) throw GrammarError(fmt::format("grammar too complex: more than {} matcher states", kHardStates));
      const std::vector<int32_t>& s = sets[set];
      const bool has_end = s.front() == 0;  // sorted: the empty stack (0) comes first
      states.push_back(State{set, partial, need, len, need == 0 && has_end, need == 0 && has_end && s.size() == 1, kUnknown});
      next.resize(next.size() + 256, kUnknown);
    }
    return it->second;
  }

  // Some stack of `set` can take a code point in [lo, hi] that is not a surrogate (D800-DFFF are
  // never valid UTF-8, so a prefix that only leads to them, like ED A0, is a dead end already).
  bool feasible(int32_t set, uint32_t lo, uint32_t hi) const {
    const uint32_t part[2][2] = {{lo, std::min(hi, 0xD7FFu)}, {std::max(lo, 0xE000u), hi}};
    for (int32_t n : sets[set]) {
      if (n == 0) continue;
      const CharClass& c = g->classes[g->elems[nodes[n].pos].arg];
      for (const auto& [a, b] : part)
        if (a <= b && c.intersects(a, b)) return true;
    }
    return false;
  }

  int32_t compute_step(int32_t s, uint8_t b) {
    const State st = states[static_cast<size_t>(s)];
    uint32_t v;
    uint8_t need, len;
    if (st.need == 0) {
      if (b < 0x80) {
        const int32_t set = advance_cp(st.set, b);
        return set < 0 ? kDead : state(set, 0, 0, 0);
      }
      len = (b >= 0xC2 && b <= 0xDF) ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b >= 0xF0 && b <= 0xF4) ? 4 : 0;
      if (len == 0) return kDead;
      v = b & (0x7Fu >> len);
      need = static_cast<uint8_t>(len - 1);
    } else {
      if ((b & 0xC0) != 0x80) return kDead;
      v = (st.partial << 6) | (b & 0x3Fu);
      need = static_cast<uint8_t>(st.need - 1);
      len = st.len;
    }
    if (need == 0) {
      if (v < kMinForLen[len] || v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) return kDead;
      const int32_t set = advance_cp(st.set, v);
      return set < 0 ? kDead : state(set, 0, 0, 0);
    }
    const uint32_t shift = 6u * need;
    const uint32_t lo = std::max(v << shift, kMinForLen[len]);
    const uint32_t hi = std::min((v << shift) | ((1u << shift) - 1), kMaxCodePoint);
    if (lo > hi || !feasible(st.set, lo, hi)) return kDead;
    return state(st.set, v, need, len);
  }

  int32_t step(int32_t s, uint8_t b) {
    const size_t slot = static_cast<size_t>(s) * 256 + b;
    if (next[slot] != kUnknown) return next[slot];
    const int32_t r = compute_step(s, b);
    next[slot] = r;  // `next` may have grown: index again
    return r;
  }

  // The stacks of the current state as position lists (top first), for a restart of the caches.
  void compact_if_needed() {
    if (states.size() <= kSoftStates && nodes.size() <= kSoftNodes) return;
    const State st = states[static_cast<size_t>(cur)];
    std::vector<std::vector<uint32_t>> stacks;
    for (int32_t n : sets[st.set]) {
      std::vector<uint32_t> chain;
      for (int32_t x = n; x != 0; x = nodes[x].parent) chain.push_back(nodes[x].pos);
      stacks.push_back(std::move(chain));
    }
    reset_caches();
    out.clear();
    for (const auto& chain : stacks) {
      int32_t n = 0;
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) n = node(*it, n);
      out.push_back(n);
    }
    cur = state(finish_set(), st.partial, st.need, st.len);
  }

  void init() {
    reset_caches();
    next.reserve(2 * kSoftStates * 256);  // address space only: pages are touched as states appear, never copied
    out.clear();
    ++gen;
    for (uint32_t alt : g->rule_alts[g->root]) queue(node(alt, 0));
    expand();
    const int32_t set = finish_set();
    if (set < 0) throw GrammarError("grammar matches nothing (every parse stack of the root rule is too deep)");
    cur = state(set, 0, 0, 0);
  }

  using Ranges = std::vector<std::array<uint32_t, 2>>;

  // The code point space cut at every range end of the top classes of a set: within a piece every
  // code point leads to the same set (one advance() per piece, then a binary search per code point).
  struct Partition {
    std::vector<uint32_t> lo;  // piece i is [lo[i], lo[i + 1]); the last entry is kMaxCodePoint + 1
    std::vector<int32_t> to;   // the set piece i leads to, or kDead
  };
  std::vector<Partition> parts;  // [sets]; empty `lo`: not computed yet

  const Partition& partition(int32_t set) {
    if (static_cast<size_t>(set) < parts.size() && !parts[static_cast<size_t>(set)].lo.empty()) return parts[static_cast<size_t>(set)];
    Partition p;
    p.lo = {0, 0xD800, 0xE000, kMaxCodePoint + 1};
    for (int32_t n : sets[set]) {
      if (n == 0) continue;
      for (const auto& r : g->classes[g->elems[nodes[n].pos].arg].ranges) p.lo.insert(p.lo.end(), {r[0], r[1] + 1});
    }
    std::sort(p.lo.begin(), p.lo.end());
    p.lo.erase(std::unique(p.lo.begin(), p.lo.end()), p.lo.end());
    while (p.lo.back() > kMaxCodePoint + 1) p.lo.pop_back();
    for (size_t i = 0; i + 1 < p.lo.size(); ++i) p.to.push_back(p.lo[i] == 0xD800 ? kDead : advance(set, p.lo[i]));
    if (parts.size() < sets.size()) parts.resize(sets.size());  // advance() may have added sets
    return parts[static_cast<size_t>(set)] = std::move(p);
  }

  // advance() through the set's partition.
  int32_t advance_cp(int32_t set, uint32_t cp) {
    const Partition& p = partition(set);
    const size_t i = static_cast<size_t>(std::upper_bound(p.lo.begin(), p.lo.end(), cp) - p.lo.begin()) - 1;
    return p.to[i];
  }


  // The code points that lead from `set` to `to`.
  Ranges to_ranges(int32_t set, int32_t to) {
    const Partition& p = partition(set);
    Ranges rs;
    for (size_t i = 0; i < p.to.size(); ++i) {
      if (p.to[i] != to) continue;
      if (!rs.empty() && rs.back()[1] + 1 == p.lo[i]) rs.back()[1] = p.lo[i + 1] - 1;
      else rs.push_back({p.lo[i], p.lo[i + 1] - 1});
    }
    return rs;
  }

  static uint64_t width(const Ranges& rs) {
    uint64_t w = 0;
    for (const auto& r : rs) w += r[1] - r[0] + 1;
    return w;
  }

  static Ranges intersect(const Ranges& a, const Ranges& b) {
    Ranges r;
    for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
      const uint32_t lo = std::max(a[i][0], b[j][0]), hi = std::min(a[i][1], b[j][1]);
      if (lo <= hi) r.push_back({lo, hi});
      (a[i][1] < b[j][1]) ? ++i : ++j;
    }
    return r;
  }

  // A wide class C such that every code point of C leads from `set` to one set T and from T back
  // to T (inside a JSON string T is the string's loop; `set` is T itself or the state right after
  // the opening quote): a token wholly inside C is then allowed. Empty when there is none.
  Ranges wide_class(int32_t set) {
    std::vector<int32_t> targets = partition(set).to;
    std::sort(targets.begin(), targets.end());
    targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
    Ranges best;
    for (int32_t t : targets) {
      if (t < 0) continue;
      const Ranges into = to_ranges(set, t);
      if (width(into) < kWideClass) continue;
      const Ranges c = t == set ? into : intersect(into, to_ranges(t, t));
      if (width(c) >= kWideClass && width(c) > width(best)) best = c;
    }
    return best;
  }

  // The vocabulary's tokens for the wide class of state `s` (see wide_class), or null.
  const VocabIndex::ClassTokens* loop_tokens(int32_t s) {
    if (states[static_cast<size_t>(s)].loop == kUnknown) {
      states[static_cast<size_t>(s)].loop = kNoLoop;
      const State st = states[static_cast<size_t>(s)];
      if (st.need == 0) {
        const Ranges c = wide_class(st.set);
        if (!c.empty()) {
          loops.push_back(vocab->class_tokens(c));
          states[static_cast<size_t>(s)].loop = static_cast<int32_t>(loops.size() - 1);
        }
      }
    }
    const int32_t l = states[static_cast<size_t>(s)].loop;
    return l >= 0 ? loops[static_cast<size_t>(l)].get() : nullptr;
  }

  // The bitmap of the tokens inside the loop class, plus each other token the state allows.
  size_t collect_loop(const VocabIndex::ClassTokens& ct, std::vector<uint64_t>& bits) {
    bits = ct.inside;
    size_t count = ct.n_inside;
    const VocabIndex::Trie& t = vocab->trie();
    for (int32_t tok : ct.others) {
      int32_t s = cur;
      for (char c : t.bytes[static_cast<size_t>(tok)]) {
        const auto b = static_cast<uint8_t>(c);
        const int32_t x = next[static_cast<size_t>(s) * 256 + b];
        s = x != kUnknown ? x : step(s, b);
        if (s < 0) break;
      }
      if (s < 0) continue;
      bits[static_cast<size_t>(tok) >> 6] |= uint64_t{1} << (tok & 63);
      ++count;
    }
    return count;
  }

  // Sets the bit of every token allowed next (EOG apart) in `bits`; returns their count.
  size_t collect(std::vector<uint64_t>& bits) {
    const VocabIndex::Trie& t = vocab->trie();
    walk.resize(t.max_depth + 1);
    walk[0] = cur;
    size_t count = 0;
    // Local pointers: the stores below cannot alias them, so the loop keeps them in registers.
    const VocabIndex::Trie::Node* nd = t.nodes.data();
    const int32_t* toks = t.toks.data();
    const int32_t* nx = next.data();  // refreshed after step(), which may grow `next`
    int32_t* wk = walk.data();
    uint64_t* bp = bits.data();
    const uint32_t n = static_cast<uint32_t>(t.nodes.size() - 1);
    for (uint32_t i = 0; i < n;) {
      const uint32_t d = nd[i].depth(), from = static_cast<uint32_t>(wk[d - 1]);
      int32_t s = nx[size_t{from} * 256 + nd[i].byte()];
      if (s == kUnknown) {
        s = step(static_cast<int32_t>(from), nd[i].byte());
        nx = next.data();
      }
      if (s < 0) {
        i = nd[i].end;
        continue;
      }
      wk[d] = s;
      for (uint32_t k = nd[i].tok_begin, e = nd[i + 1].tok_begin; k < e; ++k) {
        const auto tok = static_cast<uint32_t>(toks[k]);
        bp[tok >> 6] |= uint64_t{1} << (tok & 63);
      }
      count += nd[i + 1].tok_begin - nd[i].tok_begin;
      ++i;
    }
    return count;
  }

  // The mask of the current state (not after EOG was accepted: then only EOG is allowed).
  const Mask& mask() {
    compact_if_needed();
    ++uses;
    for (Mask& m : masks)
      if (m.state == cur) {
        m.last_use = uses;
        return m;
      }
    Mask* slot;
    if (masks.size() < kCachedMasks) {
      slot = &masks.emplace_back();
    } else {
      slot = &*std::min_element(masks.begin(), masks.end(), [](const Mask& a, const Mask& b) { return a.last_use < b.last_use; });
    }
    slot->state = cur;
    slot->last_use = uses;
    const VocabIndex::ClassTokens* ct = fast ? loop_tokens(cur) : nullptr;
    if (ct) {
      slot->count = collect_loop(*ct, slot->bits);
    } else {
      slot->bits.assign((static_cast<size_t>(vocab->n_vocab()) + 63) / 64, 0);
      slot->count = collect(slot->bits);
    }
    if (states[static_cast<size_t>(cur)].can_end) {
      for (int32_t e : vocab->trie().eog) slot->bits[static_cast<size_t>(e) >> 6] |= uint64_t{1} << (e & 63);
      slot->count += vocab->trie().eog.size();
    }
    return *slot;
  }
};

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabIndex> vocab) : impl_(std::make_unique<Impl>()) {
  if (!grammar || !vocab) throw GrammarError("Matcher needs a grammar and a vocabulary");
  impl_->g = std::move(grammar);
  impl_->vocab = std::move(vocab);
  impl_->init();
}

Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

void Matcher::apply(float* logits) const {
  Impl& m = *impl_;
  const size_t n = static_cast<size_t>(m.vocab->n_vocab());
  if (m.ended) {  // after EOG only EOG
    for (size_t i = 0; i < n; ++i)
      if (!m.vocab->is_eog(static_cast<int32_t>(i))) logits[i] = -INFINITY;
    return;
  }
  const Impl::Mask& mask = m.mask();
  if (mask.count == 0) throw GrammarError("grammar dead end: no token of the vocabulary can continue the text");
  for (size_t w = 0; w < mask.bits.size(); ++w) {
    const uint64_t bits = mask.bits[w];
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(n, w * 64 + 64);
    if (bits == 0) {
      std::fill(logits + w * 64, logits + end, -INFINITY);
      continue;
    }
    for (size_t i = w * 64; i < end; ++i)
      if (!((bits >> (i & 63)) & 1)) logits[i] = -INFINITY;
  }
}

std::vector<int32_t> Matcher::allowed_tokens() const {
  Impl& m = *impl_;
  std::vector<int32_t> r;
  if (m.ended) return m.vocab->trie().eog;
  const Impl::Mask& mask = m.mask();
  for (size_t w = 0; w < mask.bits.size(); ++w)
    for (uint64_t bits = mask.bits[w]; bits; bits &= bits - 1) r.push_back(static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits))));
  return r;
}

void Matcher::set_fast_masks(bool on) {
  impl_->fast = on;
  impl_->masks.clear();
}

bool Matcher::accept_bytes(std::string_view bytes) {
  Impl& m = *impl_;
  if (bytes.empty()) return true;
  if (m.ended) return false;
  m.compact_if_needed();
  int32_t s = m.cur;
  for (char c : bytes) {
    s = m.step(s, static_cast<uint8_t>(c));
    if (s < 0) return false;
  }
  m.cur = s;
  return true;
}

bool Matcher::accept(int32_t token) {
  Impl& m = *impl_;
  if (token < 0 || token >= m.vocab->n_vocab()) return false;
  if (m.vocab->is_eog(token)) {
    if (!can_end()) return false;
    m.ended = true;
    return true;
  }
  const std::string& b = m.vocab->token_bytes(token);
  if (b.empty()) return false;
  return accept_bytes(b);
}

bool Matcher::can_end() const { return impl_->states[static_cast<size_t>(impl_->cur)].can_end; }

bool Matcher::must_end() const { return impl_->ended || impl_->states[static_cast<size_t>(impl_->cur)].must_end; }

}  // namespace strata::grammar
