// MiniMax-M2: <minimax:tool_call>\n<invoke name="f">\n<parameter name="k">v</parameter>\n</invoke>\n
// ...</minimax:tool_call>: several invokes (parallel calls) in one section. Values typed as in KvArgs.
#include "chat/toolcall/families.h"
#include "chat/toolcall/stream_core.h"

namespace strata::toolcall::detail {
namespace {

constexpr std::string_view kOpen = "<minimax:tool_call>", kClose = "</minimax:tool_call>";

class MinimaxM2 final : public StreamCore {
 public:
  using StreamCore::StreamCore;

 private:
  enum class Phase { Invoke, Params, Value };
  std::vector<std::string_view> call_starts() const override { return {kOpen}; }
  void begin_section(int) override { phase_ = Phase::Invoke; }
  void on_finish() override {
    if (in_call_) call_args(kv_.close());
  }

  R call_step(bool final, int) override {
    if (phase_ == Phase::Invoke) return invoke(final);
    if (phase_ == Phase::Value) {
      const R r = kv_value_step(final, "</parameter>", false);
      if (r == R::Ok && value_start_) phase_ = Phase::Params;
      return r;
    }
    Cur c{buf_, final};
    c.ws();
    std::string_view key;
    if (c.try_lit("<parameter name=\"")) {
      c.until("\"", key);
      c.lit(">");
      if (!c.ok()) return c.st == R::More ? R::More : give_up();
      const std::string k(key);  // key points into buf_
      consume(c.p);
      call_args(kv_.key(k));
      phase_ = Phase::Value;
      return R::Ok;
    }
    if (c.try_lit("</invoke>")) {
      consume(c.p);
      call_args(kv_.close());
      end_call();
      phase_ = Phase::Invoke;
      return R::Ok;
    }
    if (c.st == R::More || (c.at_end() && !final)) return R::More;
    return give_up();
  }

  R invoke(bool final) {
    Cur c{buf_, final, section_emitted_ ? 0 : kOpen.size()};
    c.ws();
    std::string_view name;
    if (c.try_lit("<invoke name=\"")) {
      c.until("\"", name);
      c.lit(">");
      if (c.ok() && name.empty()) c.st = R::Fail;
      if (c.ok()) {
        const std::string fn(name);  // name points into buf_
        consume(c.p);
        start_call(fn);
        kv_.begin(find_tool(opts_.tools, fn));
        call_args(kv_.open());
        phase_ = Phase::Params;
        return R::Ok;
      }
    } else if (section_emitted_ && c.try_lit(kClose)) {
      consume(c.p);
      end_section();
      return R::Ok;
    }
    if (c.st == R::More || (c.ok() && c.at_end() && !final)) return R::More;
    if (!section_emitted_) return R::Fail;
    end_section();  // text that is not an invoke ends the section; it is content
    return R::Ok;
  }

  R give_up() {  // malformed inside the call: close it, the rest is content
    call_args(kv_.close());
    end_call();
    end_section();
    return R::Ok;
  }

  Phase phase_ = Phase::Invoke;
};

}  // namespace

std::unique_ptr<StreamParser> make_minimax_m2(ParserOptions o) { return std::make_unique<MinimaxM2>(std::move(o)); }

}  // namespace strata::toolcall::detail
