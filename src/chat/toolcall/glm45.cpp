// GLM-4.5 / 4.6 / 4.7: <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n...</tool_call>
// (4.7 writes no newlines). Values typed by the tool's schema as in KvArgs.
#include "chat/toolcall/families.h"
#include "chat/toolcall/stream_core.h"

namespace strata::toolcall::detail {
namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
constexpr std::string_view kNameEnds[] = {"\n", "<arg_key>", kClose};

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

class Glm45 final : public StreamCore {
 public:
  using StreamCore::StreamCore;

 private:
  enum class Phase { Header, Params, Value };
  std::vector<std::string_view> call_starts() const override { return {kOpen}; }
  void begin_section(int) override { phase_ = Phase::Header; }
  void on_finish() override {
    if (in_call_) call_args(kv_.close());
  }

  R call_step(bool final, int) override {
    if (phase_ == Phase::Header) return header(final);
    if (phase_ == Phase::Value) {
      const R r = kv_value_step(final, "</arg_value>", false);
      if (r == R::Ok && value_start_) phase_ = Phase::Params;
      return r;
    }
    Cur c{buf_, final};
    c.ws();
    std::string_view key;
    if (c.try_lit("<arg_key>")) {
      c.until("</arg_key>", key);
      c.ws();
      c.lit("<arg_value>");
      if (!c.ok()) return c.st == R::More ? R::More : close_call();
      const std::string k(trim(key));  // key points into buf_
      consume(c.p);
      call_args(kv_.key(k));
      phase_ = Phase::Value;
      return R::Ok;
    }
    if (c.try_lit(kClose)) {
      consume(c.p);
      return close_call();
    }
    if (c.st == R::More || (c.at_end() && !final)) return R::More;
    return close_call();
  }

  // The name runs to a newline, <arg_key> or </tool_call>.
  R header(bool final) {
    const std::string_view rest = std::string_view(buf_).substr(kOpen.size());
    const Scan sc = scan_markers(rest, kNameEnds);
    if (sc.which < 0 || sc.hold < sc.at) {
      if (final || rest.size() > 256 + kClose.size()) return R::Fail;
      return R::More;
    }
    const std::string_view name = trim(rest.substr(0, sc.at));
    if (name.empty() || sc.at > 256 || name.find_first_of("<>{}\"") != std::string_view::npos) return R::Fail;
    const std::string fn(name);  // name points into buf_
    consume(kOpen.size() + sc.at + (sc.which == 0 ? 1 : 0));
    start_call(fn);
    kv_.begin(find_tool(opts_.tools, fn));
    call_args(kv_.open());
    phase_ = Phase::Params;
    return R::Ok;
  }

  R close_call() {  // after </tool_call>, or on malformed text (which is then content)
    call_args(kv_.close());
    end_call();
    end_section();
    return R::Ok;
  }

  Phase phase_ = Phase::Header;
};

}  // namespace

std::unique_ptr<StreamParser> make_glm45(ParserOptions o) { return std::make_unique<Glm45>(std::move(o)); }

}  // namespace strata::toolcall::detail
