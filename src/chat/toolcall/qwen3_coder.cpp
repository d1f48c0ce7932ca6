// Qwen3-Coder / Qwen3.5 XML calls:
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// Values are typed by the tool's schema (strings raw, others JSON; see KvArgs); one newline after
// <parameter=KEY> and one before </parameter> belong to the syntax.
#include "chat/toolcall/families.h"
#include "chat/toolcall/stream_core.h"

namespace strata::toolcall::detail {
namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";

class Qwen3Coder final : public StreamCore {
 public:
  using StreamCore::StreamCore;

 private:
  enum class Phase { Header, Params, Value, Close };
  std::vector<std::string_view> call_starts() const override { return {kOpen}; }
  void begin_section(int) override { phase_ = Phase::Header; }
  void on_finish() override {
    if (in_call_ && phase_ != Phase::Close) call_args(kv_.close());
  }

  R call_step(bool final, int) override {
    switch (phase_) {
      case Phase::Header: return header(final);
      case Phase::Params: return params(final);
      case Phase::Value: {
        const R r = kv_value_step(final, "</parameter>", true);
        if (r == R::Ok && value_start_) phase_ = Phase::Params;
        return r;
      }
      case Phase::Close: break;
    }
    Cur c{buf_, final};
    c.ws();
    c.try_lit(kClose);
    if (c.st == R::More) return R::More;
    consume(c.p);
    end_section();
    return R::Ok;
  }

  R header(bool final) {
    Cur c{buf_, final, kOpen.size()};
    std::string_view name;
    c.ws();
    c.lit("<function=");
    c.until(">", name);
    if (c.ok() && (name.empty() || name.find_first_of("<\n") != std::string_view::npos)) c.st = R::Fail;
    if (!c.ok()) return c.st;
    const std::string fn(name);  // name points into buf_
    consume(c.p);
    start_call(fn);
    kv_.begin(find_tool(opts_.tools, fn));
    call_args(kv_.open());
    phase_ = Phase::Params;
    return R::Ok;
  }

  R params(bool final) {
    Cur c{buf_, final};
    c.ws();
    std::string_view key;
    if (c.try_lit("<parameter=")) {
      c.until(">", key);
      if (!c.ok()) return c.st == R::More ? R::More : give_up();
      const std::string k(key);  // key points into buf_
      consume(c.p);
      call_args(kv_.key(k));
      phase_ = Phase::Value;
      return R::Ok;
    }
    if (c.try_lit("</function>")) {
      consume(c.p);
      call_args(kv_.close());
      end_call();
      phase_ = Phase::Close;
      return R::Ok;
    }
    if (c.st == R::More || (c.at_end() && !final)) return R::More;
    return give_up();
  }

  R give_up() {  // malformed inside the call: close it, the rest is content
    call_args(kv_.close());
    end_call();
    end_section();
    return R::Ok;
  }

  Phase phase_ = Phase::Header;
};

}  // namespace

std::unique_ptr<StreamParser> make_qwen3_coder(ParserOptions o) { return std::make_unique<Qwen3Coder>(std::move(o)); }

}  // namespace strata::toolcall::detail
