// libFuzzer target for src/grammar: the first byte picks the input kind, the rest is TEXT, or
// TEXT NUL STEPS.
//   even: TEXT is GBNF; when it parses, a matcher over a byte vocabulary takes STEPS (apply, then
//         accept each byte; the mask and accept must agree), then accept_bytes(STEPS).
//   odd:  TEXT is a JSON schema; when it converts, the generated GBNF must parse (only the size
//         limit may refuse it) and a matcher takes STEPS.
// GrammarError is the expected way to refuse input; anything else (crash, other exception, hang,
// unbounded memory) is a finding.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace g = strata::grammar;

namespace {

const std::shared_ptr<const g::VocabIndex>& byte_vocab() {
  static const std::shared_ptr<const g::VocabIndex> v = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
    bytes.push_back("");
    return std::make_shared<const g::VocabIndex>(std::move(bytes), std::vector<int32_t>{256});
  }();
  return v;
}

void walk(const std::shared_ptr<const g::Grammar>& grammar, std::string_view steps) {
  try {
    g::Matcher m(grammar, byte_vocab());
    std::vector<float> logits(257);
    for (size_t i = 0; i < steps.size() && i < 32; ++i) {
      m.apply(logits.data());
      const auto t = static_cast<unsigned char>(steps[i]);
      const bool allowed = logits[t] == 0.0f;
      if (m.accept(t) != allowed) std::abort();  // the mask and accept() must agree
      std::fill(logits.begin(), logits.end(), 0.0f);
      if (m.must_end()) break;
    }
    m.accept_bytes(steps);
    (void)m.can_end();
  } catch (const g::GrammarError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1), steps;
  if (const size_t nul = rest.find('\0'); nul != std::string_view::npos) {
    steps = rest.substr(nul + 1);
    rest = rest.substr(0, nul);
  }
  if (data[0] % 2 == 0) {
    std::shared_ptr<const g::Grammar> grammar;
    try {
      grammar = g::parse_gbnf(rest);
    } catch (const g::GrammarError&) {
      return 0;
    }
    walk(grammar, steps);
    return 0;
  }
  const nlohmann::json schema = nlohmann::json::parse(rest, nullptr, false);
  if (schema.is_discarded()) return 0;
  std::string gbnf;
  try {
    gbnf = g::json_schema_to_gbnf(schema);
  } catch (const g::GrammarError&) {
    return 0;
  }
  std::shared_ptr<const g::Grammar> grammar;
  try {
    grammar = g::parse_gbnf(gbnf);
  } catch (const g::GrammarError& e) {
    if (std::strstr(e.what(), "grammar too large")) return 0;
    std::abort();  // the converter wrote a grammar its own parser refuses
  }
  walk(grammar, steps);
  return 0;
}
