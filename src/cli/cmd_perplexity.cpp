// strata perplexity -m MODEL -f FILE [-c N] [--chunks N] [--kl-divergence-base FILE | --kl-divergence FILE]
//
// Perplexity the way llama-perplexity computes it: the file's tokens (with BOS only when the
// vocabulary adds one) cut into windows of n_ctx tokens, each evaluated from an empty cache in one
// sequence, positions n_ctx/2 .. n_ctx-2 of each scored (runtime/perplexity.h). The first token of
// a window becomes BOS when the vocabulary adds one (as llama-perplexity does).
//
// --kl-divergence-base FILE also saves the tokens and the log-probabilities of every scored
// position; --kl-divergence FILE reads them back (the text is then not needed: the saved tokens are
// evaluated) and reports the KL divergence of this model/setting from the saved one, the top-1
// agreement and both perplexities.
#include <algorithm>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "core/error.h"
#include "runtime/perplexity.h"

namespace strata::cli {
namespace {

constexpr char kKlMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'K', 'L'};

struct PplOptions {
  ModelOptions model;
  std::string file, kl_base_out, kl_base_in;
  int chunks = 0;
  bool json = false;
};

struct KlBase {
  int n_vocab = 0, n_ctx = 0, n_chunk = 0;
  std::vector<int32_t> tokens;
  std::ifstream in;  // positioned at the first chunk's log-probs
};

template <class T>
void put(std::ofstream& f, T v) { f.write(reinterpret_cast<const char*>(&v), sizeof v); }
template <class T>
T get(std::ifstream& f) {
  T v{};
  if (!f.read(reinterpret_cast<char*>(&v), sizeof v)) fail("KL base file is truncated");
  return v;
}

int run(const PplOptions& o) {
  if (o.file.empty() == o.kl_base_in.empty()) fail("give the text (-f FILE) or a saved base (--kl-divergence FILE), one of them");
  if (!o.kl_base_in.empty() && !o.kl_base_out.empty()) fail("--kl-divergence-base and --kl-divergence exclude each other");
  ModelOptions mo = o.model;
  mo.logit_rows = mo.n_batch;  // a pass's rows are scored as it ends: the plan holds one pass's, not a window's
  auto loaded = load_engine(mo);
  Engine& eng = *loaded.engine;
  const tok::Tokenizer& tk = *loaded.tokenizer;
  const int nv = eng.config().n_vocab;
  const int n_ctx = eng.options().n_ctx;

  std::vector<int32_t> tokens;
  std::unique_ptr<KlBase> base;
  if (!o.kl_base_in.empty()) {
    base = std::make_unique<KlBase>();
    base->in.open(o.kl_base_in, std::ios::binary);
    if (!base->in) fail("cannot open '{}'", o.kl_base_in);
    char magic[8];
    if (!base->in.read(magic, 8) || std::memcmp(magic, kKlMagic, 8) != 0) fail("'{}' is not a strata KL base file", o.kl_base_in);
    if (get<uint32_t>(base->in) != 1) fail("'{}': unknown KL base version", o.kl_base_in);
    base->n_vocab = get<int32_t>(base->in);
    base->n_ctx = get<int32_t>(base->in);
    base->n_chunk = get<int32_t>(base->in);
    if (base->n_vocab != nv) fail("KL base has {} vocabulary entries, the model {}", base->n_vocab, nv);
    if (base->n_ctx != n_ctx) fail("KL base was made with -c {}, this run has -c {}", base->n_ctx, n_ctx);
    base->tokens.resize(static_cast<size_t>(base->n_chunk) * n_ctx);
    if (!base->in.read(reinterpret_cast<char*>(base->tokens.data()), static_cast<std::streamsize>(base->tokens.size() * 4)))
      fail("KL base file is truncated");
    tokens = base->tokens;
  } else {
    tokens = tk.encode(read_file_bytes(o.file), true, false);
  }
  const PplWindows w = ppl_windows(static_cast<int64_t>(tokens.size()), n_ctx, o.chunks);
  if (w.n_chunk < 1) fail("{} tokens: need at least one window of -c {} tokens", tokens.size(), n_ctx);

  std::ofstream out;
  if (!o.kl_base_out.empty()) {
    out.open(o.kl_base_out, std::ios::binary | std::ios::trunc);
    if (!out) fail("cannot write '{}'", o.kl_base_out);
    out.write(kKlMagic, 8);
    put<uint32_t>(out, 1);
    put<int32_t>(out, nv);
    put<int32_t>(out, n_ctx);
    put<int32_t>(out, w.n_chunk);
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(static_cast<size_t>(w.n_chunk) * n_ctx * 4));
  }

  double nll = 0, nll2 = 0;
  int64_t count = 0;
  KlStats kls;
  std::vector<float> logp, ref(static_cast<size_t>(nv));
  const double t0 = now_s();
  // --pp-model: each window's unscored context evaluated as a prompt through the low-bit file.
  std::optional<PromptPass> pp;
  ContextFn context;
  if (loaded.pp_experts && w.first >= o.model.pp_min_tokens)
    context = [&](bool begin) {
      if (begin) pp.emplace(loaded, w.first, o.model.pp_min_tokens);
      else pp.reset();
    };
  score_windows(
      eng, tokens, w, tk.add_bos() && !base ? tk.bos() : -1,
      [&](const float* row, int32_t target) {
        const double v = token_nll(row, nv, target);
        nll += v;
        nll2 += v * v;
        if (out.is_open()) {
          log_softmax(row, nv, logp);
          out.write(reinterpret_cast<const char*>(logp.data()), static_cast<std::streamsize>(logp.size() * 4));
        }
        if (base) {
          if (!base->in.read(reinterpret_cast<char*>(ref.data()), static_cast<std::streamsize>(ref.size() * 4))) fail("KL base file is truncated");
          kls.add(v, -double(ref[static_cast<size_t>(target)]), kl_divergence(ref.data(), row, nv));
        }
        count++;
      },
      [&](int c) {
        if (!o.json) std::fprintf(stderr, "[%d]%.4f%s", c + 1, std::exp(nll / double(count)), c + 1 == w.n_chunk ? "\n" : ",");
      },
      context);
  const double secs = now_s() - t0;
  const double mean = nll / double(count), var = std::max(0.0, nll2 / double(count) - mean * mean);
  const double ppl = std::exp(mean), ppl_err = ppl * std::sqrt(var / double(count));
  nlohmann::json j = {{"chunks", w.n_chunk}, {"n_ctx", n_ctx}, {"scored_tokens", count}, {"nll", mean}, {"ppl", ppl}, {"ppl_err", ppl_err},
                      {"seconds", secs}, {"memory", memory_json(eng.tier().plan())}};
  // The expert tier's reads over every evaluated token (zeros when the experts are resident), and
  // what the lossy routing knobs did.
  const ExpertCacheCounters ec = eng.tier().counters();
  const uint64_t evaluated = static_cast<uint64_t>(w.n_chunk) * static_cast<uint64_t>(n_ctx);
  j["experts"] = {{"hits", ec.hits}, {"misses", ec.misses}, {"bytes_read", ec.bytes_read}, {"bytes_per_token", ec.bytes_read / evaluated}};
  add_knob_figures(loaded, j);
  std::string text = fmt::format("perplexity: {} windows of {} tokens, {} tokens scored: PPL = {:.4f} +/- {:.4f} (mean NLL {:.6f}), {:.1f} s",
                                 w.n_chunk, n_ctx, count, ppl, ppl_err, mean, secs);
  if (base) {
    const KlSummary k = kls.summary();
    j["kl_divergence"] = {{"mean", k.mean},
                          {"err", k.err},
                          {"median", k.median},
                          {"p95", k.p95},
                          {"p99", k.p99},
                          {"max", k.max},
                          {"top1_agreement", k.top1},
                          {"top1_agreement_err", k.top1_err},
                          {"base_ppl", k.base_ppl},
                          {"delta_ppl", k.delta_ppl},
                          {"delta_ppl_err", k.delta_ppl_err}};
    text += fmt::format("\nKL divergence from the base: mean {:.6f} +/- {:.6f}, median {:.6f}, p95 {:.6f}, p99 {:.6f}, max {:.6f}; top-1 agreement "
                        "{:.2f} +/- {:.2f}% ({} of {}); base PPL {:.4f}, delta PPL {:+.4f} +/- {:.4f}",
                        k.mean, k.err, k.median, k.p95, k.p99, k.max, 100.0 * k.top1, 100.0 * k.top1_err, std::llround(k.top1 * double(k.count)),
                        k.count, k.base_ppl, k.delta_ppl, k.delta_ppl_err);
  }
  if (out.is_open()) {
    out.close();
    if (!out) fail("cannot write '{}'", o.kl_base_out);
    text += fmt::format("\nsaved the tokens and log-probabilities of the scored positions to {}", o.kl_base_out);
  }
  const nlohmann::json ep = finish_expert_parallel(loaded.ep);
  if (!ep.is_null()) j["expert_parallel"] = ep;
  if (const nlohmann::json numa = finish_numa(loaded); !numa.is_null()) j["numa"] = numa;
  if (o.json) std::printf("%s\n", j.dump().c_str());
  else std::printf("%s\n", text.c_str());
  return 0;
}

}  // namespace

Command add_perplexity(CLI::App& app) {
  auto o = std::make_shared<PplOptions>();
  auto* sub = app.add_subcommand("perplexity", "Perplexity over a text file (llama-perplexity's windows), and KL divergence against saved logits");
  add_model_options(sub, o->model);
  add_pp_options(sub, o->model);
  add_ep_options(sub, o->model);
  sub->add_option("-f,--file", o->file, "Text file to score");
  sub->add_option("--chunks", o->chunks, "Score at most this many windows (0: all)");
  sub->add_option("--kl-divergence-base", o->kl_base_out, "Save the tokens and log-probabilities of every scored position to this file");
  sub->add_option("--kl-divergence", o->kl_base_in, "Compare against a saved base: KL divergence, top-1 agreement, delta perplexity");
  sub->add_flag("--json", o->json, "Print the figures as one JSON line");
  return {sub, [o] { return run(*o); }};
}

}  // namespace strata::cli
