// strata run: generate from a prompt, streaming text, ending with one line of figures.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "cli/tensor_dump.h"
#include "core/error.h"
#include "kernels/kernel_table.h"
#include "core/units.h"
#include "grammar/grammar.h"
#include "model/executor.h"
#include "runtime/decode.h"
#include "runtime/engine.h"
#include "runtime/generator.h"
#include "runtime/draft.h"
#include "runtime/routing_recorder.h"
#include "runtime/speculative.h"
#include "runtime/sampler.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

struct RunOptions {
  ModelOptions model;
  std::string prompt, prompt_file, tokens_file, logits_out;
  int n_predict = 128;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  std::string grammar_file, json_schema;
  bool json = false;
  int top_logits = 0;
  bool prof = false;
  std::string trace_path, heatmap_path;
  std::string dump_dir, dump_filter;
  SamplerParams sampling;
  // Speculative decoding
  std::string draft, draft_model;  // --draft lookup|model|mtp, -md FILE
  SpecOptions spec = [] {
    SpecOptions so;
    so.adaptive = true;  // the cost model chooses k per pass unless --draft-fixed
    return so;
  }();
};

std::vector<int32_t> read_token_file(const std::string& path) {
  std::ifstream f(path);
  STRATA_CHECK(f.good(), "{}: cannot open token file", path);
  std::vector<int32_t> ids;
  std::string w;
  while (f >> w) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(w, &used);
    } catch (...) {
      used = 0;
    }
    STRATA_CHECK(used == w.size() && v >= 0 && v <= INT32_MAX, "{}: '{}' is not a token id", path, w);
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

nlohmann::json topk_json(const float* logits, int n_vocab, int k) {
  std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
  for (int i = 0; i < n_vocab; ++i) idx[i] = i;
  k = std::min(k, n_vocab);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  nlohmann::json arr = nlohmann::json::array();
  for (int i = 0; i < k; ++i) arr.push_back({idx[i], logits[idx[i]]});
  return arr;
}

std::vector<int32_t> load_prompt(const RunOptions& o, const tok::Tokenizer& tk, int n_vocab, int n_ctx) {
  std::vector<int32_t> prompt;
  if (!o.tokens_file.empty()) {
    prompt = read_token_file(o.tokens_file);
  } else {
    std::string text = o.prompt;
    if (!o.prompt_file.empty()) text = read_file_bytes(o.prompt_file);
    prompt = tk.encode(text, /*add_special=*/true, /*parse_special=*/true);
  }
  STRATA_CHECK(!prompt.empty(), "the prompt is empty (no tokens)");
  for (int32_t t : prompt) STRATA_CHECK(t >= 0 && t < n_vocab, "token id {} is outside the vocabulary (0..{})", t, n_vocab - 1);
  STRATA_CHECK(static_cast<int>(prompt.size()) <= n_ctx, "the prompt has {} tokens but the context holds {} (use -c to enlarge it)",
               prompt.size(), n_ctx);
  return prompt;
}

// --top-logits (into the JSON) and --logits-out, from the prompt's logits.
void prompt_outputs(const RunOptions& o, int nv, const float* last) {
  if (!o.logits_out.empty()) {
    std::ofstream f(o.logits_out, std::ios::binary);
    STRATA_CHECK(f.good(), "{}: cannot create", o.logits_out);
    f.write(reinterpret_cast<const char*>(last), static_cast<std::streamsize>(sizeof(float) * nv));
    STRATA_CHECK(f.good(), "{}: write failed", o.logits_out);
  }
}

struct Generated {
  std::vector<int32_t> tokens;
  std::string text;
  double t_first = 0;  // when the first token was sampled
  double t_16 = 0;     // when the 16th was (warm start vs cold: the first tokens' speed)
  Finish finish = Finish::None;
  std::optional<SpecStats> spec;
};

// What the generator is asked for: -n, --ignore-eos, --stop, the sampling options and a grammar
// (--grammar-file GBNF or --json-schema).
GenerateParams generate_params(const RunOptions& o, const std::vector<int32_t>& prompt) {
  GenerateParams gp;
  gp.prompt = prompt;
  gp.sampling = o.sampling;
  gp.max_tokens = o.n_predict;
  gp.ignore_eos = o.ignore_eos;
  gp.stop = o.stop;
  STRATA_CHECK(o.grammar_file.empty() || o.json_schema.empty(), "--grammar-file and --json-schema: give one of them");
  if (!o.grammar_file.empty()) gp.grammar = grammar::parse_gbnf(read_file_bytes(o.grammar_file));
  if (!o.json_schema.empty()) {
    const nlohmann::json schema = nlohmann::json::parse(o.json_schema, nullptr, /*allow_exceptions=*/false);
    STRATA_CHECK(!schema.is_discarded(), "--json-schema: not JSON: {}", o.json_schema);
    gp.grammar = grammar::parse_gbnf(grammar::json_schema_to_gbnf(schema));
  }
  return gp;
}

// The draft source --draft / -md ask for (nullptr: none, or the architecture cannot rewind).
std::unique_ptr<DraftSource> make_draft(const RunOptions& o, Engine& eng, const tok::Tokenizer& tk, std::unique_ptr<Engine> draft_eng) {
  std::string kind = o.draft;
  if (kind.empty() && !o.draft_model.empty()) kind = "model";
  if (kind.empty()) return nullptr;
  STRATA_CHECK(kind == "lookup" || kind == "model" || kind == "mtp", "--draft must be lookup, model or mtp (got '{}')", kind);
  STRATA_CHECK(kind != "model" || !o.draft_model.empty(), "--draft model needs the draft model's file (-md FILE)");
  if (!eng.model().rewindable()) {
    std::fprintf(stderr, "[speculative decoding off: architecture %s cannot cut rejected drafts back]\n", eng.config().arch.c_str());
    return nullptr;
  }
  if (kind == "lookup") return std::make_unique<LookupDraft>();
  SamplerParams sp = o.sampling;
  sp.seed ^= 0x5eed5eed5eed5eedULL;  // the draft's own random stream
  if (kind == "mtp") return std::make_unique<MtpDraft>(eng, 0, sp, std::clamp(o.spec.k_max, 1, 2));
  return std::make_unique<ModelDraft>(std::move(draft_eng), sp);
}

std::string spec_report(const SpecStats& s, const std::string& kind) {
  const double passes = static_cast<double>(std::max<int64_t>(1, s.passes));
  std::string by_pos;
  for (size_t i = 0; i < s.proposed_at.size(); ++i)
    by_pos += fmt::format("{}{:.0f}%", i ? " " : "", s.proposed_at[i] ? 100.0 * s.accepted_at[i] / s.proposed_at[i] : 0.0);
  std::string r = fmt::format("[speculative ({}): {} passes, {} drafts proposed, {} accepted ({:.1f}%), {:.2f} tokens per pass | acceptance by position: {}",
                              kind, s.passes, s.proposed, s.accepted, s.proposed ? 100.0 * s.accepted / s.proposed : 0.0, (s.accepted + s.passes) / passes, by_pos);
  if (s.expert_slots)
    r += fmt::format(" | experts per pass: {:.1f} unique of {:.1f} routed ((k+1) x top-k x layers)", s.expert_union / passes, s.expert_slots / passes);
  std::string hist;
  for (size_t k = 0; k < s.k_hist.size(); ++k) hist += fmt::format("{}k={}: {}", k ? ", " : "", k, s.k_hist[k]);
  r += fmt::format(" | passes by k: {} (cost model: plain pass {:.2f} ms, +{:.2f} ms per draft row)", hist, s.cost_plain_s * 1e3, s.cost_row_s * 1e3);
  if (s.demoted) r += fmt::format(" | {} experts read only for rejected drafts kept at low priority", s.demoted);
  if (s.released_at >= 0)
    r += fmt::format(" | the draft model was let go after pass {} (drafts could not pay) and its memory freed, {} of it to the expert cache",
                     s.released_at, format_bytes(s.released_bytes));
  if (s.predicting) {
    const RoutePredictionStats& p = s.prediction;
    r += fmt::format(" | predicted routing: draft rows' experts precision {:.1f}%, recall {:.1f}% ({} of {} rows predicted); {} passes with drafts "
                     "read {} (predicted {}), for the drafts alone {} (predicted {}; calibration {:.2f})",
                     100.0 * p.precision(), 100.0 * p.recall(), p.rows_predicted, p.rows, p.passes, format_bytes(p.actual_bytes),
                     format_bytes(static_cast<uint64_t>(p.bytes)), format_bytes(p.actual_extra), format_bytes(static_cast<uint64_t>(p.extra_bytes)),
                     p.calibration);
  }
  r += fmt::format(" | read {} per generated token | time: draft {:.3f} s, I/O wait {:.3f} s, compute {:.3f} s]",
                   format_bytes(s.accepted + s.passes ? s.bytes_read / static_cast<uint64_t>(s.accepted + s.passes) : 0), s.draft_s, s.io_wait_s,
                   std::max(0.0, s.verify_s - s.io_wait_s));
  return r;
}

nlohmann::json spec_json(const SpecStats& s) {
  nlohmann::json j = {{"passes", s.passes},         {"proposed", s.proposed},         {"accepted", s.accepted},         {"emitted", s.emitted},
          {"proposed_at", s.proposed_at}, {"accepted_at", s.accepted_at}, {"expert_union", s.expert_union}, {"expert_slots", s.expert_slots},
          {"bytes_read", s.bytes_read}, {"draft_s", s.draft_s},           {"verify_s", s.verify_s},         {"io_wait_s", s.io_wait_s},
          {"k_hist", s.k_hist},         {"demoted", s.demoted},           {"cost_plain_s", s.cost_plain_s}, {"cost_row_s", s.cost_row_s},
          {"released_at", s.released_at}, {"released_bytes", s.released_bytes}};
  if (s.predicting) {
    const RoutePredictionStats& p = s.prediction;
    j["prediction"] = {{"passes", p.passes},
                       {"predicted_bytes", p.bytes},
                       {"actual_bytes", p.actual_bytes},
                       {"predicted_extra_bytes", p.extra_bytes},
                       {"actual_extra_bytes", p.actual_extra},
                       {"rows", p.rows},
                       {"rows_predicted", p.rows_predicted},
                       {"experts_predicted", p.experts_predicted},
                       {"experts_routed", p.experts_routed},
                       {"experts_both", p.experts_both},
                       {"precision", p.precision()},
                       {"recall", p.recall()},
                       {"calibration", p.calibration}};
  }
  return j;
}

// The generator's tokens after the prompt (runtime/decode.h: one plain pass per token, or one
// verification pass per step through `sd`) until -n, end of generation, a stop string, a
// grammar's end, the context's end or Ctrl-C; streams the text unless --json.
Generated generate(Engine& eng, Generator& gen, const RunOptions& o, const GenerateParams& gp, const float* last, SpeculativeDecoder* sd,
                   RoutingRecorder* rec) {
  gen.start(gp, eng.options().n_ctx);
  Generated g;
  DecodeHooks hooks;
  hooks.go_on = [] { return !interrupted(); };
  hooks.before_pass = [&](int pass) {
    if (rec) rec->begin(static_cast<uint32_t>(pass), Phase::decode);
  };
  hooks.on_tokens = [&](const Generator&) {
    const int n = gen.n_generated();
    if (n >= 1 && g.t_first == 0) g.t_first = now_s();
    if (n >= 16 && g.t_16 == 0) g.t_16 = now_s();
    const std::string piece = gen.drain_text();
    g.text += piece;
    if (!o.json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
  };
  decode(eng, 0, gen, {last, static_cast<size_t>(eng.config().n_vocab)}, sd, hooks);
  g.tokens.assign(gen.history().begin() + static_cast<std::ptrdiff_t>(gp.prompt.size()), gen.history().end());
  g.finish = gen.finish();
  if (gen.finish() == Finish::Length && static_cast<int>(gen.history().size()) > eng.options().n_ctx)
    std::fprintf(stderr, "\n[context full at %d tokens]\n", eng.options().n_ctx);
  if (sd) g.spec = sd->stats();
  return g;
}

std::unique_ptr<RoutingRecorder> start_recorder(const RunOptions& o, Engine& eng) {
  if (o.trace_path.empty() && o.heatmap_path.empty()) return nullptr;
  int ne = 0;
  for (const auto& l : eng.config().layers) ne = std::max(ne, l.n_expert);
  STRATA_CHECK(ne > 0, "--trace-experts / --heatmap: the model has no routed experts");
  auto rec = std::make_unique<RoutingRecorder>(eng.config().n_layer, ne, "p0");
  eng.model().add_routing_observer(rec.get());
  rec->begin(0, Phase::prefill);
  return rec;
}

void reset_profile(Engine& eng) {
  if (ExpertCache* c = eng.tier().cache()) c->reset_layer_prof();
  eng.model().reset_layer_seconds();
  if (LayerExecutor* ex = eng.model().executor()) ex->reset_stats();
}

int run(const RunOptions& o) {
  ModelOptions mo = o.model;
  mo.nextn_kv = o.draft == "mtp";  // the NextN KV rows in the engine's memory plan
  mo.routing_memory = (!o.draft.empty() || !o.draft_model.empty()) && o.spec.predict_routing;  // each position's routes too
  // Verification passes give the next token's row and one per draft.
  mo.logit_rows = o.draft.empty() && o.draft_model.empty() ? 1 : 1 + std::max(o.spec.k_max, 1);
  if (o.top_logits > 0) mo.logit_rows = mo.n_batch;  // every prompt row, a pass at a time
  // -md: the draft model's engine, its memory in the target's plan.
  if (!o.draft_model.empty() && (o.draft.empty() || o.draft == "model")) mo.draft_model = o.draft_model, mo.draft_seq = 1;
  auto loaded = load_engine(mo);
  Engine& eng = *loaded.engine;
  const tok::Tokenizer& tk = *loaded.tokenizer;
  const int nv = eng.config().n_vocab;
  const std::vector<int32_t> prompt = load_prompt(o, tk, nv, eng.options().n_ctx);
  std::unique_ptr<RoutingRecorder> rec = start_recorder(o, eng);
  std::unique_ptr<TensorDumper> dump;
  if (!o.dump_dir.empty()) {
    dump = std::make_unique<TensorDumper>(o.dump_dir, o.dump_filter);
    eng.model().set_tensor_observer(dump.get());
  }
  reset_profile(eng);
  if (LayerExecutor* ex = eng.model().executor()) ex->set_layer_sync(o.prof);  // --prof: device time per layer

  // Before the prompt: MTP's NextN rows follow the prompt's passes.
  std::unique_ptr<DraftSource> draft = make_draft(o, eng, tk, std::move(loaded.draft));
  const GenerateParams gp = generate_params(o, prompt);
  // Before the prompt too: the decoder remembers the prompt's routing to predict the drafts'. It
  // verifies for `gen`, which generate() starts after the prompt.
  Generator gen(&tk, nv, gp.grammar ? vocab_index(nv, tk) : nullptr);
  std::optional<SpeculativeDecoder> sd;
  if (draft && gp.grammar) std::fprintf(stderr, "[speculative decoding off: drafts are not checked against a grammar]\n");
  if (draft && !gp.grammar) sd.emplace(eng, 0, gen, draft.get(), o.spec);
  std::vector<float> logits;  // the prompt's last row
  const double t0 = now_s();
  const int n_prompt = static_cast<int>(prompt.size());
  nlohmann::json prompt_topk = nlohmann::json::array();
  // --top-logits: every prompt row, pass by pass (the plan holds one pass's rows, not the prompt's).
  {
    const PromptPass pp(loaded, n_prompt, o.model.pp_min_tokens);  // --pp-model
    eng.eval_rows(0, prompt.data(), n_prompt, 0, o.top_logits > 0 ? 0 : n_prompt - 1, [&](int i, const float* row) {
      if (o.top_logits > 0) prompt_topk.push_back(topk_json(row, nv, o.top_logits));
      if (i == n_prompt - 1) logits.assign(row, row + nv);
    });
  }
  const double t1 = now_s(), cpu1 = process_cpu_s();
  nlohmann::json gpu_prompt = device_json(eng, static_cast<int>(prompt.size()), t1 - t0);
  const std::string gpu_prompt_line = device_line(eng, static_cast<int>(prompt.size()), t1 - t0);
  if (o.prof) {
    std::fprintf(stderr, "[PROF] prompt (%zu tokens):\n%s", prompt.size(), layer_profile(eng, static_cast<int>(prompt.size())).c_str());
    reset_profile(eng);
  }
  if (LayerExecutor* ex = eng.model().executor()) ex->reset_stats();  // the generation's figures apart from the prompt's
  const float* last = logits.data();
  nlohmann::json j;
  j["prompt_tokens"] = prompt;
  if (o.top_logits > 0) j["prompt_topk"] = std::move(prompt_topk);
  prompt_outputs(o, nv, last);

  const Generated g = generate(eng, gen, o, gp, last, sd ? &*sd : nullptr, rec.get());
  const double t2 = now_s(), gen_cpu_s = process_cpu_s() - cpu1;
  const double pp_s = t1 - t0, gen_s = t2 - t1;
  const int n_gen = static_cast<int>(g.tokens.size());
  const double pp_tps = pp_s > 0 ? prompt.size() / pp_s : 0;
  const double tg_tps = n_gen > 1 && t2 > g.t_first ? (n_gen - 1) / (t2 - g.t_first) : 0;
  std::string figures = fmt::format("[prompt {} tokens, {:.1f} tok/s | generation {} tokens, {:.1f} tok/s | first token {:.0f} ms", prompt.size(),
                                    pp_tps, n_gen, tg_tps, (g.t_first - t0) * 1000.0);
  if (g.t_16 > 0) figures += fmt::format(" | first 16 tokens {:.2f} tok/s", 16.0 / (g.t_16 - t1));
  if (const LayerExecutor* ex = eng.model().executor()) figures += fmt::format(" | {}, {} layers", ex->name(), ex->n_layers());
  figures += "]";
  if (rec) {
    eng.model().remove_routing_observer(rec.get());
    if (!o.trace_path.empty()) rec->write_trace(o.trace_path);
    if (!o.heatmap_path.empty()) rec->write_heatmap(o.heatmap_path);
  }
  if (dump) {
    eng.model().set_tensor_observer(nullptr);
    std::fprintf(stderr, "[dumped %d tensors to %s]\n", dump->files(), o.dump_dir.c_str());
  }
  if (g.spec) std::fprintf(stderr, "%s\n", spec_report(*g.spec, draft->name()).c_str());
  if (o.prof) std::fprintf(stderr, "[PROF] generation, per token:\n%s", layer_profile(eng, std::max(1, n_gen - 1)).c_str());
  std::fprintf(stderr, "%s\n", tier_summary(eng, static_cast<int>(prompt.size()) + n_gen, t2 - t0).c_str());
  const nlohmann::json ep = finish_expert_parallel(loaded.ep);
  const nlohmann::json numa = finish_numa(loaded);
  if (eng.model().executor())
    std::fprintf(stderr, "prompt %s\ngeneration %s\n", gpu_prompt_line.c_str(), device_line(eng, std::max(1, n_gen), gen_s).c_str());
  if (o.json) {
    j["tokens"] = g.tokens;
    if (g.spec) j["speculative"] = spec_json(*g.spec);
    j["text"] = g.text;
    j["memory"] = memory_json(eng.tier().plan());
    if (eng.model().executor()) {
      j["vram"] = vram_json(eng);
      j["gpu"] = {{"prompt", gpu_prompt}, {"generation", device_json(eng, std::max(1, n_gen), gen_s)}};
    }
    const ExpertCacheCounters k = eng.tier().counters();
    j["experts"] = {{"hits", k.hits}, {"misses", k.misses}, {"bytes_read", k.bytes_read}, {"wait_s", k.wait_s},
                    {"bytes_per_token", n_gen + static_cast<int>(prompt.size()) > 0 ? k.bytes_read / static_cast<uint64_t>(n_gen + prompt.size()) : 0}};
    if (!ep.is_null()) j["expert_parallel"] = ep;
    if (!numa.is_null()) j["numa"] = numa;
    add_knob_figures(loaded, j);
    j["kernels"] = kernel_choice();
    j["timings"] = {{"prompt_s", pp_s}, {"gen_s", gen_s}, {"gen_cpu_s", gen_cpu_s}, {"prompt_tps", pp_tps}, {"gen_tps", tg_tps}, {"ttft_ms", (g.t_first - t0) * 1000.0},
                    {"first16_tps", g.t_16 > 0 ? 16.0 / (g.t_16 - t1) : 0.0}};
    std::fprintf(stderr, "%s\n", figures.c_str());
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n%s\n", figures.c_str());
  }
  return 0;
}

}  // namespace

Command add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* sub = app.add_subcommand("run", "Generate text from a prompt");
  add_model_options(sub, o->model);
  add_pp_options(sub, o->model);
  add_ep_options(sub, o->model);
  sub->add_option("-p,--prompt", o->prompt, "Prompt text");
  sub->add_option("-f,--file", o->prompt_file, "Read the prompt from a file (byte for byte)");
  sub->add_option("--tokens-file", o->tokens_file, "Whitespace-separated token ids used verbatim as the prompt");
  sub->add_option("-n,--n-predict", o->n_predict, "Tokens to generate (-1: until the context is full)");
  sub->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at end-of-generation tokens");
  sub->add_option("--stop", o->stop, "Stop when the text contains this string (not printed); repeatable");
  sub->add_option("--grammar-file", o->grammar_file, "The output follows this GBNF grammar (llama.cpp's dialect); no speculation then");
  sub->add_option("--json-schema", o->json_schema, "The output is JSON following this JSON Schema (as a grammar); no speculation then");
  sub->add_flag("--json", o->json, "Last stdout line: JSON with prompt_tokens, tokens, text, timings");
  sub->add_option("--logits-out", o->logits_out, "Write the last prompt position's logits (float32 LE)");
  sub->add_option("--top-logits", o->top_logits, "Add prompt_topk (K best [id, logit] per prompt position) to --json");
  sub->add_flag("--prof", o->prof, "Print per-layer I/O wait vs compute per token");
  sub->add_option("--trace-experts", o->trace_path, "Write the routing of every token and MoE layer (CSV, for strata cachesim)");
  sub->add_option("--heatmap", o->heatmap_path, "Write a layer x expert heat map (SVG, and CSV beside it)");
  sub->add_option("--dump-tensors", o->dump_dir,
                  "Write the named intermediate tensors of every pass (attn_norm, attn_out, ffn_inp, ffn_moe_logits, ffn_out, l_out, "
                  "result_norm, ... per layer) as raw float32 [rows = tokens, cols] files plus index.csv into this folder");
  sub->add_option("--dump-filter", o->dump_filter, "With --dump-tensors: only tensors whose 'name-layer' matches this regex (e.g. 'l_out-3')");
  add_sampling_options(sub, o->sampling);
  sub->add_option("--draft", o->draft,
                  "Speculative decoding: lookup (drafts from n-gram matches in the prompt and the output), model (-md) or mtp (the "
                  "model's own NextN multi-token-prediction block, GLM-4.5 files that carry one; depth up to 2); greedy output is "
                  "token for token the same as without it")
      ->check(CLI::IsMember({"lookup", "model", "mtp"}));
  sub->add_option("--model-draft", o->draft_model, "-md FILE: draft model GGUF (same vocabulary as the model; implies --draft model)");
  sub->add_option("--draft-max", o->spec.k_max, "Speculative decoding: most drafted tokens per pass")->capture_default_str();
  sub->add_option("--draft-min", o->spec.k_min, "Speculative decoding: fewer drafts than this make a plain pass")->capture_default_str();
  sub->add_flag("--draft-fixed", [o](int64_t) { o->spec.adaptive = false; },
                "Speculative decoding: verify every draft (up to --draft-max) instead of letting the cost model choose k per pass "
                "(0..--draft-max, from measured compute time, bytes read, read bandwidth and acceptance)");
  sub->add_flag("--no-draft-predict", [o](int64_t) { o->spec.predict_routing = false; },
                "Speculative decoding while experts stream: do not predict the draft rows' experts from the routing of earlier positions "
                "(the cost model then charges every draft row its fitted bytes)");
  return {sub, [o]() { return run(*o); }};
}

}  // namespace strata::cli
