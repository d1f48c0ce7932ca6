// Grammar mask cost on a real vocabulary: µs (thread CPU time, and wall) per Matcher::apply while a text is fed token by token
// (the tokens of the text as the model's tokenizer splits it), for json_object, a JSON schema with
// nested object/array/enum, forced tool calls (Hermes and Qwen3-Coder syntax, two calls), and GBNFs
// with a long literal and free text. Prints figures; not a timed test. bench/grammar-vs-decode.sh
// runs it next to the demo model's decode step.
//
//   bench_grammar [VOCAB.gguf]   (default: ../shared/fixtures/tokenizer-qwen3/vocab.gguf)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "chat/toolcall/toolcall.h"
#include "gguf/gguf_file.h"
#include "grammar/grammar.h"
#include "grammar/vocab_trie.h"
#include "tokenizer/tokenizer.h"

namespace g = strata::grammar;
using Clock = std::chrono::steady_clock;

namespace {

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

// CPU time of this thread (µs): unlike wall time, not inflated when other processes share the cores.
double thread_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

void run(const char* name, const std::string& gbnf, const std::string& text, const strata::tok::Tokenizer& tok,
         const std::shared_ptr<const g::VocabIndex>& vocab) {
  const auto t_parse = Clock::now();
  const auto grammar = g::parse_gbnf(gbnf);
  const double parse_us = us_since(t_parse);
  const std::vector<int32_t> ids = tok.encode(text, false, false);
  std::vector<float> logits(static_cast<size_t>(vocab->n_vocab()));
  for (int pass = 0; pass < 2; ++pass) {  // pass 0: fresh matcher (cold caches), pass 1: a second request
    g::Matcher m(grammar, vocab);
    std::vector<double> us;
    double wall = 0;
    size_t allowed_max = 0;
    for (int32_t id : ids) {
      std::fill(logits.begin(), logits.end(), 0.0f);
      const auto t0 = Clock::now();
      const double c0 = thread_us();
      m.apply(logits.data());
      us.push_back(thread_us() - c0);
      if (getenv("BENCH_GRAMMAR_SLOW") && us.back() > 2000) fmt::print("  slow mask {:.0f} us before token '{}'\n", us.back(), tok.token_to_piece(id, false));
      wall += us_since(t0);
      allowed_max = std::max<size_t>(allowed_max, static_cast<size_t>(std::count(logits.begin(), logits.end(), 0.0f)));
      if (!m.accept(id)) {
        fmt::print("{}: token {} of the text was not allowed\n", name, id);
        return;
      }
    }
    std::vector<double> sorted = us;
    std::sort(sorted.begin(), sorted.end());
    const double mean = std::accumulate(us.begin(), us.end(), 0.0) / static_cast<double>(us.size());
    const auto pct = [&](size_t p) { return sorted[std::min(sorted.size() - 1, sorted.size() * p / 100)]; };
    fmt::print("{:<34} {:>4} masks, CPU us: mean {:6.1f} p50 {:6.1f} p90 {:6.1f} p99 {:6.1f} max {:6.1f} | wall mean {:6.1f} | most allowed {}, parse {:.0f} us{}\n",
               name, us.size(), mean, pct(50), pct(90), pct(99), sorted.back(), wall / static_cast<double>(us.size()), allowed_max,
               parse_us, pass ? " [same grammar, next request]" : " [first request]");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "../shared/fixtures/tokenizer-qwen3/vocab.gguf";
  auto model = strata::GgufModel::open(path);
  auto tok = strata::tok::Tokenizer::from_gguf(*model);
  const auto t0 = Clock::now();
  std::vector<std::string> bytes;
  std::vector<int32_t> eog;
  for (int32_t id = 0; id < tok->n_vocab(); ++id) {
    bytes.push_back(tok->is_control(id) ? std::string() : tok->token_to_piece(id, false));
    if (tok->is_eog(id)) eog.push_back(id);
  }
  const auto vocab = std::make_shared<const g::VocabIndex>(std::move(bytes), std::move(eog));
  fmt::print("vocabulary {}: {} tokens, trie of {} nodes, VocabIndex built in {:.1f} ms\n", path, vocab->n_vocab(),
             vocab->trie().nodes.size() - 1, us_since(t0) / 1000);

  const std::string obj_text =
      R"({"title": "Grammar-constrained decoding", "authors": ["Ada Lovelace", "Alan Turing"], "year": 2024, "score": -12.5e3,
  "abstract": "A long free-text field: most tokens of the vocabulary are allowed inside a JSON string, so this is the costly case.", "ok": true})";
  run("json_object", g::json_object_gbnf(), obj_text, *tok, vocab);

  const nlohmann::json schema = nlohmann::json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "kind": {"enum": ["person", "organization", "place"]},
      "address": {"type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": "integer"}}, "required": ["street"]},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 8},
      "scores": {"type": "array", "items": {"type": "number"}}
    },
    "required": ["name", "kind", "address", "tags"]})");
  const std::string schema_text =
      R"({"name": "Ada Lovelace", "kind": "person", "address": {"street": "12 St James's Square", "zip": 10001}, "tags": ["math", "poetry"], "scores": [1.5, 2, 3.25]})";
  run("json_schema (nested object/array/enum)", g::json_schema_to_gbnf(schema), schema_text, *tok, vocab);

  const std::vector<strata::toolcall::ToolSpec> tools = {
      {"get_weather", "Weather of a city", nlohmann::json::parse(R"({"type":"object","properties":{"city":{"type":"string"},
          "days":{"type":"integer"},"unit":{"enum":["celsius","fahrenheit"]}},"required":["city"]})")},
      {"plan", "Nested arguments", nlohmann::json::parse(R"({"type":"object","properties":{"steps":{"type":"array","items":{
          "type":"object","properties":{"what":{"type":"string"},"n":{"type":"number"}},"required":["what"]}},
          "note":{"type":"string"}},"required":["steps","note"]})")}};
  for (auto [f, text] : {std::pair{strata::toolcall::Format::Hermes,
                                   std::string(R"(<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris, France", "days": 3, "unit": "celsius"}}
</tool_call>
<tool_call>
{"name": "plan", "arguments": {"steps": [{"what": "pack a warm coat and an umbrella", "n": 1}, {"what": "take the train"}], "note": "It may rain all week."}}
</tool_call>)")}}) {
    std::string rules;
    int k = 0;
    const auto cg = strata::toolcall::call_grammar(f, tools, /*parallel=*/true, "", [&](const nlohmann::json& sch) {
      const std::string rule = "args-" + std::to_string(k++);
      rules += g::json_schema_rules(sch, rule) + "\n";
      return rule;
    });
    run(fmt::format("tool calls ({}, 2)", strata::toolcall::format_name(f)).c_str(), cg.gbnf + "\n" + rules, text, *tok, vocab);
  }

  std::string literal;
  for (int i = 0; i < 20; ++i) literal += "The quick brown fox jumps over the lazy dog. ";
  run("gbnf long literal (900 chars)", "root ::= \"" + literal + "\" [0-9]+", literal + "42", *tok, vocab);
  run("gbnf free text [^\\n]*", "root ::= [^\\n]* \"\\n\"", literal + "\n", *tok, vocab);
  return 0;
}
