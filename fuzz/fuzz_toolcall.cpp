// libFuzzer target for the tool-call parsers (src/chat/toolcall/). The first byte picks the format
// and options, the second seeds the chunking; the rest is model output, fed in chunks of 1..16
// bytes. Checked: nothing throws out of feed/finish; events are well formed (calls numbered from 0,
// arguments only inside their call); folding the chunked events gives exactly parse_all of the same
// text, so each call's CallArgs fragments concatenate to its final arguments (the prefix rule).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/toolcall/toolcall.h"

namespace {

using namespace strata::toolcall;

std::vector<ToolSpec> fuzz_tools() {
  return {{"get_weather", "",
           nlohmann::json::parse(R"({"type":"object","properties":{"location":{"type":"string"}}})")},
          {"search", "", nlohmann::json::parse(R"({"type":"object","properties":{"query":{"type":"string"},
             "limit":{"type":"integer"}}})")}};
}

void check_well_formed(const std::vector<Event>& events) {
  int open = -1, next = 0;
  for (const auto& e : events) {
    if (e.kind == Event::Kind::CallStart) {
      if (open != -1 || e.index != next) __builtin_trap();
      open = next++;
    } else if (e.kind == Event::Kind::CallArgs) {
      if (e.index != open || e.text.empty()) __builtin_trap();
    } else if (e.kind == Event::Kind::CallEnd) {
      if (e.index != open) __builtin_trap();
      open = -1;
    } else if (e.text.empty()) {
      __builtin_trap();
    }
  }
  if (open != -1) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0];
  uint32_t seed = data[1] | 1u;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  const auto format = static_cast<Format>(mode % 9);
  ParserOptions opts;
  opts.reasoning = (mode & 0x10) == 0;
  opts.thinking_open = (mode & 0x20) != 0;
  if ((mode & 0x40) == 0) opts.tools = fuzz_tools();

  const Parsed whole = parse_all(format, opts, text);  // an exception here aborts: a finding
  auto parser = StreamParser::make(format, opts);
  std::vector<Event> events;
  for (size_t i = 0; i < text.size();) {
    seed = seed * 1103515245u + 12345u;
    const size_t n = std::min<size_t>(text.size() - i, 1 + (seed >> 16) % 16);
    parser->feed(text.substr(i, n), events);
    i += n;
  }
  parser->finish(events);
  check_well_formed(events);
  const Parsed got = fold(events);
  if (got.content != whole.content || got.reasoning != whole.reasoning || got.calls.size() != whole.calls.size()) {
    __builtin_trap();
  }
  for (size_t i = 0; i < got.calls.size(); ++i) {
    if (got.calls[i].id != whole.calls[i].id || got.calls[i].name != whole.calls[i].name ||
        got.calls[i].arguments != whole.calls[i].arguments) {
      __builtin_trap();
    }
  }
  return 0;
}
