// Chat templates: the published templates of Qwen3, DeepSeek V3/R1, gpt-oss (harmony), Mixtral and
// Llama 3 / 3.1 rendered for a standard conversation against hand-checked strings; tool-call and
// reasoning cases against reference-Jinja2 renders (tests/chat/data/cases, written by
// tools/chat_reference/render_cases.py), among them the big families' templates (GLM-4.5/4.6,
// GLM-4.7, MiniMax-M2, Qwen3.5, DeepSeek V3.1 / V3.2, Kimi K2 and its Instruct / Thinking forms)
// with system/user/assistant turns, generation prompts, reasoning_content, tool calls and results;
// the fixtures' GGUF templates against the goldens the fixtures ship (prompts.txt / strings.txt).
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "../fixture_sets.h"
#include "chat_test_util.h"
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"

namespace {

using strata::apply_chat_template;
using strata::ChatMessage;
using strata::ChatTemplateOptions;
using strata::chat_test::read_data;
using strata::chat_test::read_file;
using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

const fs::path kFixtures = STRATA_FIXTURES_DIR;

std::vector<ChatMessage> conversation() {
  return {{"system", "You are a helpful assistant."},
          {"user", "Hello!"},
          {"assistant", "Hi there! How can I help?"},
          {"user", "What is 2+2?"}};
}

ChatTemplateOptions options(const std::string& bos = "<s>", const std::string& eos = "</s>") {
  ChatTemplateOptions o;
  o.add_generation_prompt = true;
  o.bos_token = bos;
  o.eos_token = eos;
  o.now = 1754352000;  // 2025-08-05 UTC
  return o;
}

std::string render_data(const std::string& file, const std::vector<ChatMessage>& msgs, const ChatTemplateOptions& o) {
  return apply_chat_template(read_data(file), msgs, o);
}

TEST(ChatTemplate, Qwen3) {
  EXPECT_EQ(render_data("qwen3.jinja", conversation(), options()),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"
            "<|im_start|>assistant\nHi there! How can I help?<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  auto o = options();
  o.extra_context = {{"enable_thinking", false}};
  EXPECT_EQ(render_data("qwen3.jinja", {{"user", "Hi"}}, o),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplate, DeepSeekV3) {
  EXPECT_EQ(render_data("deepseek_v3.jinja", conversation(), options()),
            "<s>You are a helpful assistant.<｜User｜>Hello!<｜Assistant｜>Hi there! How can I help?<｜end▁of▁sentence｜>"
            "<｜User｜>What is 2+2?<｜Assistant｜>");
}

TEST(ChatTemplate, DeepSeekR1) {
  EXPECT_EQ(render_data("deepseek_r1.jinja", conversation(), options()),
            "<s>You are a helpful assistant.<｜User｜>Hello!<｜Assistant｜>Hi there! How can I help?<｜end▁of▁sentence｜>"
            "<｜User｜>What is 2+2?<｜Assistant｜><think>\n");
}

TEST(ChatTemplate, GptOssHarmony) {
  EXPECT_EQ(render_data("gpt_oss.jinja", conversation(), options()),
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
            "Knowledge cutoff: 2024-06\nCurrent date: 2025-08-05\n\nReasoning: medium\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
            "<|start|>developer<|message|># Instructions\n\nYou are a helpful assistant.\n\n<|end|>"
            "<|start|>user<|message|>Hello!<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Hi there! How can I help?<|end|>"
            "<|start|>user<|message|>What is 2+2?<|end|><|start|>assistant");
}

TEST(ChatTemplate, Mixtral) {
  EXPECT_EQ(render_data("mixtral.jinja", conversation(), options()),
            "<s> [INST] You are a helpful assistant.\n\nHello! [/INST] Hi there! How can I help?</s>"
            " [INST] What is 2+2? [/INST]");
  // The template's own raise_exception() surfaces with its message and position.
  try {
    render_data("mixtral.jinja", {{"user", "a"}, {"user", "b"}}, options());
    FAIL() << "expected an error";
  } catch (const strata::Error& e) {
    EXPECT_NE(std::string(e.what()).find("at 11:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("conversation roles must alternate"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, Llama3) {
  EXPECT_EQ(render_data("llama3.jinja", conversation(), options()),
            "<s><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there! How can I help?<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_data("llama3_1.jinja", conversation(), options()),
            "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\nYou are a helpful assistant.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there! How can I help?<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Tool calls, tool responses, reasoning_content / <think> handling, builtin tools, training mode.
TEST(ChatTemplate, CasesMatchReferenceRenders) {
  const fs::path dir = fs::path(strata::chat_test::data_dir()) / "cases";
  int n = 0;
  std::map<std::string, int> exact;  // template -> cases rendered exactly
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    SCOPED_TRACE(entry.path().filename().string());
    const json c = json::parse(read_file(entry.path().string()));
    std::vector<ChatMessage> msgs;
    for (const auto& m : c["messages"]) msgs.push_back(strata::chat_message_from_json(m));
    ChatTemplateOptions o;
    o.add_generation_prompt = c.value("add_generation_prompt", true);
    o.bos_token = c.value("bos_token", "");
    o.eos_token = c.value("eos_token", "");
    if (c.contains("tools")) o.tools = c["tools"];
    if (c.contains("extra_context")) o.extra_context = c["extra_context"];
    if (c.contains("now")) o.now = c["now"].get<std::time_t>();
    std::string expected = read_file(fs::path(entry.path()).replace_extension(".expected").string());
    std::string got;
    try {
      got = render_data(c["template"].get<std::string>(), msgs, o);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "render failed: " << e.what();
      continue;
    }
    EXPECT_EQ(got, expected);
    if (got == expected) exact[c["template"].get<std::string>()]++;
    ++n;
  }
  EXPECT_GE(n, 63);
  // Every big family: its five standard cases (basic, closed, reasoning, tools, tool turn) at least.
  for (const char* t : {"glm4_6.jinja", "glm4_7.jinja", "minimax_m2.jinja", "qwen3_5.jinja", "deepseek_v3_1.jinja", "deepseek_v3_2.jinja",
                        "kimi_k2.jinja", "kimi_k2_instruct.jinja", "kimi_k2_thinking.jinja"})
    EXPECT_GE(exact[t], 5) << t;
}

TEST(ChatTemplate, EmptyTemplateAndMissingGgufTemplateFailClearly) {
  EXPECT_THROW(apply_chat_template("", conversation(), options()), strata::Error);
  const fs::path path = fs::temp_directory_path() / "strata_chat_no_template.gguf";
  strata::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.write(path.string());
  auto model = strata::GgufModel::open(path.string());
  try {
    strata::chat_template_from_gguf(*model);
    FAIL() << "expected an error";
  } catch (const strata::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no 'tokenizer.chat_template'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
  model.reset();
  fs::remove(path);
}

// ---- fixtures ----

#define REQUIRE_FIXTURES() \
  if (!fs::exists(kFixtures)) STRATA_MISSING_FIXTURE(kFixtures.string() + " (chat template fixture tests)")

// Decodes the escapes of prompts.txt / strings.txt (\n \t \r \\ \xHH).
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) { out += s[i]; continue; }
    const char c = s[++i];
    if (c == 'n') out += '\n';
    else if (c == 't') out += '\t';
    else if (c == 'r') out += '\r';
    else if (c == 'x' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
             std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    }
    else out += c;
  }
  return out;
}

bool golden_has_line(const fs::path& file, const std::string& want) {
  std::istringstream in(read_file(file.string()));
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#' && unescape(line) == want) return true;
  return false;
}

TEST(ChatTemplateFixtures, Qwen3VocabTemplateIsPublishedQwen3AndMatchesGolden) {
  REQUIRE_FIXTURES();
  auto model = strata::GgufModel::open((kFixtures / "tokenizer-qwen3/vocab.gguf").string());
  const std::string tmpl = strata::chat_template_from_gguf(*model);
  EXPECT_EQ(tmpl, read_data("qwen3.jinja"));
  auto o = strata::chat_options_from_gguf(*model);
  EXPECT_EQ(o.bos_token, "<|endoftext|>");
  EXPECT_EQ(o.eos_token, "<|im_end|>");
  const std::string got = apply_chat_template(tmpl, {{"user", "Hi"}}, o);
  EXPECT_EQ(got, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_TRUE(golden_has_line(kFixtures / "tokenizer-qwen3/strings.txt", got));  // the tokenizer golden's chat line
  EXPECT_EQ(apply_chat_template(tmpl, conversation(), o), render_data("qwen3.jinja", conversation(), o));
}

TEST(ChatTemplateFixtures, DeepSeekV3VocabTemplateMatchesGolden) {
  REQUIRE_FIXTURES();
  auto model = strata::GgufModel::open((kFixtures / "tokenizer-deepseek-v3/vocab.gguf").string());
  const std::string tmpl = strata::chat_template_from_gguf(*model);
  auto o = strata::chat_options_from_gguf(*model);
  EXPECT_EQ(o.bos_token, "<｜begin▁of▁sentence｜>");
  const std::string got = apply_chat_template(tmpl, {{"user", "Hello"}}, o);
  EXPECT_EQ(got, "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜>");
  EXPECT_TRUE(golden_has_line(kFixtures / "tokenizer-deepseek-v3/strings.txt", got));
  EXPECT_EQ(apply_chat_template(tmpl, conversation(), o),
            "<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>Hello!<｜Assistant｜>Hi there! How can I help?"
            "<｜end▁of▁sentence｜><｜User｜>What is 2+2?<｜Assistant｜>");
  // This template's tool-call branch (content none) with two calls and two tool outputs.
  ChatMessage call{"assistant", std::nullopt};
  call.tool_calls = json::parse(R"([{"type": "function", "function": {"name": "f", "arguments": "{}"}},
                                    {"type": "function", "function": {"name": "g", "arguments": "{\"a\": 1}"}}])");
  EXPECT_EQ(apply_chat_template(tmpl, {{"user", "Q"}, call, {"tool", "r1"}, {"tool", "r2"}}, o),
            "<｜begin▁of▁sentence｜><｜User｜>Q<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n"
            "```json\n{}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{\"a\": 1}\n```"
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>r1"
            "<｜tool▁output▁end｜>\n<｜tool▁output▁begin｜>r2<｜tool▁output▁end｜><｜tool▁outputs▁end｜>");
}

// The chat formats of the model fixtures. Every set ships either the ChatML template or, for the
// Kimi K2 sets, Kimi's own format (<|im_system|>system<|im_middle|>...<|im_end|>, no newlines).
// Each family's render of the standard system + user turn is checked exactly; the prompts.txt
// goldens hold the ChatML render, or for Kimi K2 a Kimi-format turn (system + user + generation
// prompt followed by the start of the assistant's reply).
struct ChatFamily {
  const char* set_prefix;        // fixture folder names starting with this use the family ("" = any)
  std::string standard;          // render of the standard turn
  std::vector<ChatMessage> golden_turn;  // the conversation of the prompts.txt chat line
  std::string golden_render;     // its render
  std::string golden_suffix;     // text after the render on that line
};

const std::vector<ChatFamily>& chat_families() {
  static const std::vector<ChatFamily> kFamilies = {
      {"kimi-k2",
       "<|im_system|>system<|im_middle|>You are a helpful assistant.<|im_end|><|im_user|>user<|im_middle|>What is the "
       "capital of France?<|im_end|><|im_assistant|>assistant<|im_middle|>",
       {{"system", "You are Kimi."},
        {"user", "请把这段话翻译成English，并保留数字123456和日期2026年1月31日。"}},
       "<|im_system|>system<|im_middle|>You are Kimi.<|im_end|><|im_user|>user<|im_middle|>"
       "请把这段话翻译成English，并保留数字123456和日期2026年1月31日。<|im_end|><|im_assistant|>assistant<|im_middle|>",
       "了解しました！Let's go: 東京タワーは333メートル、我 爱 北京。"},
      {"",
       "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?"
       "<|im_end|>\n<|im_start|>assistant\n",
       {{"system", "You are a helpful assistant."}, {"user", "What is the capital of France?"}},
       "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?"
       "<|im_end|>\n<|im_start|>assistant\n",
       ""},
  };
  return kFamilies;
}

const ChatFamily& chat_family(const std::string& set) {
  for (const auto& f : chat_families())
    if (set.rfind(f.set_prefix, 0) == 0) return f;
  throw std::logic_error("no chat family matches " + set);  // unreachable: the last one matches all
}

TEST(ChatTemplateFixtures, ModelTemplatesMatchPromptGolden) {
  REQUIRE_FIXTURES();
  int n = 0;
  for (const auto& entry : fs::directory_iterator(kFixtures)) {
    const fs::path gguf = entry.path() / "model.gguf";
    if (!fs::exists(gguf)) continue;
    SCOPED_TRACE(gguf.string());
    const ChatFamily& family = chat_family(entry.path().filename().string());
    auto model = strata::GgufModel::open(gguf.string());
    const std::string tmpl = strata::chat_template_from_gguf(*model);
    EXPECT_EQ(apply_chat_template(
                  tmpl, {{"system", "You are a helpful assistant."}, {"user", "What is the capital of France?"}}, options()),
              family.standard);
    const std::string got = apply_chat_template(tmpl, family.golden_turn, options());
    EXPECT_EQ(got, family.golden_render);
    EXPECT_TRUE(golden_has_line(entry.path() / "prompts.txt", got + family.golden_suffix));
    ++n;
  }
  EXPECT_GT(n, 0) << "no model fixtures found under " << kFixtures;
}

TEST(ChatTemplateFixtures, KimiK2VocabTemplateMatchesGolden) {
  REQUIRE_FIXTURES();
  auto model = strata::GgufModel::open((kFixtures / "tokenizer-kimi-k2/vocab.gguf").string());
  const std::string tmpl = strata::chat_template_from_gguf(*model);
  auto o = strata::chat_options_from_gguf(*model);
  EXPECT_EQ(o.bos_token, "[BOS]");
  EXPECT_EQ(o.eos_token, "<|im_end|>");
  o.add_generation_prompt = true;
  const std::string got = apply_chat_template(tmpl, {{"system", "You are Kimi."}, {"user", "你好"}}, o);
  EXPECT_EQ(got,
            "<|im_system|>system<|im_middle|>You are Kimi.<|im_end|><|im_user|>user<|im_middle|>你好<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>");
  EXPECT_TRUE(golden_has_line(kFixtures / "tokenizer-kimi-k2/strings.txt", got));
  o.add_generation_prompt = false;
  EXPECT_EQ(apply_chat_template(tmpl, {{"user", "a"}, {"assistant", "b"}}, o),
            "<|im_user|>user<|im_middle|>a<|im_end|><|im_assistant|>assistant<|im_middle|>b<|im_end|>");
}

}  // namespace
