// Constrained output through the scheduler on a random-weight fixture, with a logits edit standing
// in for a model that prefers a token: the model may open <think> before the grammar (which then
// starts after </think>), and a forced parallel tool-call grammar gives several calls that parse.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chat/toolcall/toolcall.h"
#include "grammar/grammar.h"
#include "server/scheduler.h"
#include "server_util.h"

namespace strata::test {
namespace {

std::shared_ptr<const grammar::VocabIndex> vocab_of(const Engine& eng, const tok::Tokenizer& tok) {
  std::vector<std::string> bytes(static_cast<size_t>(eng.config().n_vocab));
  std::vector<int32_t> eog;
  for (int32_t t = 0; t < std::min(eng.config().n_vocab, tok.n_vocab()); ++t) {
    bytes[static_cast<size_t>(t)] = tok.token_to_piece(t, false);
    if (tok.is_eog(t)) eog.push_back(t);
  }
  return std::make_shared<grammar::VocabIndex>(std::move(bytes), std::move(eog));
}

struct Result {
  std::string text;
  server::Finish finish;
};

Result generate(server::Scheduler& sched, server::GenParams p) {
  auto r = std::make_shared<server::GenRequest>(std::move(p));
  EXPECT_TRUE(sched.submit(r));
  Result res;
  for (;;)
    for (auto& e : r->wait(60000)) {
      res.text += e.text;
      if (e.final) {
        res.finish = e.finish;
        return res;
      }
    }
}

const char* kUnitGrammarSchema = R"({"type":"object","properties":{"unit":{"enum":["c","f"]}},"required":["unit"]})";

}  // namespace

TEST(SchedulerGrammar, ModelMayThinkBeforeTheGrammar) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  std::unique_ptr<tok::Tokenizer> tok;
  auto eng = load_fixture_engine(1, 256, &tok);
  const std::vector<int32_t> open = tok->encode("<think>", false, true);
  ASSERT_FALSE(open.empty());
  server::SchedulerOptions so;
  so.vocab = vocab_of(*eng, *tok);
  server::Scheduler sched(*eng, *tok, so);
  const auto g = grammar::parse_gbnf(grammar::json_schema_to_gbnf(nlohmann::json::parse(kUnitGrammarSchema)));
  for (bool allow : {true, false}) {
    SCOPED_TRACE(allow ? "think_open set" : "no think_open");
    server::GenParams p;
    p.prompt = tok->encode("Which unit?", true, true);
    p.sampling.temp = 0;
    p.max_tokens = 64;
    p.grammar = g;
    p.reasoning_budget = 3;
    p.think_close = tok->encode("</think>\n\n", false, true);
    if (allow) p.think_open = open;
    auto first = std::make_shared<bool>(true);
    p.edit_logits = [first, t = open[0]](float* l, int) {  // a model that wants to think first
      if (*first) l[t] += 1000.0f;
      *first = false;
    };
    const Result r = generate(sched, std::move(p));
    ASSERT_EQ(r.finish, server::Finish::Stop) << r.text;
    std::string json_text = r.text;
    if (allow) {
      ASSERT_EQ(r.text.rfind("<think>", 0), 0u) << r.text;
      const size_t close = r.text.find("</think>\n\n");
      ASSERT_NE(close, std::string::npos) << r.text;  // the budget of 3 closed it
      json_text = r.text.substr(close + 10);
    }
    const auto v = nlohmann::json::parse(json_text, nullptr, false);
    ASSERT_TRUE(v.is_object()) << r.text;
    EXPECT_TRUE(v["unit"] == "c" || v["unit"] == "f") << r.text;
  }
}

TEST(SchedulerGrammar, ParallelToolCallGrammarGivesSeveralCalls) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  std::unique_ptr<tok::Tokenizer> tok;
  auto eng = load_fixture_engine(1, 512, &tok);
  server::SchedulerOptions so;
  so.vocab = vocab_of(*eng, *tok);
  server::Scheduler sched(*eng, *tok, so);
  const std::vector<toolcall::ToolSpec> tools = {{"set_unit", "", nlohmann::json::parse(kUnitGrammarSchema)}};
  std::string rules;
  const auto cg = toolcall::call_grammar(toolcall::Format::Hermes, tools, /*parallel=*/true, "", [&](const nlohmann::json& s) {
    rules += grammar::json_schema_rules(s, "args") + "\n";
    return std::string("args");
  });
  server::GenParams p;
  p.prompt = tok->encode("Set the units.", true, true);
  p.sampling.temp = 0;
  p.max_tokens = 200;
  p.grammar = grammar::parse_gbnf(cg.gbnf + "\n" + rules);
  std::vector<int32_t> eog;
  for (int32_t t = 0; t < tok->n_vocab(); ++t)
    if (tok->is_eog(t)) eog.push_back(t);
  // A model that would rather go on than stop, and likes to open a call (the grammar allows the
  // call's first token only where a call may start).
  const int32_t call_open = tok->encode("<tool_call>", false, true).at(0);
  p.edit_logits = [eog, call_open](float* l, int) {
    for (int32_t t : eog) l[t] = -1e30f;
    l[call_open] += 100.0f;
  };
  const Result r = generate(sched, std::move(p));
  EXPECT_EQ(r.finish, server::Finish::Length) << r.text;
  // The calls completed within max_tokens (the last one may be cut).
  const size_t end = r.text.rfind("</tool_call>");
  ASSERT_NE(end, std::string::npos) << r.text;
  const std::string out = r.text.substr(0, end + 12);
  toolcall::ParserOptions opt;
  opt.tools = tools;
  const toolcall::Parsed whole = toolcall::parse_all(toolcall::Format::Hermes, opt, out);
  ASSERT_GE(whole.calls.size(), 2u) << out;
  for (const auto& c : whole.calls) {
    EXPECT_EQ(c.name, "set_unit");
    const auto args = nlohmann::json::parse(c.arguments, nullptr, false);
    EXPECT_TRUE(args.is_object() && (args["unit"] == "c" || args["unit"] == "f")) << c.arguments;
  }
  // Streamed in small pieces, the parser gives the same calls.
  auto sp = toolcall::StreamParser::make(toolcall::Format::Hermes, opt);
  std::vector<toolcall::Event> events;
  for (size_t i = 0; i < out.size(); i += 3) sp->feed(std::string_view(out).substr(i, 3), events);
  sp->finish(events);
  const toolcall::Parsed streamed = toolcall::fold(events);
  ASSERT_EQ(streamed.calls.size(), whole.calls.size());
  for (size_t i = 0; i < whole.calls.size(); ++i) EXPECT_EQ(streamed.calls[i].arguments, whole.calls[i].arguments);
}

}  // namespace strata::test
