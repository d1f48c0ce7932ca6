// strata tokenize -m MODEL (-f FILE | -p TEXT) [--json] [--no-add-special] [--no-parse-special]
#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string file;
  std::string prompt;
  bool json = false;
  bool no_add_special = false;
  bool no_parse_special = false;
};

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '{}'", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("cannot read '{}'", path);
  return ss.str();
}

// Printable form of a piece: printable ASCII as is, \n \t \r \\ \" escaped, other bytes as \xHH
// (valid multi-byte UTF-8 is kept).
std::string escape_piece(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c >= 0x20 && c < 0x7F) out += static_cast<char>(c);
    else {
      const size_t len = c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      bool ok = c >= 0xC0 && c < 0xF8 && i + len <= s.size();
      for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<uint8_t>(s[i + k]) & 0xC0) == 0x80;
      if (ok) {
        out.append(s.substr(i, len));
        i += len - 1;
      } else {
        out += fmt::format("\\x{:02x}", c);
      }
    }
  }
  return out;
}

int run_tokenize(const TokenizeOptions& o) {
  const std::string text = o.file.empty() ? o.prompt : read_file_bytes(o.file);
  auto model = GgufModel::open(o.model);
  auto tok = tok::Tokenizer::from_gguf(*model);
  const auto ids = tok->encode(text, !o.no_add_special, !o.no_parse_special);
  if (o.json) {
    std::string line = "{\"ids\": [";
    for (size_t i = 0; i < ids.size(); ++i) line += fmt::format("{}{}", i ? ", " : "", ids[i]);
    line += "]}\n";
    fmt::print("{}", line);
    return 0;
  }
  for (int32_t id : ids) fmt::print("{:>8} \"{}\"\n", id, escape_piece(tok->token_to_piece(id, true)));
  fmt::print("{} tokens\n", ids.size());
  return 0;
}

}  // namespace

Command add_tokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  auto* sub = app.add_subcommand("tokenize", "Tokenize text with a GGUF model's tokenizer (as llama.cpp's llama_tokenize)");
  sub->add_option("-m,--model", o->model, "GGUF file (first part of a split model)")->required();
  auto* f = sub->add_option("-f,--file", o->file, "File whose bytes are tokenized as is");
  auto* p = sub->add_option("-p,--prompt", o->prompt, "Text to tokenize");
  f->excludes(p);
  p->excludes(f);
  sub->add_flag("--json", o->json, "Print {\"ids\": [...]} on one line");
  sub->add_flag("--no-add-special", o->no_add_special, "Do not add BOS/EOS");
  sub->add_flag("--no-parse-special", o->no_parse_special, "Tokenize control tokens in the text as plain text");
  sub->callback([f, p] {
    if (f->count() == 0 && p->count() == 0) throw CLI::RequiredError("-f FILE or -p TEXT");
  });
  return {sub, [o] { return run_tokenize(*o); }};
}

}  // namespace strata::cli
