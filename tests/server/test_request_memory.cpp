// What handling a request costs against what the front admits it for (server/http_front.h,
// request_charge: 32 per body byte, 256 per JSON value, 1 MiB): `strata serve` in its own process, its peak RSS reset
// (/proc/PID/clear_refs) before each of the worst bodies of about 256 KiB, the growth of the peak
// over the request must stay within its charge. The shapes: one long prompt (tokens, the rendered
// template), many tiny messages, JSON of the smallest values (the parsed tree is the largest per
// byte) in the template's variables and in a tool call's arguments, a large enum schema (a
// grammar), many tool results.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

#include "server/http_front.h"
#include "serve_process.h"

namespace strata::test {
namespace {

using nlohmann::json;

constexpr size_t kBody = 256 << 10;

std::string long_prompt() {
  std::string words;
  while (words.size() < kBody - 200) words += "the quick brown fox jumps over the lazy dog, then naps. ";
  return json{{"messages", {{{"role", "user"}, {"content", words}}}}, {"max_tokens", 1}}.dump();
}

std::string tiny_messages() {
  json m = json::array();
  for (size_t i = 0; i < kBody / 36; ++i) m.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "a"}});
  return json{{"messages", m}, {"max_tokens", 1}}.dump();
}

std::string zeros(size_t bytes) {
  std::string a = "[";
  while (a.size() < bytes) a += "0,";
  return a + "0]";
}

std::string smallest_values() {
  // Template variables the template never reads: parsed, checked, carried.
  return R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"chat_template_kwargs":{"x":)" + zeros(kBody - 200) + "}}";
}

std::string zero_arguments() {
  // A tool call's arguments given as an object: carried into the template as values.
  return R"({"messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":{"x":)" +
         zeros(kBody - 400) + R"(}}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}],"max_tokens":1})";
}

std::string many_keys() {
  std::string o = "{";
  for (int i = 0; o.size() < kBody - 200; ++i) o += (i ? ",\"" : "\"") + std::to_string(i) + "\":0";
  o += "}";
  return R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"chat_template_kwargs":)" + o + "}";
}

std::string enum_schema() {
  json e = json::array();
  for (int i = 0; e.size() < 4000; ++i) e.push_back("value number " + std::to_string(i));
  return json{{"messages", {{{"role", "user"}, {"content", "pick"}}}},
              {"max_tokens", 1},
              {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "e"}, {"schema", {{"enum", e}}}}}}}}
      .dump();
}

std::string tool_results() {
  json m = json::array({{{"role", "user"}, {"content", "go"}}});
  for (size_t i = 0; i < kBody / 180; ++i) {
    const std::string id = "call_" + std::to_string(i);
    m.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {{{"id", id}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}});
    m.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", "sunny"}});
  }
  return json{{"messages", m}, {"max_tokens", 1}, {"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}}}}.dump();
}

TEST(RequestMemory, HandlingTheWorstBodiesStaysWithinTheirCharge) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  ServeProcess s("reqmem", {"-m", server_fixture(), "--port", "0", "--parallel", "1", "-c", "1024", "-t", "2", "--disk-probe", "0",
                            "--max-body", std::to_string(2 * kBody), "--request-memory", "256M"});
  ASSERT_TRUE(s.ready()) << s.log();
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(300, 0);
  const std::pair<const char*, std::string> bodies[] = {{"long prompt", long_prompt()},       {"tiny messages", tiny_messages()},
                                                        {"smallest values", smallest_values()}, {"many keys", many_keys()},
                                                        {"enum schema", enum_schema()},         {"tool results", tool_results()},
                                                        {"zero arguments", zero_arguments()}};
  for (const auto& [name, body] : bodies) {
    // Twice: the first also pays what stays (pages of the model the prompt touches, arenas).
    for (int rep = 0; rep < 2; ++rep) {
      std::ofstream(std::string("/proc/") + std::to_string(s.pid()) + "/clear_refs") << "5";  // VmHWM = VmRSS from here
      const long before = s.status_bytes("VmHWM");
      auto r = c.Post("/v1/chat/completions", body, "application/json");
      ASSERT_TRUE(r) << name << ": no answer\n" << s.log();
      const long grew = s.status_bytes("VmHWM") - before;
      const double charge = static_cast<double>(server::request_charge(body.size(), server::json_values_bound(body)));
      std::printf("[request memory] %-15s %7.1f KiB body -> %d, peak RSS +%.1f MiB (%.1f x the body; charged %.1f MiB)\n", name, body.size() / 1024.0,
                    r->status, grew / 1048576.0, grew / static_cast<double>(body.size()), charge / 1048576.0);
      EXPECT_TRUE(r->status == 200 || r->status == 400 || r->status == 413) << name << ": " << r->status << " " << r->body.substr(0, 200);
#if !defined(__SANITIZE_ADDRESS__)
      EXPECT_LE(static_cast<double>(grew), charge) << name << ": handling grew the peak RSS past the request's charge";
#endif
    }
  }
}

}  // namespace
}  // namespace strata::test
