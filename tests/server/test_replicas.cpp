// Replicas of `strata serve` behind HAProxy (deploy/haproxy/strata.cfg) on loopback: conversation
// affinity, drain on SIGTERM, fail-over after kill -9; and the server's fleet states in process.
#include <spawn.h>

#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "core/error.h"
#include "fleet.h"

namespace strata::test {
namespace {

using nlohmann::json;

// Each replica: the fixture model, 8 slots (a replica keeps up to 8 conversations' prefixes).
const std::vector<std::string> kReplicaArgs{"--parallel", "8", "-c", "4096", "-t", "1", "--no-webui", "--drain-timeout", "60"};

#define START_FLEET(fleet)                  \
  SKIP_WITHOUT_SERVER_FIXTURE();            \
  do {                                      \
    std::string why_;                       \
    ASSERT_TRUE((fleet).start(&why_)) << why_; \
  } while (0)

struct LbAnswer {
  int status = -1;  // -1: no HTTP answer (connection error)
  std::string replica, body;
};

LbAnswer lb_post(httplib::Client& c, const std::string& path, const json& body, const httplib::Headers& h = {}) {
  LbAnswer a;
  auto r = c.Post(path.c_str(), h, body.dump(), "application/json");
  if (!r) return a;
  a.status = r->status;
  a.replica = r->get_header_value("X-Strata-Replica");
  a.body = r->body;
  return a;
}

// Session keys (x-session-id) that HAProxy sends to each replica, found by asking (GET /v1/models
// is hashed on the header like any request).
std::map<std::string, std::vector<std::string>> keys_by_replica(Fleet& f, int per_replica) {
  std::map<std::string, std::vector<std::string>> keys;
  httplib::Client c = f.client();
  for (int k = 0; k < 200 && static_cast<int>(keys.size()) < f.size(); ++k) {
    const std::string key = "session-" + std::to_string(k);
    auto r = c.Get("/v1/models", {{"x-session-id", key}});
    if (r && r->status == 200 && static_cast<int>(keys[r->get_header_value("X-Strata-Replica")].size()) < per_replica)
      keys[r->get_header_value("X-Strata-Replica")].push_back(key);
    bool all = static_cast<int>(keys.size()) == f.size();
    for (const auto& [_, v] : keys) all = all && static_cast<int>(v.size()) == per_replica;
    if (all) break;
  }
  return keys;
}

// A streamed completion through the balancer, read to its end in a thread.
struct LbStream {
  std::atomic<bool> started{false}, ended{false};
  std::string body;
  bool transport_error = false;
  std::thread t;
  LbStream(int port, const std::string& key, int tokens) {
    t = std::thread([this, port, key, tokens] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(120, 0);
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.headers = {{"x-session-id", key}};
      req.set_header("Content-Type", "application/json");
      req.body = json{{"prompt", "Once upon a time " + key}, {"max_tokens", tokens}, {"ignore_eos", true}, {"stream", true}, {"temperature", 0}}.dump();
      req.content_receiver = [this](const char* d, size_t n, uint64_t, uint64_t) {
        body.append(d, n);
        started = true;
        return true;
      };
      auto r = c.send(req);
      transport_error = !r;
      ended = true;
    });
  }
  ~LbStream() {
    if (t.joinable()) t.join();
  }
  bool whole() const { return parse_sse(body).done; }
};

// The tests' 12 conversations: 3 each keyed by x-session-id, OpenAI `user`, Anthropic
// metadata.user_id, and by nothing (the first user message; half of them after a system message).
struct ConvTurn {
  std::string path;
  json body;
  httplib::Headers headers;
};

ConvTurn conversation_turn(int i, const std::string& reply) {
  const std::string first = "Conversation " + std::to_string(i) + " asks about the rivers, hills and towns of the land of " + std::to_string(i * 7919);
  json msgs = json::array();
  if (i % 4 == 3 && i % 8 == 7) msgs.push_back({{"role", "system"}, {"content", "You answer briefly."}});
  msgs.push_back({{"role", "user"}, {"content", first}});
  if (!reply.empty()) {
    msgs.push_back({{"role", "assistant"}, {"content", reply}});
    msgs.push_back({{"role", "user"}, {"content", "And then?"}});
  }
  ConvTurn t{"/v1/chat/completions", json{{"messages", msgs}, {"max_tokens", 6}, {"temperature", 0}}, {}};
  if (i % 4 == 0) t.headers = {{"x-session-id", "conv-" + std::to_string(i)}};
  if (i % 4 == 1) t.body["user"] = "user-" + std::to_string(i);
  if (i % 4 == 2) t = ConvTurn{"/v1/messages", json{{"messages", msgs}, {"max_tokens", 6}, {"metadata", {{"user_id", "u-" + std::to_string(i)}}}}, {}};
  return t;
}

struct TurnUsage {
  int prompt = -1, cached = -1;
  std::string text;
};

TurnUsage turn_usage(const ConvTurn& t, const std::string& body) {
  const json j = json::parse(body);
  TurnUsage u;
  if (t.path == "/v1/messages") {
    u = {j["usage"]["input_tokens"].get<int>(), j["usage"]["cache_read_input_tokens"].get<int>(), ""};
    for (const auto& b : j["content"])
      if (b["type"] == "text") u.text += b["text"].get<std::string>();
    return u;
  }
  u = {j["usage"]["prompt_tokens"].get<int>(), j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), ""};
  const json& content = j["choices"][0]["message"]["content"];
  if (content.is_string()) u.text = content.get<std::string>();
  return u;
}

TEST(Replicas, SecondTurnsLandWhereTheFirstWasServedAndConversationsSpread) {
  Fleet fleet(3, kReplicaArgs);
  START_FLEET(fleet);
  httplib::Client c = fleet.client();
  std::map<std::string, int> firsts;
  for (int i = 0; i < 12; ++i) {
    const ConvTurn t1 = conversation_turn(i, "");
    const LbAnswer a1 = lb_post(c, t1.path, t1.body, t1.headers);
    ASSERT_EQ(a1.status, 200) << a1.body;
    const TurnUsage u1 = turn_usage(t1, a1.body);
    firsts[a1.replica]++;
    const ConvTurn t2 = conversation_turn(i, u1.text.empty() ? "ok" : u1.text);
    const LbAnswer a2 = lb_post(c, t2.path, t2.body, t2.headers);
    ASSERT_EQ(a2.status, 200) << a2.body;
    EXPECT_EQ(a2.replica, a1.replica) << "conversation " << i;
    // The whole first prompt was kept on that replica (the others share at most the template's first tokens).
    EXPECT_GE(turn_usage(t2, a2.body).cached, u1.prompt - 1) << "conversation " << i << ": " << a2.body;
  }
  EXPECT_EQ(firsts.size(), 3u) << "conversations went to " << firsts.size() << " replicas";
  for (const auto& [r, n] : firsts) EXPECT_LE(n, 8) << r << " got " << n << " of 12 conversations (its share is 4)";
}

TEST(Replicas, SigtermDrainsStreamsWhileTheOthersServe) {
  Fleet fleet(3, kReplicaArgs);
  START_FLEET(fleet);
  auto keys = keys_by_replica(fleet, 2);
  ASSERT_EQ(keys.size(), 3u);
  std::vector<std::unique_ptr<LbStream>> streams;
  for (const auto& k : keys["r1"]) streams.push_back(std::make_unique<LbStream>(fleet.port(), k, 3000));
  ASSERT_TRUE(wait_until([&] { return streams[0]->started && streams[1]->started; }));
  fleet.replica(1).signal(SIGTERM);
  httplib::Client direct("127.0.0.1", fleet.replica(1).port());
  ASSERT_TRUE(wait_until([&] { return fleet.replica(1).log().find("draining:") != std::string::npos; })) << fleet.replica(1).log();
  // New requests, r1's keys among them, are served by the others (r1's 503 is retried there).
  httplib::Client c = fleet.client();
  for (const auto& [r, ks] : keys)
    for (const auto& k : ks) {
      const LbAnswer a = lb_post(c, "/v1/completions", json{{"prompt", "hello " + k}, {"max_tokens", 2}}, {{"x-session-id", k}});
      EXPECT_EQ(a.status, 200) << k << ": " << a.body;
      EXPECT_NE(a.replica, "r1") << k;
    }
  for (auto& s : streams) {
    ASSERT_TRUE(wait_until([&] { return s->ended.load(); }, std::chrono::seconds(120)));
    EXPECT_FALSE(s->transport_error);
    EXPECT_TRUE(s->whole()) << s->body.substr(s->body.size() > 300 ? s->body.size() - 300 : 0);
    std::string finish;
    sse_text(parse_sse(s->body), /*chat=*/false, &finish);
    EXPECT_EQ(finish, "length");
  }
  const int st = fleet.replica(1).reap();
  EXPECT_TRUE(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0) << fleet.replica(1).log();
  // The drain began with the streams in flight (each lasts 3000 tokens past its first byte).
  EXPECT_EQ(fleet.replica(1).log().find("draining: 0 requests"), std::string::npos) << fleet.replica(1).log();
}

TEST(Replicas, KilledReplicaFailsItsStreamsCleanlyThenNoRequestFails) {
  Fleet fleet(3, kReplicaArgs);
  START_FLEET(fleet);
  auto keys = keys_by_replica(fleet, 2);
  ASSERT_EQ(keys.size(), 3u);
  std::vector<std::unique_ptr<LbStream>> streams;
  for (const auto& k : keys["r2"]) streams.push_back(std::make_unique<LbStream>(fleet.port(), k, 3000));
  ASSERT_TRUE(wait_until([&] { return streams[0]->started && streams[1]->started; }));
  fleet.replica(2).signal(SIGKILL);
  ASSERT_NE(fleet.replica(2).reap(), -1);
  // The streams cut on r2 end (no hang) and are seen as cut: no [DONE].
  for (auto& s : streams) {
    ASSERT_TRUE(wait_until([&] { return s->ended.load(); }, std::chrono::seconds(120)));
    EXPECT_FALSE(s->whole()) << s->body.substr(s->body.size() > 300 ? s->body.size() - 300 : 0);
  }
  ASSERT_TRUE(wait_until([&] { return fleet.server_status(2).rfind("DOWN", 0) == 0; })) << fleet.server_status(2);
  httplib::Client c = fleet.client();
  for (const auto& [r, ks] : keys)
    for (const auto& k : ks) {
      const LbAnswer a = lb_post(c, "/v1/completions", json{{"prompt", "hello " + k}, {"max_tokens", 2}}, {{"x-session-id", k}});
      EXPECT_EQ(a.status, 200) << k << ": " << a.body;
      EXPECT_TRUE(a.replica == "r1" || a.replica == "r3") << k << " went to " << a.replica;
    }
}

// In process: /health says loading, ok, draining; /metrics and every answer name the replica; a
// drain refuses new requests with 503 and Retry-After and answers /health and /metrics.
TEST(ReplicaState, HealthLoadingReadyDrainingAndTheReplicaLabel) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  std::unique_ptr<tok::Tokenizer> tok;
  auto eng = load_fixture_engine(1, 256, &tok);
  server::ServerOptions so;
  so.port = 0;
  so.replica = "r7";
  server::HttpServer srv(so);
  const int port = srv.bind();
  srv.start();
  httplib::Client c("127.0.0.1", port);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(json::parse(h->body), json({{"status", "loading"}}));
  srv.attach(*eng, *tok, server_fixture());
  h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(json::parse(h->body), json({{"status", "ok"}}));
  EXPECT_EQ(h->get_header_value("X-Strata-Replica"), "r7");
  auto r = c.Post("/v1/completions", json{{"prompt", "hi"}, {"max_tokens", 2}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("\nstrata_ready{replica=\"r7\"} 1\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("strata_requests_total{replica=\"r7\",endpoint=\"/v1/completions\",status=\"200\"} 1\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("\nstrata_draining{replica=\"r7\"} 0\n"), std::string::npos) << m->body;

  srv.begin_drain();
  h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(json::parse(h->body), json({{"status", "draining"}}));
  httplib::Client c2("127.0.0.1", port);  // the refusal closes its connection
  r = c2.Post("/v1/completions", json{{"prompt", "hi"}, {"max_tokens", 2}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "draining") << r->body;
  httplib::Client c3("127.0.0.1", port);
  m = c3.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("\nstrata_draining{replica=\"r7\"} 1\n"), std::string::npos) << m->body;
  EXPECT_TRUE(wait_until([&] { return srv.requests_in_flight() == 0; }));
  srv.stop();
  EXPECT_THROW(server::check_replica_name("r 1"), strata::Error);
  EXPECT_THROW(server::check_replica_name(std::string(65, 'r')), strata::Error);
}

// The README's scripts/cluster.sh as written: two replicas of the demo model behind HAProxy; a chat
// request through the balancer is answered by a named replica; SIGTERM stops the script and its children.
TEST(Replicas, ClusterScriptServesThroughHaproxyAndStopsOnSigterm) {
  const std::string root = std::string(STRATA_SOURCE_DIR) + "/..";
  const std::string model = root + "/models/strata-moe-tiny/model.gguf";
  ASSERT_TRUE(std::filesystem::exists(model)) << model;
  int port = 0;  // the balancer's, one per replica (cluster.sh: PORT + i) and HAProxy's status page (PORT + 100)
  for (int i = 0; i < 50 && port == 0; ++i)
    if (const int p = free_loopback_ports(3); p > 0 && loopback_port_free(p + 100)) port = p;
  ASSERT_GT(port, 0);
  const std::string out = "/tmp/strata_cluster_" + std::to_string(::getpid()) + ".out";
  const std::string run_dir = "/tmp/strata_cluster_" + std::to_string(::getpid());
  const pid_t pid = spawn_logged({"/bin/bash", root + "/scripts/cluster.sh", "2", model, "--", "--ram-budget", "160M", "--disk-probe", "0", "--no-webui"},
                                 {"PORT=" + std::to_string(port), "STRATA=" + std::string(STRATA_BINARY), "RUN_DIR=" + run_dir}, out);
  ASSERT_GT(pid, 0);
  bool exited = false;
  const bool ready = wait_until([&] {
    exited = exited || ::waitpid(pid, nullptr, WNOHANG) == pid;
    return exited || slurp_file(out).find("strata cluster: 2 replicas") != std::string::npos;
  });
  ASSERT_TRUE(ready && !exited) << slurp_file(out);
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  auto r = c.Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":4})", "application/json");
  ASSERT_TRUE(r) << slurp_file(out);
  EXPECT_EQ(r->status, 200) << r->body;
  const std::string replica = r->get_header_value("X-Strata-Replica");
  EXPECT_TRUE(replica == "r1" || replica == "r2") << replica;
  ::kill(pid, SIGTERM);
  int st = 0;
  EXPECT_TRUE(wait_until([&] { return ::waitpid(pid, &st, WNOHANG) == pid; })) << "cluster.sh did not end on SIGTERM";
  // Its replicas are gone: nothing answers their ports.
  httplib::Client r1("127.0.0.1", port + 1);
  r1.set_connection_timeout(2, 0);
  EXPECT_TRUE(wait_until([&] { return !r1.Get("/health"); })) << "replica r1 still answers after the script ended";
  std::filesystem::remove_all(run_dir);
  std::remove(out.c_str());
}

TEST(Replicas, MissingHaproxyFailsNamingThePackage) {
  std::string why;
  EXPECT_EQ(find_haproxy("/nonexistent/strata-test", &why), "");
  EXPECT_NE(why.find("package 'haproxy'"), std::string::npos) << why;
  EXPECT_NE(why.find("scripts/install-deps.sh"), std::string::npos) << why;
  // The fleet tests find it here (make test installs it through scripts/install-deps.sh).
  EXPECT_NE(find_haproxy(haproxy_dirs(), &why), "") << why;
}

}  // namespace
}  // namespace strata::test
