// POST /slots/{id}?action=save|restore|erase (--slot-save-path): llama-server's response fields; a
// prompt cache saved by one `strata serve` and restored by a new one after a restart gives the
// same reply, logprobs and cached_tokens as the server that saved it; bad names, foreign or corrupt
// files and unknown actions are clear 400s; without --slot-save-path every action is a 501; an
// action runs on the engine thread between passes and sees a slot that holds a request as busy.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>

#include "../wait_until.h"
#include "core/error.h"
#include "serve_process.h"
#include "server_util.h"

namespace strata::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct SlotTmp {
  fs::path path;
  explicit SlotTmp(const char* name) : path(fs::path(::testing::TempDir()) / fmt::format("strata-slots-{}-{}", name, ::getpid())) {
    fs::remove_all(path);
  }
  ~SlotTmp() { fs::remove_all(path); }
};

json post_json(httplib::Client& c, const std::string& path, const json& body, int* status = nullptr) {
  auto r = c.Post(path, body.dump(), "application/json");
  if (!r) {
    ADD_FAILURE() << "no response to POST " << path;
    return json();
  }
  if (status) *status = r->status;
  else EXPECT_EQ(r->status, 200) << path << ": " << r->body;
  return json::parse(r->body, nullptr, false);
}

const json kFirst = {{"prompt", "The agent's long system prompt: you are a careful assistant. Answer briefly."}, {"max_tokens", 4}, {"temperature", 0}};
const json kSecond = {{"prompt", "The agent's long system prompt: you are a careful assistant. Answer briefly. What is two plus two?"},
                      {"max_tokens", 6},
                      {"temperature", 0},
                      {"logprobs", 3}};

// The second request's reply: text, logprobs and cached prompt tokens.
struct Reply {
  std::string text;
  json logprobs;
  int cached = -1;
};

Reply second_request(httplib::Client& c) {
  const json r = post_json(c, "/v1/completions", kSecond);
  Reply out;
  out.text = r["choices"][0]["text"].get<std::string>();
  out.logprobs = r["choices"][0]["logprobs"];
  out.cached = r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  return out;
}

std::vector<std::string> serve_args(const fs::path& dir) {
  return {"-m", server_fixture(), "--port", "0", "--parallel", "1", "-c", "256", "-t", "1", "--disk-probe", "0", "--slot-save-path", dir.string()};
}

// Save after a request, restart the server, restore: the same prompt and continuation then gives
// the same text and logprobs and reuses the same rows as on the server that saved it.
TEST(SlotActions, PromptCacheSurvivesARestart) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  SlotTmp dir("restart");
  json saved;
  Reply before;
  {
    ServeProcess a("slots_a", serve_args(dir.path));
    ASSERT_TRUE(a.ready()) << a.log();
    httplib::Client c("127.0.0.1", a.port());
    c.set_read_timeout(60, 0);
    post_json(c, "/v1/completions", kFirst);
    saved = post_json(c, "/slots/0?action=save", {{"filename", "agent.slot"}});
    EXPECT_EQ(saved["id_slot"], 0);
    EXPECT_EQ(saved["filename"], "agent.slot");
    EXPECT_GT(saved["n_saved"].get<int>(), 4);
    EXPECT_EQ(saved["n_written"].get<uint64_t>(), fs::file_size(dir.path / "agent.slot"));
    EXPECT_TRUE(saved["timings"]["save_ms"].is_number());
    before = second_request(c);
    EXPECT_GT(before.cached, 0) << "the second prompt starts with the first";
  }
  ServeProcess b("slots_b", serve_args(dir.path));
  ASSERT_TRUE(b.ready()) << b.log();
  httplib::Client c("127.0.0.1", b.port());
  c.set_read_timeout(60, 0);
  const json restored = post_json(c, "/slots/0?action=restore", {{"filename", "agent.slot"}});
  EXPECT_EQ(restored["id_slot"], 0);
  EXPECT_EQ(restored["filename"], "agent.slot");
  EXPECT_EQ(restored["n_restored"], saved["n_saved"]);
  EXPECT_EQ(restored["n_read"], saved["n_written"]);
  EXPECT_TRUE(restored["timings"]["restore_ms"].is_number());
  auto slots = c.Get("/slots");
  ASSERT_TRUE(slots);
  EXPECT_NE(slots->body.find(fmt::format("\"n_past\":{}", saved["n_saved"].get<int>())), std::string::npos) << slots->body;
  const Reply after = second_request(c);
  EXPECT_EQ(after.cached, before.cached);
  EXPECT_EQ(after.text, before.text);
  EXPECT_EQ(after.logprobs, before.logprobs);
  // Erase empties the slot: the same request then reuses nothing.
  const json erased = post_json(c, "/slots/0?action=erase", json::object());
  EXPECT_EQ(erased["id_slot"], 0);
  EXPECT_GT(erased["n_erased"].get<int>(), 0);
  const Reply fresh = second_request(c);
  EXPECT_EQ(fresh.cached, 0);
  EXPECT_EQ(fresh.text, before.text);
}

void expect_status(httplib::Client& c, const std::string& path, const json& body, int status, const std::string& words) {
  int got = 0;
  const json r = post_json(c, path, body, &got);
  EXPECT_EQ(got, status) << path << " " << body.dump() << ": " << r.dump();
  const std::string msg = r.contains("error") ? r["error"].value("message", "") : "";
  EXPECT_NE(msg.find(words), std::string::npos) << path << " " << body.dump() << ": " << msg;
}

TEST(SlotActions, BadRequestsAreClearErrors) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  SlotTmp dir("errors");
  server::ServerOptions so;
  so.slot_save_path = dir.path.string();
  TestServer ts(so, /*n_seq=*/2, /*n_ctx=*/128);
  auto c = ts.client();
  ASSERT_TRUE(fs::is_directory(dir.path)) << "the directory is created at start";
  expect_status(*c, "/slots/0?action=fly", {{"filename", "x"}}, 400, "unknown slot action");
  expect_status(*c, "/slots/0?action=save", json::object(), 400, "filename");
  expect_status(*c, "/slots/0?action=save", {{"filename", 3}}, 400, "filename");
  expect_status(*c, "/slots/0?action=save", {{"filename", "../escape"}}, 400, "slot file name");
  expect_status(*c, "/slots/0?action=save", {{"filename", "/tmp/abs"}}, 400, "slot file name");
  expect_status(*c, "/slots/7?action=save", {{"filename", "x"}}, 400, "no slot 7");
  expect_status(*c, "/slots/0?action=restore", {{"filename", "missing"}}, 400, "no slot file");
  std::ofstream(dir.path / "junk") << std::string(400, 'j');  // longer than a header, not a slot file
  expect_status(*c, "/slots/0?action=restore", {{"filename", "junk"}}, 400, "not a slot file");
  std::ofstream(dir.path / "short") << "STRSLOT1";
  expect_status(*c, "/slots/1?action=restore", {{"filename", "short"}}, 400, "truncated");
  EXPECT_FALSE(fs::exists(fs::path(::testing::TempDir()) / "abs"));
  // The server still serves, and saving works.
  post_json(*c, "/v1/completions", kFirst);
  const json ok = post_json(*c, "/slots/0?action=save", {{"filename", "ok"}});
  EXPECT_GT(ok["n_saved"].get<int>(), 0);

  server::ServerOptions none;
  TestServer plain(none, 1, 128);
  auto pc = plain.client();
  expect_status(*pc, "/slots/0?action=save", {{"filename", "x"}}, 501, "--slot-save-path");
  expect_status(*pc, "/slots/0?action=erase", json::object(), 501, "--slot-save-path");
}

// An action queued while a slot decodes runs between passes on the engine thread and sees the slot
// busy (the HTTP route answers 409 then); once the request is done the slot is free.
TEST(SlotActions, ActionsRunBetweenPassesAndSeeBusySlots) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  server::ServerOptions so;
  TestServer ts(so, /*n_seq=*/1, /*n_ctx=*/128);
  server::Scheduler& sched = *ts.srv->scheduler();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> tokens{0};
  server::GenParams p;
  p.prompt = ts.tok->encode("a b c d e f", true, true);
  p.max_tokens = 8;
  p.ignore_eos = true;
  p.on_logits = [&](const float*, int) {
    if (tokens.fetch_add(1) == 0) released.wait();  // the engine thread holds here until the action is queued
  };
  auto r = std::make_shared<server::GenRequest>(p);
  ASSERT_TRUE(sched.submit(r));
  ASSERT_TRUE(wait_until([&] { return tokens.load() > 0; }));
  std::atomic<int> seen_tokens{-1};
  bool busy = false;
  std::future<void> action = sched.run_on_engine([&](Engine& eng) {
    busy = sched.slot_busy(0);
    seen_tokens = tokens.load();
    EXPECT_GT(eng.seq_length(0), 0);
  });
  release.set_value();
  action.get();
  EXPECT_TRUE(busy);
  EXPECT_GE(seen_tokens.load(), 1);
  while (!r->done()) r->wait(100);
  bool busy_after = true;
  sched.run_on_engine([&](Engine&) { busy_after = sched.slot_busy(0); }).get();
  EXPECT_FALSE(busy_after);
  // An action's exception reaches the caller; after stop() actions fail instead of hanging.
  EXPECT_THROW(sched.run_on_engine([](Engine&) { throw strata::Error("boom"); }).get(), strata::Error);
  sched.stop();
  EXPECT_THROW(sched.run_on_engine([](Engine&) {}).get(), strata::Error);
}

}  // namespace
}  // namespace strata::test
