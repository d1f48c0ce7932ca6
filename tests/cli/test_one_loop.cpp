// One generation loop (runtime/generator.h) behind every caller: for the same request `strata run`,
// `strata chat` and the server give the same greedy text and stop the same way (max tokens, a stop
// string); a model without a chat template is chatted with in ChatML by `strata chat` and the
// server alike (one rule).
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../fixture_sets.h"
#include "../server/serve_process.h"
#include "cli_util.h"

namespace strata::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kPrompt = "And God said unto Moses, Go";

std::string tiny_model() { return (fs::path(STRATA_SOURCE_DIR).parent_path() / "models" / "strata-moe-tiny" / "model.gguf").string(); }

json post(int port, const std::string& path, const json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  auto r = c.Post(path, body.dump(), "application/json");
  if (!r) return json{{"error", "no response"}};
  EXPECT_EQ(r->status, 200) << path << ": " << r->body;
  return json::parse(r->body, nullptr, false);
}

// A word of `text` from its second half (letters only, 3 or more), as a stop string whose first
// occurrence is inside the text; "" if there is none.
std::string stop_word(const std::string& text) {
  std::istringstream in(text.substr(text.size() / 2));
  for (std::string w; in >> w;) {
    bool letters = w.size() >= 3;
    for (char c : w) letters = letters && std::isalpha(static_cast<unsigned char>(c));
    if (letters && text.find(w) > 0) return w;
  }
  return "";
}

// `strata chat` with `line` on stdin: the reply (stdout) and stderr.
CmdResult chat_once(const std::string& model, const std::string& line, int n) {
  const std::string in = "/tmp/strata_one_loop_in_" + std::to_string(::getpid());
  std::ofstream(in) << line << "\n";
  CmdResult r = run_cmd("chat -m " + model + " -n " + std::to_string(n) + " --temp 0 -c 256 -t 2 < " + in);
  std::remove(in.c_str());
  return r;
}

TEST(OneLoop, RunAndServerGiveTheSameTextAndStopTheSameWay) {
  const std::string model = tiny_model();
  if (!fs::exists(model)) STRATA_MISSING_FIXTURE(model + " (the trained tiny model, committed with the repository)");
  const std::string base = "run -m " + model + " -p '" + kPrompt + "' -n 24 --temp 0 -c 256 -t 2 --json";
  const CmdResult run = run_cmd(base);
  ASSERT_EQ(run.code, 0) << run.err;
  const json rj = json::parse(last_line(run.out));
  const std::string text = rj["text"];
  ASSERT_EQ(rj["tokens"].size(), 24u) << "the tiny model should not end its text within 24 tokens here: " << text;

  ServeProcess s("one_loop", {"-m", model, "--port", "0", "--parallel", "1", "-c", "256", "-t", "2"});
  ASSERT_TRUE(s.started() && s.ready()) << s.log();
  const json plain = post(s.port(), "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}});
  EXPECT_EQ(plain["choices"][0]["text"], text);
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "length");

  const std::string stop = stop_word(text);
  ASSERT_FALSE(stop.empty()) << text;
  const std::string before = text.substr(0, text.find(stop));
  const CmdResult cut = run_cmd(base + " --stop '" + stop + "'");
  ASSERT_EQ(cut.code, 0) << cut.err;
  EXPECT_EQ(json::parse(last_line(cut.out))["text"], before) << "stop '" << stop << "'";
  const json stopped = post(s.port(), "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}, {"stop", {stop}}});
  EXPECT_EQ(stopped["choices"][0]["text"], before);
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");

  // The chat REPL and /v1/chat/completions: the same reply to the same message.
  const CmdResult chat = chat_once(model, "Who made the heaven?", 12);
  ASSERT_EQ(chat.code, 0) << chat.err;
  const json reply = post(s.port(), "/v1/chat/completions",
                          {{"messages", {{{"role", "user"}, {"content", "Who made the heaven?"}}}}, {"max_tokens", 12}, {"temperature", 0}});
  EXPECT_EQ(reply["choices"][0]["message"]["content"], chat.out);
}

// A JSON Schema through `strata run --json-schema` and through the server's response_format: the
// same constrained text, which is JSON of that schema.
TEST(OneLoop, RunAndServerFollowTheSameJsonSchema) {
  const std::string model = tiny_model();
  if (!fs::exists(model)) STRATA_MISSING_FIXTURE(model + " (the trained tiny model, committed with the repository)");
  const json schema = {{"type", "object"}, {"properties", {{"answer", {{"enum", {"yes", "no"}}}}}}, {"required", {"answer"}}};
  const CmdResult run = run_cmd("run -m " + model + " -p '" + kPrompt + "' -n 48 --temp 0 -c 256 -t 2 --json --json-schema '" + schema.dump() + "'");
  ASSERT_EQ(run.code, 0) << run.err;
  const std::string text = json::parse(last_line(run.out))["text"];
  const json parsed = json::parse(text, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << text;
  EXPECT_TRUE(parsed["answer"] == "yes" || parsed["answer"] == "no") << text;
  ServeProcess s("one_loop_schema", {"-m", model, "--port", "0", "--parallel", "1", "-c", "256", "-t", "2"});
  ASSERT_TRUE(s.started() && s.ready()) << s.log();
  const json r = post(s.port(), "/v1/completions",
                      {{"prompt", kPrompt},
                       {"max_tokens", 48},
                       {"temperature", 0},
                       {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "a"}, {"schema", schema}}}}}});
  EXPECT_EQ(r["choices"][0]["text"], text);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  const CmdResult bad = run_cmd("run -m " + model + " -p hi -n 4 --json-schema '{\"type\": 7}'");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("error"), std::string::npos) << bad.err;
}

// A model without tokenizer.chat_template: `strata chat` says it uses ChatML, the server reports
// chatml-fallback, and both give the same reply.
TEST(OneLoop, AModelWithoutATemplateIsChatMlInChatAndServer) {
  const std::string model = "/tmp/strata_one_loop_notmpl_" + std::to_string(::getpid()) + ".gguf";
  const CmdResult w = run_cmd("synth --preset tiny --layers 2 --experts 8 --seed 3 --no-chat-template --out " + model);
  ASSERT_EQ(w.code, 0) << w.err;
  const CmdResult meta = run_cmd("inspect " + model + " --metadata");
  ASSERT_EQ(meta.out.find("tokenizer.chat_template"), std::string::npos) << "the synthetic model should carry no template";
  const CmdResult chat = chat_once(model, "hello", 8);
  EXPECT_EQ(chat.code, 0) << chat.err;
  EXPECT_NE(chat.err.find("no chat template: ChatML"), std::string::npos) << chat.err;
  {
    ServeProcess s("one_loop_chatml", {"-m", model, "--port", "0", "--parallel", "1", "-c", "256", "-t", "2"});
    ASSERT_TRUE(s.started() && s.ready()) << s.log();
    httplib::Client c("127.0.0.1", s.port());
    auto props = c.Get("/props");
    ASSERT_TRUE(props);
    EXPECT_NE(props->body.find("chatml-fallback"), std::string::npos) << props->body;
    const json reply = post(s.port(), "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hello"}}}}, {"max_tokens", 8}, {"temperature", 0}});
    // Random weights write bytes that are not UTF-8: the server sends U+FFFD for each, the REPL the bytes.
    const auto wire = [](const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); };
    EXPECT_EQ(wire(reply["choices"][0]["message"]["content"]), wire(chat.out));
  }
  std::remove(model.c_str());
}

}  // namespace
}  // namespace strata::test
