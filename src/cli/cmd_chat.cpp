// strata chat: an interactive REPL over the model's chat template (or --chat-template-file, with
// --chat-template-kwargs for its switches such as enable_thinking). Ctrl-C stops a reply without
// leaving the REPL; /reset clears the conversation, /exit (or end of input) leaves.
#include <fmt/format.h>

#include <iostream>
#include <string>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "cli/common_options.h"
#include "core/error.h"
#include "runtime/decode.h"

namespace strata::cli {
namespace {

struct ChatOptions {
  ModelOptions model;
  std::string system;
  std::string template_file;    // replaces the GGUF's tokenizer.chat_template
  std::string template_kwargs;  // JSON object of extra template variables
  int n_predict = -1;
  std::vector<std::string> stop;
  SamplerParams sampling;
};

// One reply: evaluates the conversation's new tokens (the engine keeps the rows it may reuse),
// then the generator (runtime/decode.h, as `strata run`) until end of turn, a stop string, the
// limit, the context's end or Ctrl-C. Returns the reply text.
std::string reply(Engine& eng, const tok::Tokenizer& tk, const ChatOptions& o, const std::vector<int32_t>& toks) {
  std::vector<float> logits;
  const double t0 = now_s();
  const int kept = eng.start_prompt(0, toks);
  eng.eval(0, toks.data() + kept, static_cast<int>(toks.size()) - kept, kept, false, logits);
  const double t1 = now_s();
  GenerateParams gp;
  gp.prompt = toks;
  gp.sampling = o.sampling;
  gp.max_tokens = o.n_predict;
  gp.stop = o.stop;
  Generator gen(&tk, eng.config().n_vocab);
  gen.start(gp, eng.options().n_ctx);
  std::string text;
  DecodeHooks hooks;
  hooks.go_on = [] { return !interrupted(); };
  hooks.on_tokens = [&](const Generator&) {
    const std::string piece = gen.drain_text();
    text += piece;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  decode(eng, 0, gen, logits, nullptr, hooks);
  const double t2 = now_s();
  const int n = gen.n_generated();
  if (interrupted()) std::fprintf(stderr, "\n[stopped]");
  std::fprintf(stderr, "\n[%zu prompt tokens in %.2f s (%d reused), %d tokens at %.1f tok/s]", toks.size() - kept, t1 - t0, kept, n,
               n > 0 ? n / (t2 - t1) : 0.0);
  if (ExpertCache* c = eng.tier().cache()) {
    const auto& k = c->counters();
    std::fprintf(stderr, " [experts: hit rate %.1f%%, read %.1f MiB so far]", 100.0 * k.hits / std::max<double>(1, k.hits + k.misses),
                 k.bytes_read / 1048576.0);
  }
  return text;
}

int chat(const ChatOptions& o) {
  ModelOptions mo = o.model;
  mo.logit_rows = 1;  // one row a pass: the next token's
  auto loaded = load_engine(mo);
  Engine& eng = *loaded.engine;
  const tok::Tokenizer& tk = *loaded.tokenizer;
  bool chatml = false;
  const std::string tmpl = o.template_file.empty() ? chat_template_or_chatml(eng.model().gguf(), &chatml) : read_file_bytes(o.template_file);
  STRATA_CHECK(!tmpl.empty(), "--chat-template-file {}: the file is empty", o.template_file);
  if (chatml) std::fprintf(stderr, "[the model has no chat template: ChatML, as the server uses]\n");
  ChatTemplateOptions topts = chat_options_from_gguf(eng.model().gguf());
  if (!o.template_kwargs.empty()) {
    topts.extra_context = nlohmann::ordered_json::parse(o.template_kwargs, nullptr, /*allow_exceptions=*/false);
    STRATA_CHECK(topts.extra_context.is_object(), "--chat-template-kwargs must be a JSON object, got: {}", o.template_kwargs);
  }
  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.emplace_back("system", o.system);
  std::fprintf(stderr, "strata chat: %s (%s). Ctrl-C stops a reply; /reset, /exit.\n", o.model.path.c_str(), eng.config().arch.c_str());
  std::string line;
  for (;;) {
    std::fprintf(stderr, "\n> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages.clear();
      if (!o.system.empty()) messages.emplace_back("system", o.system);
      eng.reset(0);
      std::fprintf(stderr, "(conversation cleared)\n");
      continue;
    }
    if (line.empty()) continue;
    messages.emplace_back("user", line);
    std::string text;
    try {
      text = apply_chat_template(tmpl, messages, topts);
    } catch (const Error& e) {  // the template refuses this conversation: say why, keep the session
      std::fprintf(stderr, "error: %s\n", e.what());
      messages.pop_back();
      continue;
    }
    const bool has_bos = !topts.bos_token.empty() && text.rfind(topts.bos_token, 0) == 0;
    const std::vector<int32_t> toks = tk.encode(text, /*add_special=*/!has_bos, /*parse_special=*/true);
    if (toks.empty() || static_cast<int>(toks.size()) >= eng.options().n_ctx) {
      std::fprintf(stderr, "error: the conversation (%zu tokens) no longer fits the context (%d); /reset or use a larger -c\n", toks.size(),
                   eng.options().n_ctx);
      messages.pop_back();
      continue;
    }
    clear_interrupt();
    try {
      messages.emplace_back("assistant", reply(eng, tk, o, toks));
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      messages.pop_back();
    }
    clear_interrupt();
  }
  std::fprintf(stderr, "\n");
  return 0;
}

}  // namespace

Command add_chat(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  auto* sub = app.add_subcommand("chat", "Interactive chat using the model's chat template");
  add_model_options(sub, o->model);
  sub->add_option("--system", o->system, "System message");
  sub->add_option("--chat-template-file", o->template_file,
                  "Jinja chat template to use instead of the model's tokenizer.chat_template (a model without one is chatted with in "
                  "ChatML, as `strata serve` does)");
  sub->add_option("--chat-template-kwargs", o->template_kwargs, "JSON object of extra template variables, e.g. '{\"enable_thinking\": false}'");
  sub->add_option("-n,--n-predict", o->n_predict, "Most tokens per reply (-1: until end of turn or context)");
  sub->add_option("--stop", o->stop, "End a reply when its text contains this string (not printed); repeatable");
  add_sampling_options(sub, o->sampling);
  return {sub, [o]() { return chat(*o); }};
}

}  // namespace strata::cli
