#pragma once
// An in-process strata server on an ephemeral port over the qwen3moe fixture, and SSE parsing.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "../fixture_sets.h"
#include "runtime/engine.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"

namespace strata::test {

inline std::string server_fixture(const char* set = "qwen3moe-q8_0") { return std::string(STRATA_FIXTURES_DIR) + "/" + set + "/model.gguf"; }
inline bool have_server_fixture() { return std::filesystem::exists(server_fixture()); }

#define SKIP_WITHOUT_SERVER_FIXTURE() \
  if (!::strata::test::have_server_fixture()) STRATA_MISSING_FIXTURE(::strata::test::server_fixture() + " (server tests)")

inline std::unique_ptr<Engine> load_fixture_engine(int n_seq, int n_ctx, std::unique_ptr<tok::Tokenizer>* tok,
                                                   const char* set = "qwen3moe-q8_0", const TierOptions& tier = {}) {
  auto model = Model::load(server_fixture(set));
  if (tok) *tok = tok::Tokenizer::from_gguf(model->gguf());
  EngineOptions eo;
  eo.n_ctx = n_ctx;
  eo.n_seq = n_seq;
  eo.n_threads = 1;
  eo.tier = tier;  // cache_experts > 0: experts stream through a cache of that many
  return std::make_unique<Engine>(std::move(model), eo);
}

struct TestServer {
  std::unique_ptr<tok::Tokenizer> tok;
  std::unique_ptr<Engine> eng;
  std::unique_ptr<server::HttpServer> srv;  // destroyed first
  int port = 0;

  TestServer(server::ServerOptions so, int n_seq, int n_ctx, const TierOptions& tier = {}) {
    eng = load_fixture_engine(n_seq, n_ctx, &tok, "qwen3moe-q8_0", tier);
    so.host = "127.0.0.1";
    so.port = 0;
    srv = std::make_unique<server::HttpServer>(so);
    port = srv->bind();
    srv->start();
    srv->attach(*eng, *tok, server_fixture());
  }
  ~TestServer() { srv->stop(); }

  std::unique_ptr<httplib::Client> client(int read_timeout_s = 60) const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
    c->set_read_timeout(read_timeout_s, 0);
    c->set_connection_timeout(5, 0);
    return c;
  }
};

struct Sse {
  std::vector<nlohmann::json> chunks;  // every data payload but [DONE]
  bool done = false;                   // ended with data: [DONE]
  bool well_framed = true;             // every event is exactly "data: ...\n\n", [DONE] last
};

inline Sse parse_sse(const std::string& body) {
  Sse s;
  size_t p = 0;
  while (p < body.size()) {
    const size_t e = body.find("\n\n", p);
    if (e == std::string::npos || s.done) {
      s.well_framed = false;
      break;
    }
    const std::string ev = body.substr(p, e - p);
    p = e + 2;
    if (ev.rfind("data: ", 0) != 0 || ev.find('\n') != std::string::npos) {
      s.well_framed = false;
      continue;
    }
    const std::string payload = ev.substr(6);
    if (payload == "[DONE]") {
      s.done = true;
      continue;
    }
    s.chunks.push_back(nlohmann::json::parse(payload));
  }
  return s;
}

// Content of a chat stream (delta.content concatenated) and its finish_reason.
inline std::string sse_text(const Sse& s, bool chat, std::string* finish = nullptr) {
  std::string t;
  for (const auto& c : s.chunks) {
    if (!c.contains("choices") || c["choices"].empty()) continue;
    const auto& ch = c["choices"][0];
    if (chat && ch["delta"].contains("content")) t += ch["delta"]["content"].get<std::string>();
    if (!chat) t += ch["text"].get<std::string>();
    if (finish && !ch["finish_reason"].is_null()) *finish = ch["finish_reason"].get<std::string>();
  }
  return t;
}

// A streamed chat completion at temperature 0 with per-token logprobs and usage (the speculation
// tests compare such streams with and without drafts).
struct GreedyStream {
  std::string text, finish;
  std::vector<std::string> tokens;  // from the logprobs, one per generated token
  std::vector<double> logprobs;
  long completion_tokens = -1;
  bool whole = false;
};

inline GreedyStream greedy_stream(httplib::Client& client, nlohmann::json req) {
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  req["temperature"] = 0;
  req["logprobs"] = true;
  GreedyStream out;
  auto r = client.Post("/v1/chat/completions", req.dump(), "application/json");
  if (!r || r->status != 200) {
    out.text = r ? "<status " + std::to_string(r->status) + ": " + r->body + ">" : "<no response>";
    return out;
  }
  const Sse s = parse_sse(r->body);
  out.whole = s.done && s.well_framed;
  out.text = sse_text(s, /*chat=*/true, &out.finish);
  for (const auto& c : s.chunks) {
    if (c.contains("usage") && c["usage"].is_object()) out.completion_tokens = c["usage"]["completion_tokens"].get<long>();
    if (!c.contains("choices") || c["choices"].empty()) continue;
    const nlohmann::json& lp = c["choices"][0]["logprobs"];
    if (!lp.is_object() || !lp["content"].is_array()) continue;
    for (const auto& t : lp["content"]) {
      out.tokens.push_back(t["token"].get<std::string>());
      out.logprobs.push_back(t["logprob"].get<double>());
    }
  }
  return out;
}

inline nlohmann::json user_chat(const std::string& user, int max_tokens) {
  return nlohmann::json{{"messages", nlohmann::json::array({nlohmann::json{{"role", "user"}, {"content", user}}})}, {"max_tokens", max_tokens}};
}


// A test suite sharing one in-process server (TestServer: NSeq slots x NCtx, queue 16), made
// before its first test and dropped after its last; a missing fixture skips (or fails, in CI).
template <int NSeq, int NCtx>
class SharedServerSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_server_fixture()) return;
    server::ServerOptions so;
    so.max_queue = 16;
    ts_ = new TestServer(so, NSeq, NCtx);
  }
  static void TearDownTestSuite() {
    delete ts_;
    ts_ = nullptr;
  }
  void SetUp() override { SKIP_WITHOUT_SERVER_FIXTURE(); }
  static httplib::Result post(const std::string& path, const nlohmann::json& body, const httplib::Headers& h = {}) {
    return ts_->client()->Post(path.c_str(), h, body.dump(), "application/json");
  }
  static inline TestServer* ts_ = nullptr;
};

}  // namespace strata::test
