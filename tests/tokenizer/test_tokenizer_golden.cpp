// Golden tokenizer checks against llama.cpp output: every set under the fixtures folder that has
// golden/tokens.json (tokenizer sets: vocab.gguf + strings.txt) or golden/p*.json with a
// "tokenize" section (model sets: model.gguf + prompts.txt). For each text and each of the three
// modes (special = add+parse, plain = neither, parse_special_only) it checks the exact ids, each
// token's piece and the detokenized text. The folder is STRATA_FIXTURES (environment) if set,
// else the compiled-in STRATA_FIXTURES_DIR, so other sets in the same layout can be checked.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../fixture_sets.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using strata::tok::Tokenizer;

namespace {

std::string fixtures_dir() {
  if (const char* e = std::getenv("STRATA_FIXTURES"); e && *e) return e;
  return STRATA_FIXTURES_DIR;
}

std::string tok_read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string to_hex(std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string from_hex(std::string_view h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(std::string(h.substr(i, 2)), nullptr, 16));
  return out;
}

// One line of strings.txt / prompts.txt: escapes \n \t \r \\ \xHH.
std::string unescape_line(std::string_view l) {
  std::string out;
  for (size_t i = 0; i < l.size(); ++i) {
    if (l[i] != '\\' || i + 1 >= l.size()) {
      out += l[i];
      continue;
    }
    const char c = l[++i];
    if (c == 'n') out += '\n';
    else if (c == 't') out += '\t';
    else if (c == 'r') out += '\r';
    else if (c == '\\') out += '\\';
    else if (c == 'x' && i + 2 < l.size()) {
      out += static_cast<char>(std::stoi(std::string(l.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += '\\';
      out += c;
    }
  }
  return out;
}

// Lines of a text file, '#' comment lines dropped; an empty line is kept only if keep_empty.
std::vector<std::string> read_lines(const fs::path& p, bool keep_empty) {
  std::vector<std::string> out;
  std::string all = tok_read_all(p);
  if (!all.empty() && all.back() == '\n') all.pop_back();
  std::istringstream ss(all);
  for (std::string l; std::getline(ss, l);) {
    if (!l.empty() && l[0] == '#') continue;
    if (l.empty() && !keep_empty) continue;
    out.push_back(unescape_line(l));
  }
  return out;
}

struct GoldenCase {
  std::string label;
  std::string text;
  nlohmann::json modes;  // {"special": {...}, "plain": {...}, "parse_special_only": {...}}
};

struct GoldenSet {
  std::string name;
  fs::path gguf;
  std::vector<GoldenCase> cases;
  std::string text_source_error;  // strings/prompts file disagrees with the golden texts
};

bool golden_tokenizer_set(const fs::path& d) { return fs::exists(d / "golden" / "tokens.json") && fs::exists(d / "vocab.gguf"); }

std::vector<fs::path> model_goldens(const fs::path& d) {
  std::vector<fs::path> out;
  if (!fs::exists(d / "model.gguf") || !fs::is_directory(d / "golden")) return out;
  for (const auto& e : fs::directory_iterator(d / "golden")) {
    const std::string f = e.path().filename().string();
    if (f.size() > 6 && f[0] == 'p' && f.ends_with(".json")) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) {
    return std::stoi(a.filename().string().substr(1)) < std::stoi(b.filename().string().substr(1));
  });
  return out;
}

std::vector<std::string> discover_sets() {
  std::vector<std::string> out;
  const fs::path root = fixtures_dir();
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.is_directory() && (golden_tokenizer_set(e.path()) || !model_goldens(e.path()).empty())) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

GoldenSet load_set(const std::string& name) {
  GoldenSet s;
  s.name = name;
  const fs::path d = fs::path(fixtures_dir()) / name;
  if (golden_tokenizer_set(d)) {
    s.gguf = d / "vocab.gguf";
    const auto j = nlohmann::json::parse(tok_read_all(d / "golden" / "tokens.json"));
    const auto lines = fs::exists(d / "strings.txt") ? read_lines(d / "strings.txt", true) : std::vector<std::string>{};
    const auto& cases = j.at("cases");
    if (lines.size() != cases.size())
      s.text_source_error = "strings.txt has " + std::to_string(lines.size()) + " strings, tokens.json " + std::to_string(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      GoldenCase c;
      c.label = "case " + std::to_string(i);
      c.text = from_hex(cases[i].at("text_hex").get<std::string>());
      if (i < lines.size() && lines[i] != c.text && s.text_source_error.empty())
        s.text_source_error = "strings.txt line for " + c.label + " decodes to " + to_hex(lines[i]) + ", golden text_hex " + to_hex(c.text);
      c.modes = cases[i];
      s.cases.push_back(std::move(c));
    }
  } else {
    s.gguf = d / "model.gguf";
    const auto prompts = fs::exists(d / "prompts.txt") ? read_lines(d / "prompts.txt", false) : std::vector<std::string>{};
    for (const auto& p : model_goldens(d)) {
      const auto j = nlohmann::json::parse(tok_read_all(p));
      if (!j.contains("tokenize")) continue;
      GoldenCase c;
      c.label = p.filename().string();
      c.text = from_hex(j.at("prompt_hex").get<std::string>());
      const size_t idx = static_cast<size_t>(std::stoi(c.label.substr(1)));
      if (idx < prompts.size() && prompts[idx] != c.text && s.text_source_error.empty())
        s.text_source_error = "prompts.txt line " + std::to_string(idx) + " differs from " + c.label + " prompt_hex";
      c.modes = j.at("tokenize");
      s.cases.push_back(std::move(c));
    }
  }
  return s;
}

struct Mode {
  const char* name;
  bool add_special;
  bool parse_special;
};
constexpr Mode kModes[] = {{"special", true, true}, {"plain", false, false}, {"parse_special_only", false, true}};

std::string ids_string(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

// Number of positions where the id sequences differ (plus the length difference).
size_t id_distance(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t d = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d += a[i] != b[i];
  return d;
}

class TokenizerGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerGolden, MatchesLlamaCpp) {
  if (const auto* u = strata::test::unsupported_set(GetParam()); u && u->tokenizer_error) {
    const fs::path d = fs::path(fixtures_dir()) / GetParam();
    const fs::path gguf = golden_tokenizer_set(d) ? d / "vocab.gguf" : d / "model.gguf";
    strata::test::expect_still_unsupported(*u, "tokenizer", u->tokenizer_error,
                                           [&] { Tokenizer::from_gguf(*strata::GgufModel::open(gguf.string())); });
    return;
  }
  const GoldenSet set = load_set(GetParam());
  ASSERT_FALSE(set.cases.empty()) << set.name << ": no golden tokenize cases";
  EXPECT_TRUE(set.text_source_error.empty()) << set.name << ": " << set.text_source_error;
  auto model = strata::GgufModel::open(set.gguf.string());
  auto tok = Tokenizer::from_gguf(*model);

  size_t checks = 0, failed = 0, worst_dist = 0;
  std::string worst = "none";
  int reported = 0;
  for (const auto& c : set.cases) {
    for (const Mode& m : kModes) {
      const auto& g = c.modes.at(m.name);
      const auto want = g.at("ids").get<std::vector<int32_t>>();
      const auto got = tok->encode(c.text, m.add_special, m.parse_special);
      std::string problem;
      if (got != want) problem = "ids " + ids_string(got) + " expected " + ids_string(want);
      // Pieces and detokenization of the golden ids (independent of the encoder).
      const auto& pieces = g.at("pieces_hex");
      for (size_t i = 0; i < want.size() && problem.empty(); ++i)
        if (to_hex(tok->token_to_piece(want[i], true)) != pieces.at(i).get<std::string>())
          problem = "piece of " + std::to_string(want[i]) + " is " + to_hex(tok->token_to_piece(want[i], true)) + " expected " +
                    pieces.at(i).get<std::string>();
      if (problem.empty()) {
        const std::string detok = tok->decode(want, false, true);
        if (to_hex(detok) != g.at("detok_hex").get<std::string>())
          problem = "detok " + to_hex(detok) + " expected " + g.at("detok_hex").get<std::string>();
      }
      if (problem.empty() && !tok->vocab().clean_spaces) {  // streaming adds up to the same bytes
        strata::tok::StreamDecoder sd(*tok, true);
        std::string streamed;
        for (int32_t id : want) streamed += sd.push(id);
        streamed += sd.flush();
        if (to_hex(streamed) != g.at("detok_hex").get<std::string>()) problem = "streamed detok " + to_hex(streamed);
      }
      ++checks;
      if (problem.empty()) continue;
      ++failed;
      const size_t dist = std::max<size_t>(1, id_distance(got, want));
      if (dist > worst_dist) {
        worst_dist = dist;
        worst = c.label + " [" + m.name + "] text " + to_hex(c.text) + ": " + problem;
      }
      if (reported++ < 5) ADD_FAILURE() << set.name << " " << c.label << " [" << m.name << "] text hex " << to_hex(c.text) << ": " << problem;
    }
  }
  std::printf("[ golden   ] %-24s %3zu checks (%zu texts x 3 modes), %zu failed; worst: %s\n", set.name.c_str(), checks,
              set.cases.size(), failed, failed ? worst.c_str() : "none (all exact)");
  RecordProperty("checks", static_cast<int>(checks));
  RecordProperty("failed", static_cast<int>(failed));
  EXPECT_EQ(failed, 0u) << set.name << ": worst case (most differing ids): " << worst;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Sets, TokenizerGolden, ::testing::ValuesIn(discover_sets()), param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TokenizerGolden);

TEST(TokenizerGoldenFixtures, Present) {
  const std::string root = fixtures_dir();
  if (!fs::is_directory(root)) STRATA_MISSING_FIXTURE("fixtures folder '" + root + "' (set STRATA_FIXTURES): tokenizer goldens NOT checked");
  EXPECT_FALSE(discover_sets().empty()) << "no tokenizer golden sets under " << root;
}

}  // namespace
