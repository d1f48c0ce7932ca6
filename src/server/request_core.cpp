#include "server/request_core.h"

#include <fmt/format.h>

#include "server/chat_request.h"
#include "server/constraints.h"

namespace strata::server {

using nlohmann::json;

namespace {

bool ends_with(std::string_view s, std::string_view t) { return s.size() >= t.size() && s.substr(s.size() - t.size()) == t; }

// Puts `text` at the start of the system message (a new one when the conversation has none).
void add_system_text(std::vector<ChatMsg>& messages, const std::string& text) {
  if (!messages.empty() && (messages[0].role == "system" || messages[0].role == "developer")) {
    messages[0].content = text + "\n\n" + messages[0].content.value_or("");
    return;
  }
  messages.insert(messages.begin(), ChatMsg("system", text));
}

// Chat messages -> the prompt tokens; tools, grammar and reasoning settings.
void prepare_chat(const CoreContext& ctx, const Json& j, Job& jb, GenParams& gp, const char* call_prefix) {
  ChatRequest cr = parse_chat_request(j);
  ChatInputs in;
  // tool_choice "none": the template is not told about the tools (history still renders) and
  // the reply is not parsed for calls.
  jb.tools = cr.tools.is_array() && cr.tool_choice.mode != ToolChoice::Mode::None;
  if (jb.tools) {
    in.tools = cr.tools;
    jb.format = ctx.tool_format;
    jb.parser.tools = tool_specs(cr.tools);
    jb.parser.id_prefix = random_id(call_prefix) + "_";
    // A template without a tool syntax: the tools are described in the system message and the
    // reply is the generic JSON object.
    if (jb.format == toolcall::Format::Generic) add_system_text(cr.messages, toolcall::generic_tools_prompt(jb.parser.tools, cr.parallel_tool_calls));
  }
  ToolConstraint tc;
  tc.format = jb.format;
  tc.tools = jb.tools ? &jb.parser.tools : nullptr;
  tc.choice = cr.tool_choice;
  tc.parallel = cr.parallel_tool_calls;
  gp.grammar = request_grammar(j, &tc);
  in.kwargs = cr.kwargs;
  ChatPrompt cp;
  try {
    cp = format_chat(cr.messages, *ctx.chat_format, in);
  } catch (const std::exception& e) {
    throw bad_request(fmt::format("the chat template cannot render these messages: {}", e.what()), "messages", "chat_template_error");
  }
  jb.reasoning = ctx.reasoning;
  jb.start_in_think = ends_with(cp.text, "<think>") || ends_with(cp.text, "<think>\n");
  jb.parser.reasoning = jb.reasoning;
  jb.parser.thinking_open = jb.start_in_think;
  gp.prompt = ctx.tok->encode(cp.text, cp.add_special, /*parse_special=*/true);
  gp.reasoning_budget = cr.reasoning_budget.value_or(ctx.reasoning_budget);
  gp.start_in_think = jb.start_in_think;
  gp.think_close = *ctx.think_close;
  // A template with a reasoning block the prompt did not open: the model may open it before a
  // forced tool call or a response_format.
  if (jb.reasoning && !jb.start_in_think && gp.reasoning_budget != 0 && ctx.think_open &&
      ctx.chat_format->model_template.find("<think>") != std::string::npos)
    gp.think_open = *ctx.think_open;
}

// Completions: the prompts (several: one choice each), with their text for `echo`.
void prepare_prompts(const CoreContext& ctx, const Json& j, GenParams& gp, std::vector<std::vector<int32_t>>& prompts,
                     std::vector<std::string>& texts) {
  gp.grammar = request_grammar(j, nullptr);
  for (PromptInput& in : parse_prompts(j)) {
    if (in.is_tokens) {
      for (int32_t t : in.tokens)
        if (t >= ctx.tok->n_vocab()) throw bad_request(fmt::format("token id {} is outside the vocabulary (0..{})", t, ctx.tok->n_vocab() - 1), "prompt", "invalid_value");
      texts.push_back(ctx.tok->decode(in.tokens, /*remove_special=*/false, /*unparse_special=*/true));
      prompts.push_back(std::move(in.tokens));
    } else {
      prompts.push_back(ctx.tok->encode(in.text, /*add_special=*/true, /*parse_special=*/true));
      texts.push_back(std::move(in.text));
    }
  }
}

}  // namespace

std::shared_ptr<CoreRun> start_request(const CoreContext& ctx, const Json& body, bool chat, const CommonParams& common, const char* id_prefix,
                                       const char* call_prefix) {
  auto run = std::make_shared<CoreRun>();
  Job& jb = run->job;
  jb.chat = chat;
  jb.common = common;
  jb.id = random_id(id_prefix);
  jb.created = unix_time();
  GenParams gp;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> texts;  // completions: each prompt's text (echo)
  if (chat) {
    prepare_chat(ctx, body, jb, gp, call_prefix);
    prompts.push_back(std::move(gp.prompt));
  } else {
    prepare_prompts(ctx, body, gp, prompts, texts);
  }
  const int n_ctx = ctx.sched->n_ctx();
  for (size_t k = 0; k < prompts.size(); ++k) {
    const std::string param = chat ? "messages" : prompts.size() > 1 ? fmt::format("prompt[{}]", k) : "prompt";
    if (prompts[k].empty()) throw bad_request("the prompt is empty (no tokens)", param, "empty_prompt");
    if (static_cast<int>(prompts[k].size()) >= n_ctx)
      throw bad_request(fmt::format("This model's maximum context length is {} tokens per request, but the prompt has {} tokens (at least one "
                                    "token must remain for the completion). Shorten the prompt or restart the server with a larger -c.",
                                    n_ctx, prompts[k].size()),
                        param, "context_length_exceeded");
  }
  if (prompts.size() * static_cast<size_t>(common.n) > static_cast<size_t>(kMaxSequences))
    throw bad_request(fmt::format("{} prompts x n = {} is more than the {} sequences a request may ask for", prompts.size(), common.n, kMaxSequences), "n",
                      "invalid_value");
  jb.n_per_prompt = common.n;
  if (!chat && opt_boolean(body, "echo").value_or(false)) run->echo = texts;
  gp.sampling = common.sampling;
  const int n_logits = ctx.sched->n_vocab();
  for (const auto& [t, b] : gp.sampling.logit_bias)
    if (t >= n_logits) throw bad_request(fmt::format("'logit_bias' names token {}; the vocabulary has {} (0..{})", t, n_logits, n_logits - 1), "logit_bias", "invalid_value");
  gp.max_tokens = common.max_tokens;
  gp.stop = common.stop;
  gp.ignore_eos = common.ignore_eos;
  gp.n_probs = common.n_probs;
  gp.draft_max = common.draft_max;
  gp.draft_min = common.draft_min;
  for (const auto& p : prompts) run->prompt_tokens += static_cast<int>(p.size());
  run->tok = ctx.tok;
  if (prompts.size() * static_cast<size_t>(common.n) > 1) run->signal_ = std::make_shared<EventSignal>();
  for (auto& prompt : prompts) {  // choice index: prompt index x n + the prompt's choice (OpenAI's order)
    gp.prompt = std::move(prompt);
    for (int i = 0; i < common.n; ++i) {
      GenParams g = gp;
      g.sampling.seed = choice_seed(gp.sampling.seed, i);
      g.signal = run->signal_;
      run->reqs_.push_back(std::make_shared<GenRequest>(std::move(g)));
      if (!run->echo.empty() && common.n_probs >= 0) run->reqs_.back()->prompt_probs = common.n_probs;
    }
  }
  const size_t n = run->reqs_.size();
  run->rs_.assign(n, ReasoningSplitter(chat && jb.reasoning, jb.start_in_think));
  for (size_t i = 0; i < n && jb.tools; ++i) run->parsers_.push_back(toolcall::StreamParser::make(jb.format, jb.parser));
  run->called_.assign(n, 0);
  run->probs_.resize(n);
  run->prompt_probs_.resize(n);
  run->finals_.resize(n);
  if (!ctx.sched->submit(run->reqs_))
    throw ApiError(503, "the server is busy: every slot is taken and the wait queue is full; retry later", "server_error", "", "queue_full");
  return run;
}

int count_prompt_tokens(const CoreContext& ctx, const Json& chat_body) {
  Job jb;
  GenParams gp;
  prepare_chat(ctx, chat_body, jb, gp, "call_");
  return static_cast<int>(gp.prompt.size());
}

// Text of choice i through its tool-call parser (or the <think> splitter); `last`: flush.
bool CoreRun::feed(int i, const std::string& text, bool last, bool cut, const std::function<bool(const CoreEvent&)>& on) {
  using K = CoreEvent::Kind;
  if (!job.tools) {
    const ReasoningSplitter::Out o = last ? rs_[i].flush() : rs_[i].push(text);
    if (!o.reasoning.empty() && !on(CoreEvent{K::Reasoning, i, 0, {}, {}, o.reasoning})) return false;
    return o.content.empty() || on(CoreEvent{K::Text, i, 0, {}, {}, o.content});
  }
  scratch_.clear();
  if (last && cut) parsers_[i]->finish_cut(scratch_);
  else if (last) parsers_[i]->finish(scratch_);
  else parsers_[i]->feed(text, scratch_);
  for (const auto& e : scratch_) {
    using E = toolcall::Event::Kind;
    if (e.kind != E::CallStart && e.kind != E::CallEnd && e.text.empty()) continue;
    K k = e.kind == E::Content ? K::Text : e.kind == E::Reasoning ? K::Reasoning : e.kind == E::CallStart ? K::CallStart : e.kind == E::CallArgs ? K::CallArgs : K::CallEnd;
    if (k == K::CallStart) called_[i] = 1;
    CoreEvent ce{k, i, e.index, e.id, e.name, e.text};
    ce.cut = e.cut;
    if (!on(ce)) return false;
  }
  return true;
}

bool CoreRun::pump(int ms, const std::function<bool(const CoreEvent&)>& on) {
  std::vector<std::pair<int, std::vector<GenEvent>>> got;
  if (reqs_.size() == 1) {
    auto ev = reqs_[0]->wait(ms);
    if (!ev.empty()) got.emplace_back(0, std::move(ev));
  } else {
    for (int pass = 0; pass < 2 && got.empty(); ++pass) {
      const uint64_t seen = signal_->count();
      for (size_t i = 0; i < reqs_.size(); ++i) {
        auto ev = reqs_[i]->wait(0);
        if (!ev.empty()) got.emplace_back(static_cast<int>(i), std::move(ev));
      }
      if (got.empty() && pass == 0) signal_->wait(seen, ms);
    }
  }
  for (auto& [i, evs] : got) {
    for (auto& ev : evs) {
      for (auto& p : ev.probs) probs_[i].push_back(std::move(p));
      if (!ev.prompt_probs.empty()) prompt_probs_[i] = std::move(ev.prompt_probs);
      if (!ev.text.empty() && !feed(i, ev.text, false, false, on)) return false;
      if (!ev.final) continue;
      finals_[i] = ev;
      n_done_++;
      if (ev.finish != Finish::Error && !feed(i, "", true, ev.finish == Finish::Length, on)) return false;
      CoreEvent f;
      f.kind = CoreEvent::Kind::Finish;
      f.choice = i;
      f.final = &finals_[i];
      f.called = called_[i] != 0;
      if (!on(f)) return false;
    }
  }
  return true;
}

std::vector<TokenLogprobs> CoreRun::take_probs(int i) {
  std::vector<TokenLogprobs> out;
  out.swap(probs_[i]);
  return out;
}

void CoreRun::cancel() {
  for (auto& r : reqs_)
    if (!r->done()) r->cancel();
}

std::optional<std::vector<ChoiceResult>> collect(CoreRun& run, const std::function<bool()>& gone) {
  std::vector<ChoiceResult> out(static_cast<size_t>(run.n()));
  using K = CoreEvent::Kind;
  auto on = [&](const CoreEvent& e) {
    ChoiceResult& r = out[static_cast<size_t>(e.choice)];
    switch (e.kind) {
      case K::Reasoning: r.parsed.reasoning += e.text; break;
      case K::Text: r.parsed.content += e.text; break;
      case K::CallStart: r.parsed.calls.push_back(toolcall::ToolCall{e.id, e.name, ""}); break;
      case K::CallArgs:
        if (e.call >= 0 && e.call < static_cast<int>(r.parsed.calls.size())) r.parsed.calls[static_cast<size_t>(e.call)].arguments += e.text;
        break;
      case K::CallEnd:
        if (e.call >= 0 && e.call < static_cast<int>(r.parsed.calls.size())) r.parsed.calls[static_cast<size_t>(e.call)].cut = e.cut;
        break;
      case K::Finish:
        r.final = *e.final;
        r.probs = run.take_probs(e.choice);
        break;
    }
    return true;
  };
  while (!run.finished()) {
    run.pump(100, on);
    if (!run.finished() && gone()) {
      run.cancel();  // the slots free at the next engine step; nobody reads this answer
      return std::nullopt;
    }
  }
  for (const auto& r : out)
    if (r.final.finish == Finish::Error) {
      if (r.final.bad_request) throw ApiError(400, fmt::format("the request's grammar cannot be followed: {}", r.final.error), "invalid_request_error", "grammar", "invalid_grammar");
      throw ApiError(500, r.final.error, "server_error");
    }
  return out;
}

}  // namespace strata::server
