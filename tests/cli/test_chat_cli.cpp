// `strata chat` with the chat templates of the big families (tests/chat/data, rendered exactly in
// tests/chat/test_chat_template.cpp): two turns through a small model, each template given with
// --chat-template-file; the second turn reuses the first turn's prompt rows. Template switches
// reach the template through --chat-template-kwargs.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "../fixture_sets.h"

namespace {

struct ChatRun {
  int code = -1;
  std::string err;
};

// Runs `strata chat` on `model` with `input` on stdin; returns the exit code and stderr.
ChatRun chat(const std::string& model, const std::string& args, const std::string& input) {
  static int counter = 0;
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string in = dir + "/strata_chat_in_" + std::to_string(::getpid()) + "_" + std::to_string(counter);
  const std::string errf = dir + "/strata_chat_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  if (FILE* f = std::fopen(in.c_str(), "wb")) {
    std::fwrite(input.data(), 1, input.size(), f);
    std::fclose(f);
  }
  const std::string cmd = std::string(STRATA_BINARY) + " chat -m " + model + " -c 512 -t 2 -n 6 --temp 0 " + args + " < " + in + " > /dev/null 2> " + errf;
  ChatRun r;
  const int st = std::system(cmd.c_str());
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (FILE* e = std::fopen(errf.c_str(), "rb")) {
    std::array<char, 4096> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), e)) > 0) r.err.append(buf.data(), n);
    std::fclose(e);
  }
  std::remove(in.c_str());
  std::remove(errf.c_str());
  return r;
}

// The "[P prompt tokens in ... (R reused)" figures of each turn.
std::vector<std::pair<int, int>> turns(const std::string& err) {
  std::vector<std::pair<int, int>> v;
  static const std::regex re(R"(\[(\d+) prompt tokens in [0-9.]+ s \((\d+) reused\))");
  for (std::sregex_iterator it(err.begin(), err.end(), re), end; it != end; ++it) v.emplace_back(std::stoi((*it)[1]), std::stoi((*it)[2]));
  return v;
}

std::string model_path() { return std::string(STRATA_FIXTURES_DIR) + "/deepseek32-q8_0/model.gguf"; }
std::string data(const std::string& name) { return std::string(STRATA_TEST_DATA_DIR) + "/../chat/data/" + name; }

TEST(ChatCli, EveryFamilyTemplateRunsTwoTurns) {
  if (!std::filesystem::exists(model_path())) STRATA_MISSING_FIXTURE(model_path());
  for (const char* t : {"glm4_6.jinja", "glm4_7.jinja", "minimax_m2.jinja", "qwen3_5.jinja", "deepseek_v3_1.jinja", "deepseek_v3_2.jinja", "kimi_k2.jinja",
                        "kimi_k2_instruct.jinja", "kimi_k2_thinking.jinja"}) {
    SCOPED_TRACE(t);
    const ChatRun r = chat(model_path(), "--system 'Be brief.' --chat-template-file " + data(t), "Hello there\nAnd again?\n/exit\n");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err.find("error"), std::string::npos) << r.err;
    const auto tt = turns(r.err);
    ASSERT_EQ(tt.size(), 2u) << r.err;
    EXPECT_EQ(tt[0].second, 0) << r.err;            // nothing to reuse on the first turn
    EXPECT_GT(tt[1].second, 0) << r.err;            // the conversation's prefix is reused
    EXPECT_GT(tt[1].first + tt[1].second, tt[0].first) << r.err;  // and the prompt grew
  }
}

TEST(ChatCli, TemplateKwargsReachTheTemplate) {
  if (!std::filesystem::exists(model_path())) STRATA_MISSING_FIXTURE(model_path());
  // Qwen3.5 closes an empty think block in the generation prompt when enable_thinking is false.
  const ChatRun on = chat(model_path(), "--chat-template-file " + data("qwen3_5.jinja"), "Hi\n");
  const ChatRun off = chat(model_path(), "--chat-template-file " + data("qwen3_5.jinja") + " --chat-template-kwargs '{\"enable_thinking\": false}'", "Hi\n");
  ASSERT_EQ(on.code, 0) << on.err;
  ASSERT_EQ(off.code, 0) << off.err;
  const auto a = turns(on.err), b = turns(off.err);
  ASSERT_EQ(a.size(), 1u) << on.err;
  ASSERT_EQ(b.size(), 1u) << off.err;
  EXPECT_GT(b[0].first, a[0].first) << "the '</think>' of enable_thinking=false adds prompt tokens";
  const ChatRun bad = chat(model_path(), "--chat-template-kwargs '[1]'", "Hi\n");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--chat-template-kwargs must be a JSON object"), std::string::npos) << bad.err;
}

// A template that refuses a conversation reports it and keeps the session.
TEST(ChatCli, TemplateErrorKeepsTheSession) {
  if (!std::filesystem::exists(model_path())) STRATA_MISSING_FIXTURE(model_path());
  const std::string tmpl = std::filesystem::temp_directory_path().string() + "/strata_chat_refuse.jinja";
  if (FILE* f = std::fopen(tmpl.c_str(), "wb")) {
    const std::string src = "{% if messages[-1].content == 'bad' %}{{ raise_exception('no bad words') }}{% endif %}"
                            "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:";
    std::fwrite(src.data(), 1, src.size(), f);
    std::fclose(f);
  }
  const ChatRun r = chat(model_path(), "--chat-template-file " + tmpl, "bad\ngood\n");
  std::remove(tmpl.c_str());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("no bad words"), std::string::npos) << r.err;
  EXPECT_EQ(turns(r.err).size(), 1u) << r.err;
}

}  // namespace
