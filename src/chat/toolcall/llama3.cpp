// Llama 3.x: the reply is a JSON call {"name": "f", "parameters": {...}} (or "arguments"), also
// after <|python_tag|>. A bare `{` opens a call only before any other content; calls may follow
// each other (separated by whitespace). The builtin form (<|python_tag|>tool.call(...)) is content.
#include "chat/toolcall/families.h"
#include "chat/toolcall/stream_core.h"

namespace strata::toolcall::detail {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>", kBrace = "{";

class Llama3 final : public StreamCore {
 public:
  using StreamCore::StreamCore;

 private:
  std::vector<std::string_view> call_starts() const override { return {kPythonTag, kBrace}; }

  R call_step(bool final, int which) override {
    if (which == 1 && content_seen_ && !section_emitted_) return R::Fail;
    const R r = envelope_step(final, which == 0 ? kPythonTag.size() : 0);
    if (r == R::Ok && env_done_) end_section();
    return r;
  }
};

}  // namespace

std::unique_ptr<StreamParser> make_llama3(ParserOptions o) { return std::make_unique<Llama3>(std::move(o)); }

}  // namespace strata::toolcall::detail
