#include "model/standin_experts.h"

#include <sys/mman.h>

#include <algorithm>

#include "core/error.h"
#include "core/page_size.h"
#include "gguf/gguf_names.h"

namespace strata {

void check_standin_matches(const Model& full, const Model& standin, std::string_view option) {
  const ModelConfig &a = full.config(), &b = standin.config();
  const std::string& p = standin.gguf().path();
  const auto same = [&](auto x, auto y, const std::string& what) {
    STRATA_CHECK(x == y, "{} {}: {} is {}, the model's {}", option, p, what, y, x);
  };
  same(full.gguf().architecture(), standin.gguf().architecture(), "the architecture");
  same(a.n_vocab, b.n_vocab, "the vocabulary size");
  same(a.n_embd, b.n_embd, "the embedding width");
  same(a.n_layer, b.n_layer, "the layer count");
  const GgufValue *ta = full.gguf().find("tokenizer.ggml.tokens"), *tb = standin.gguf().find("tokenizer.ggml.tokens");
  STRATA_CHECK((ta == nullptr) == (tb == nullptr), "{} {}: tokenizer.ggml.tokens is {} there", option, p, tb ? "present" : "absent");
  if (ta) {
    same(ta->strings.size(), tb->strings.size(), "the token count");
    for (size_t i = 0; i < ta->strings.size(); ++i)
      STRATA_CHECK(ta->strings[i] == tb->strings[i], "{} {}: token {} is '{}', the model's '{}'", option, p, i, tb->strings[i], ta->strings[i]);
  }
  for (int l = 0; l < a.n_layer; ++l) {
    const LayerConfig &x = a.layers[static_cast<size_t>(l)], &y = b.layers[static_cast<size_t>(l)];
    const std::string at = fmt::format("layer {}'s ", l);
    same(x.ffn == FfnKind::Moe, y.ffn == FfnKind::Moe, at + "MoE flag");
    same(x.n_expert, y.n_expert, at + "expert count");
    same(x.n_expert_used, y.n_expert_used, at + "experts per token");
    same(x.n_ff_exp, y.n_ff_exp, at + "expert width");
  }
  for (const GgufTensor& t : full.gguf().tensors()) {
    if (t.name.find(tn::kRoutedExpertsMark) == std::string_view::npos) continue;
    const GgufTensor* u = standin.gguf().tensor(t.name);
    STRATA_CHECK(u, "{} {}: no tensor {}", option, p, t.name);
    STRATA_CHECK(u->ne == t.ne, "{} {}: tensor {} is {}, the model's {}", option, p, t.name, u->shape_string(), t.shape_string());
  }
}

StandInExperts::StandInExperts(ExpertProvider& inner, const Model& standin, int keep) : inner_(inner), mapped_(standin.weights()), keep_(keep) {
  for (const LayerConfig& l : standin.config().layers) n_expert_ = std::max(n_expert_, l.n_expert);
  uses_.assign(standin.config().layers.size() * static_cast<size_t>(n_expert_), 0);
  forward_.reserve(kMaxExperts);
  admit_list_.reserve(kMaxExperts);
}

std::vector<ExpertKey> StandInExperts::hottest(std::vector<uint32_t>* uses) {
  std::vector<ExpertKey> keys;
  for (size_t i = 0; i < uses_.size(); ++i)
    if (uses_[i]) keys.push_back({static_cast<int>(i) / n_expert_, static_cast<int>(i) % n_expert_});
  std::stable_sort(keys.begin(), keys.end(), [&](ExpertKey a, ExpertKey b) {
    return uses_[static_cast<size_t>(a.layer) * n_expert_ + a.expert] > uses_[static_cast<size_t>(b.layer) * n_expert_ + b.expert];
  });
  if (uses) {
    uses->clear();
    for (const ExpertKey& k : keys) uses->push_back(uses_[static_cast<size_t>(k.layer) * n_expert_ + k.expert]);
  }
  std::fill(uses_.begin(), uses_.end(), 0u);
  return keys;
}

void StandInExperts::begin_batch(int n_tokens) {
  route_layer_ = layer_ = -1;
  inner_.begin_batch(n_tokens);
}

void StandInExperts::on_route(int layer, int token, const int32_t* ids, int k) {
  (void)token;
  if (layer != route_layer_) {
    std::fill(std::begin(protected_), std::end(protected_), false);
    route_layer_ = layer;
  }
  for (int j = 0; j < std::min(keep_, k); ++j) protected_[ids[j]] = true;
}

// An expert not in memory and not among any token's first `keep` choices of this layer comes from
// the stand-in. A request for a layer whose routing was not seen (a NextN pass: its blocks are
// other layers to the provider) takes nothing from the stand-in.
void StandInExperts::request(int layer, const int32_t* experts, int n) {
  layer_ = layer;
  std::fill(std::begin(is_standin_), std::end(is_standin_), false);
  forward_.clear();
  admit_list_.clear();
  for (int i = 0; i < n; ++i) {
    const int e = experts[i];
    is_standin_[e] = active_ && layer == route_layer_ && !protected_[e] && !inner_.in_memory(layer, e);
    (is_standin_[e] ? admit_list_ : forward_).push_back(e);
  }
  inner_.request(layer, forward_.data(), static_cast<int>(forward_.size()));
  for (const int32_t e : admit_list_) read_ahead(layer, e);
  if (admit_ && !admit_list_.empty()) {  // after the demanded reads: the full copies for later tokens
    inner_.prefetch(layer, admit_list_.data(), static_cast<int>(admit_list_.size()));
    c_.admits.fetch_add(admit_list_.size(), std::memory_order_relaxed);
  }
}

// The stand-in's bytes of an expert, asked of the kernel at once (MADV_WILLNEED: asynchronous
// readahead of the whole range), so that its products do not fault the mapping in a window at a
// time, and the stand-ins of a layer are read at once rather than one after the other.
void StandInExperts::read_ahead(int layer, int e) {
  const ExpertMats m = mapped_.acquire(layer, e);
  const uintptr_t page = page_size();
  for (const QMatrix* q : {&m.gate, &m.up, &m.down}) {
    if (q->empty()) continue;
    const uintptr_t a = reinterpret_cast<uintptr_t>(q->data), b = a / page * page;
    ::madvise(reinterpret_cast<void*>(b), a - b + q->row_stride_bytes * static_cast<uintptr_t>(q->rows), MADV_WILLNEED);
  }
}

ExpertMats StandInExperts::standin_mats(int e) {
  const ExpertMats m = mapped_.acquire(layer_, e);
  c_.experts.fetch_add(1, std::memory_order_relaxed);
  for (const QMatrix* q : {&m.gate, &m.up, &m.down})
    c_.bytes.fetch_add(ggml_row_size(q->type, static_cast<uint64_t>(q->cols)) * static_cast<uint64_t>(q->rows), std::memory_order_relaxed);
  const size_t u = static_cast<size_t>(layer_) * n_expert_ + e;
  if (u < uses_.size()) uses_[u]++;
  return m;
}

ExpertMats StandInExperts::acquire(int layer, int e) { return standin(layer, e) ? standin_mats(e) : inner_.acquire(layer, e); }

// Stand-ins first (they are mapped: nothing to wait for); once none is pending, every pending
// expert is one inner was asked for.
int StandInExperts::acquire_next(int layer, const int32_t* pending, int n, ExpertMats* out) {
  for (int i = 0; i < n; ++i)
    if (standin(layer, pending[i])) {
      *out = standin_mats(pending[i]);
      return i;
    }
  return inner_.acquire_next(layer, pending, n, out);
}

bool StandInExperts::try_acquire(int layer, int e, ExpertMats* out) {
  if (!standin(layer, e)) return inner_.try_acquire(layer, e, out);
  *out = standin_mats(e);
  return true;
}

void StandInExperts::release(int layer, int e) {
  if (!standin(layer, e)) inner_.release(layer, e);
}

}  // namespace strata
