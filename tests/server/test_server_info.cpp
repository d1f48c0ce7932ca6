// llama-server's conveniences (/props, /slots, /tokenize, /detokenize), the expert tier's live
// figures (/stats, /stats/stream) and the embedded web page, on the qwen3moe fixture.
#include <atomic>
#include <numeric>
#include <thread>

#include "../wait_until.h"
#include "server/webui.h"
#include "server_util.h"

namespace strata::test {
namespace {

using nlohmann::json;
constexpr int kInfoCtx = 256;

json info_chat(const std::string& user, int max_tokens, bool stream = false) {
  return json{{"messages", json::array({json{{"role", "user"}, {"content", user}}})},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"ignore_eos", true},
              {"stream", stream}};
}

json get_json(const TestServer& ts, const char* path, int want = 200) {
  auto r = ts.client()->Get(path);
  EXPECT_TRUE(r) << path;
  if (!r) return {};
  EXPECT_EQ(r->status, want) << path << ": " << r->body;
  return json::parse(r->body);
}

json post_json(const TestServer& ts, const char* path, const std::string& body, int want = 200) {
  auto r = ts.client()->Post(path, body, "application/json");
  EXPECT_TRUE(r) << path;
  if (!r) return {};
  EXPECT_EQ(r->status, want) << path << " " << body << ": " << r->body;
  return json::parse(r->body);
}

// The OpenAI error object with a 400 and the field named.
void info_expect_400(const TestServer& ts, const char* path, const std::string& body, const char* param) {
  const json j = post_json(ts, path, body, 400);
  ASSERT_TRUE(j.contains("error")) << body;
  EXPECT_TRUE(j["error"]["message"].is_string()) << body;
  EXPECT_EQ(j["error"]["type"], "invalid_request_error") << body;
  if (param) {
    EXPECT_EQ(j["error"]["param"], param) << body;
  }
}

TEST(ServerInfo, PropsDescribeTheServedModel) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  server::ServerOptions so;
  so.alias = "my-alias";
  so.sampling.temp = 0.25f;
  TestServer ts(so, /*n_seq=*/3, kInfoCtx);
  const json p = get_json(ts, "/props");
  EXPECT_EQ(p["default_generation_settings"]["n_ctx"], kInfoCtx);
  EXPECT_FLOAT_EQ(p["default_generation_settings"]["params"]["temperature"].get<float>(), 0.25f);
  EXPECT_EQ(p["total_slots"], 3);
  EXPECT_EQ(p["model_alias"], "my-alias");
  EXPECT_EQ(p["model_path"], server_fixture());
  EXPECT_EQ(p["model"]["n_vocab"], ts.eng->config().n_vocab);
  EXPECT_EQ(p["model"]["n_layer"], ts.eng->config().n_layer);
  EXPECT_EQ(p["model"]["architecture"], "qwen3moe");
  EXPECT_GT(p["model"]["n_expert"].get<int>(), 1);
  EXPECT_EQ(p["chat_format"], "gguf-template");
  EXPECT_NE(p["chat_template"].get<std::string>().find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(p["expert_tier"]["mode"], "resident");
  EXPECT_NE(p["build_info"].get<std::string>().find("strata"), std::string::npos);
  EXPECT_EQ(p["webui"], true);
}

TEST(ServerInfo, TokenizeDetokenizeRoundTrip) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  TestServer ts(server::ServerOptions{}, /*n_seq=*/1, kInfoCtx);
  const std::string text = "Hello, w\xc3\xb6rld! \xe2\x82\xac 42 <|im_start|>user\nsp  aces\t\xf0\x9f\x8c\x8d";
  const json t = post_json(ts, "/tokenize", json{{"content", text}}.dump());
  const std::vector<int32_t> want = ts.tok->encode(text, /*add_special=*/false, /*parse_special=*/true);
  ASSERT_EQ(t["tokens"].get<std::vector<int32_t>>(), want);
  EXPECT_GT(want.size(), 10u);
  // <|im_start|> is one special token (parse_special defaults to true), several without it.
  const json raw = post_json(ts, "/tokenize", json{{"content", "<|im_start|>"}, {"parse_special", false}}.dump());
  EXPECT_GT(raw["tokens"].size(), 1u);
  EXPECT_EQ(post_json(ts, "/tokenize", json{{"content", "<|im_start|>"}}.dump())["tokens"].size(), 1u);
  const json d = post_json(ts, "/detokenize", json{{"tokens", t["tokens"]}}.dump());
  EXPECT_EQ(d["content"], text);
  // Pieces: ids as above; the pieces (strings, or byte arrays for partial characters) concatenate to the text.
  const json wp = post_json(ts, "/tokenize", json{{"content", text}, {"with_pieces", true}}.dump());
  ASSERT_EQ(wp["tokens"].size(), want.size());
  std::string joined;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(wp["tokens"][i]["id"], want[i]);
    const json& piece = wp["tokens"][i]["piece"];
    if (piece.is_string()) {
      joined += piece.get<std::string>();
    } else {
      for (int b : piece) joined += static_cast<char>(b);
    }
  }
  EXPECT_EQ(joined, text);
  const json ws = post_json(ts, "/tokenize", json{{"content", "hi"}, {"add_special", true}}.dump());
  EXPECT_EQ(ws["tokens"].get<std::vector<int32_t>>(), ts.tok->encode("hi", true, true));
}

TEST(ServerInfo, MalformedBodiesAre400AndTheServerStaysUp) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  TestServer ts(server::ServerOptions{}, /*n_seq=*/1, kInfoCtx);
  const int n_vocab = ts.tok->n_vocab();
  info_expect_400(ts, "/tokenize", "{", nullptr);
  info_expect_400(ts, "/tokenize", "[1, 2]", nullptr);
  info_expect_400(ts, "/tokenize", "{}", "content");
  info_expect_400(ts, "/tokenize", R"({"content": 5})", "content");
  info_expect_400(ts, "/tokenize", R"({"content": "a", "with_pieces": "yes"})", "with_pieces");
  info_expect_400(ts, "/tokenize", "{\"content\": \"\xff\"}", nullptr);
  info_expect_400(ts, "/detokenize", "{}", "tokens");
  info_expect_400(ts, "/detokenize", R"({"tokens": "1 2"})", "tokens");
  info_expect_400(ts, "/detokenize", R"({"tokens": [1, "a"]})", "tokens[1]");
  info_expect_400(ts, "/detokenize", R"({"tokens": [1.5]})", "tokens[0]");
  info_expect_400(ts, "/detokenize", R"({"tokens": [-1]})", "tokens[0]");
  info_expect_400(ts, "/detokenize", json{{"tokens", {0, n_vocab}}}.dump(), "tokens[1]");
  auto s = ts.client()->Get("/stats/stream?interval_ms=abc");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->status, 400) << s->body;
  EXPECT_EQ(get_json(ts, "/health")["status"], "ok");
  EXPECT_EQ(post_json(ts, "/detokenize", R"({"tokens": []})")["content"], "");
}

TEST(ServerInfo, SlotsShowProcessingThenTheCachedPrefix) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  constexpr int kLongCtx = 2048;  // room for a reply long enough to be seen while it runs
  TestServer ts(server::ServerOptions{}, /*n_seq=*/2, kLongCtx);
  json slots = get_json(ts, "/slots");
  ASSERT_EQ(slots.size(), 2u);
  for (const auto& s : slots) {
    EXPECT_EQ(s["state"], "idle");
    EXPECT_EQ(s["n_ctx"], kLongCtx);
    EXPECT_EQ(s["n_past"], 0);
    EXPECT_EQ(s["n_cached"], 0);
  }
  // While a stream is generating, its slot is processing with its prompt and the tokens so far.
  bool seen_processing = false;
  json busy;
  auto c = ts.client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.set_header("Content-Type", "application/json");
  req.body = info_chat("Tell me a long story about a fox", 2000, true).dump();
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    seen_processing = wait_until([&] {
      for (const auto& s : get_json(ts, "/slots"))
        if (s["state"] == "processing" && s["n_decoded"].get<int>() >= 2) return busy = s, true;
      return false;
    });
    return false;  // hang up: the server cancels the request
  };
  c->send(req);
  ASSERT_TRUE(seen_processing);
  EXPECT_TRUE(busy["is_processing"].get<bool>());
  EXPECT_GT(busy["n_prompt_tokens"].get<int>(), 5);
  EXPECT_EQ(busy["n_prompt_tokens_processed"], busy["n_prompt_tokens"]);
  EXPECT_GE(busy["n_past"].get<int>(), busy["n_prompt_tokens"].get<int>());
  EXPECT_TRUE(wait_until([&] {
    for (const auto& s : get_json(ts, "/slots"))
      if (s["state"] != "idle") return false;
    return true;
  }));
  // A finished request leaves its prompt's rows for reuse: the idle slot shows that prefix, and the
  // next request with the same prompt reports it as cached.
  const json done = post_json(ts, "/v1/chat/completions", info_chat("Name three colours", 4).dump());
  const int prompt_tokens = done["usage"]["prompt_tokens"];
  ASSERT_TRUE(wait_until([&] {
    for (const auto& s : get_json(ts, "/slots"))
      if (s["n_cached"].get<int>() == prompt_tokens) return true;
    return false;
  })) << get_json(ts, "/slots").dump();
  const json again = post_json(ts, "/v1/chat/completions", info_chat("Name three colours", 4).dump());
  EXPECT_EQ(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), prompt_tokens - 2);
}

// Sum of the heat map's cells per layer (0..255 each).
std::vector<int> heat_per_layer(const json& heat) {
  std::vector<int> out;
  for (const auto& row : heat["cells"]) out.push_back(std::accumulate(row.begin(), row.end(), 0, [](int a, const json& v) { return a + v.get<int>(); }));
  return out;
}

TEST(ServerInfo, StatsCountTheStreamedExperts) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  TierOptions tier;
  tier.cache_experts = 5;
  server::ServerOptions so;
  so.disk_probe = 1 << 20;
  TestServer ts(so, /*n_seq=*/2, kInfoCtx, tier);
  const json s0 = get_json(ts, "/stats");
  EXPECT_EQ(s0["mode"], "streaming");
  EXPECT_TRUE(s0["recent"].is_null());
  EXPECT_EQ(s0["totals"]["misses"], 0);
  EXPECT_GT(s0["disk"]["read_bw"].get<double>(), 0);
  EXPECT_EQ(s0["plan"]["cache_slots"], 5);
  const int n_layer = ts.eng->config().n_layer;
  ASSERT_EQ(s0["heat"]["layers"], n_layer);
  ASSERT_EQ(s0["heat"]["cells"].size(), static_cast<size_t>(n_layer));
  for (int v : heat_per_layer(s0["heat"])) EXPECT_EQ(v, 0);

  auto r = ts.client()->Post("/v1/chat/completions", info_chat("The quick brown fox", 12, true).dump(), "application/json");
  ASSERT_TRUE(r);
  const Sse sse = parse_sse(r->body);
  ASSERT_TRUE(sse.done) << r->body;
  ASSERT_TRUE(wait_until([&] { return get_json(ts, "/stats")["slots"]["busy"] == 0; }));
  const json s1 = get_json(ts, "/stats");
  const json& t = s1["totals"];
  EXPECT_EQ(t["generated"], 12);
  EXPECT_GT(t["tokens"].get<int>(), 12);  // the prompt's tokens too
  EXPECT_GT(t["misses"].get<uint64_t>(), 0u);
  EXPECT_GT(t["bytes_read"].get<uint64_t>(), 0u);
  // The same counters as the scheduler's (/metrics), once the engine is idle.
  const auto st = ts.srv->scheduler()->stats();
  EXPECT_EQ(t["hits"].get<uint64_t>(), st.expert_hits);
  EXPECT_EQ(t["misses"].get<uint64_t>(), st.expert_misses);
  EXPECT_EQ(t["bytes_read"].get<uint64_t>(), st.expert_bytes_read);
  const double hit_rate = t["hit_rate"];
  EXPECT_DOUBLE_EQ(hit_rate, static_cast<double>(st.expert_hits) / static_cast<double>(st.expert_hits + st.expert_misses));
  EXPECT_DOUBLE_EQ(t["bytes_per_token"].get<double>(), static_cast<double>(st.expert_bytes_read) / t["tokens"].get<double>());
  // Prefetch precision (used / issued) and recall (prefetched demands / misses + those), from the
  // cache's own counters (the engine thread is idle).
  const ExpertCacheCounters& kc = ts.eng->tier().cache()->counters();
  if (kc.prefetch_issued == 0) {
    EXPECT_TRUE(t["prefetch_precision"].is_null());
  } else {
    EXPECT_DOUBLE_EQ(t["prefetch_precision"].get<double>(), static_cast<double>(kc.prefetch_used) / static_cast<double>(kc.prefetch_issued));
  }
  EXPECT_DOUBLE_EQ(t["prefetch_recall"].get<double>(), static_cast<double>(kc.demand_prefetched) / static_cast<double>(kc.misses + kc.demand_prefetched));
  std::printf("[stats] hit rate %.3f, %.0f bytes/token, prefetch %llu issued, precision %s, recall %s\n", hit_rate, t["bytes_per_token"].get<double>(),
              static_cast<unsigned long long>(kc.prefetch_issued), t["prefetch_precision"].dump().c_str(), t["prefetch_recall"].dump().c_str());
  // The pass just ended: the recent window has it.
  const json& rec = s1["recent"];
  ASSERT_FALSE(rec.is_null());
  EXPECT_GT(rec["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(rec["read_bw"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(rec["limit_fraction"].get<double>(), rec["read_bw"].get<double>() / s1["disk"]["read_bw"].get<double>());
  // Every MoE layer routed each token to n_expert_used experts: at least that many warm cells per layer.
  const int k = ts.eng->config().layers[0].n_expert_used;
  for (size_t l = 0; l < s1["heat"]["cells"].size(); ++l) {
    int warm = 0;
    for (int v : s1["heat"]["cells"][l]) warm += v > 0;
    EXPECT_GE(warm, k) << "layer " << l;
  }
  EXPECT_GT(s1["heat"]["max"].get<double>(), 0);
}

TEST(ServerInfo, ResidentModelsShowRoutingHeat) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  TestServer ts(server::ServerOptions{}, /*n_seq=*/1, kInfoCtx);
  post_json(ts, "/v1/chat/completions", info_chat("hello there", 6).dump());
  ASSERT_TRUE(wait_until([&] { return get_json(ts, "/stats")["totals"]["generated"] == 6; }));
  const json s = get_json(ts, "/stats");
  EXPECT_EQ(s["mode"], "resident");
  EXPECT_FALSE(s["totals"].contains("hit_rate"));
  EXPECT_TRUE(s["disk"]["read_bw"].is_null());
  int total = 0;
  for (int v : heat_per_layer(s["heat"])) total += v;
  EXPECT_GT(total, 0);
}

TEST(ServerInfo, StatsStreamSendsSnapshots) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  TestServer ts(server::ServerOptions{}, /*n_seq=*/1, kInfoCtx);
  std::string buf;
  std::vector<json> events;
  auto r = ts.client()->Get("/stats/stream?interval_ms=50", [&](const char* data, size_t n) {
    buf.append(data, n);
    size_t e;
    while ((e = buf.find("\n\n")) != std::string::npos) {
      const std::string ev = buf.substr(0, e);
      buf.erase(0, e + 2);
      EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
      events.push_back(json::parse(ev.substr(6)));
      // The second event follows a pass: send one once the first has come.
      if (events.size() == 1) post_json(ts, "/v1/completions", json{{"prompt", "one two"}, {"max_tokens", 2}}.dump());
    }
    return events.size() < 2 || events.back()["totals"]["generated"] != 2;
  });
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.front()["mode"], "resident");
  EXPECT_EQ(events.back()["totals"]["generated"], 2);
  EXPECT_EQ(get_json(ts, "/health")["status"], "ok");
}

TEST(ServerInfo, WebPageIsEmbeddedAndCanBeTurnedOff) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  ASSERT_NE(server::webui_file("index.html"), nullptr);
  ASSERT_NE(server::webui_file("app.js"), nullptr);
  ASSERT_NE(server::webui_file("style.css"), nullptr);
  server::ServerOptions so;
  so.api_key = "k";
  {
    TestServer ts(so, /*n_seq=*/1, kInfoCtx);
    auto c = ts.client();
    auto page = c->Get("/");  // static: no key needed
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 200);
    EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
    EXPECT_NE(page->body.find("<canvas id=\"heatmap\""), std::string::npos);
    EXPECT_NE(page->body.find("/webui/app.js"), std::string::npos);
    const auto* js = server::webui_file("app.js");
    auto app = c->Get("/webui/app.js");
    ASSERT_TRUE(app);
    EXPECT_EQ(app->status, 200);
    EXPECT_EQ(app->body, std::string(reinterpret_cast<const char*>(js->data), js->size));
    auto none = c->Get("/webui/missing.js");
    ASSERT_TRUE(none);
    EXPECT_EQ(none->status, 404);
    EXPECT_EQ(json::parse(none->body)["error"]["code"], "not_found");
    auto stats = c->Get("/stats");  // data: the key is needed
    ASSERT_TRUE(stats);
    EXPECT_EQ(stats->status, 401);
    auto keyed = c->Get("/stats", httplib::Headers{{"Authorization", "Bearer k"}});
    ASSERT_TRUE(keyed);
    EXPECT_EQ(keyed->status, 200);
  }
  so.webui = false;
  TestServer off(so, /*n_seq=*/1, kInfoCtx);
  auto page = off.client()->Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 404);
  EXPECT_EQ(json::parse(page->body)["error"]["code"], "not_found");
  auto props = off.client()->Get("/props", httplib::Headers{{"Authorization", "Bearer k"}});
  ASSERT_TRUE(props);
  EXPECT_EQ(json::parse(props->body)["webui"], false);
}

}  // namespace
}  // namespace strata::test
