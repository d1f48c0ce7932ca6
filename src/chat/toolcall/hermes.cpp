// Hermes / Qwen3: <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, one block per call.
#include "chat/toolcall/families.h"
#include "chat/toolcall/stream_core.h"

namespace strata::toolcall::detail {
namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";

class Hermes final : public StreamCore {
 public:
  using StreamCore::StreamCore;

 private:
  std::vector<std::string_view> call_starts() const override { return {kOpen}; }
  void begin_section(int) override { closing_ = false; }

  R call_step(bool final, int) override {
    if (!closing_) {
      const R r = envelope_step(final, kOpen.size());
      if (r == R::Ok && env_done_) closing_ = true;
      return r;
    }
    Cur c{buf_, final};
    c.ws();
    c.try_lit(kClose);
    if (c.st == R::More) return R::More;
    consume(c.p);
    end_section();
    return R::Ok;
  }

  bool closing_ = false;  // the envelope is done: </tool_call> next
};

}  // namespace

std::unique_ptr<StreamParser> make_hermes(ParserOptions o) { return std::make_unique<Hermes>(std::move(o)); }

}  // namespace strata::toolcall::detail
