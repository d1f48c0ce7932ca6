// gpt-oss harmony: messages `<|start|>assistant<|channel|>CH<|message|>BODY<|end|>` (the prompt ends
// with `<|start|>assistant`, so the output opens with `<|channel|>`). Channel analysis is reasoning
// (content when ParserOptions::reasoning is off),
// final (and commentary without a recipient) is content; a recipient `to=functions.NAME` in the
// header (before or after <|channel|>, with ` <|constrain|>json` or ` json`) makes BODY the JSON
// arguments of a call to NAME, ended by <|call|>. A body also ends at <|return|> or at the next
// <|start|> / <|channel|>. Other recipients (built-in tools) are content.
#include "chat/toolcall/families.h"
#include "chat/toolcall/stream_core.h"

namespace strata::toolcall::detail {
namespace {

constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>";
constexpr std::string_view kHeaderStarts[] = {kStart, kChannel};

class Harmony final : public StreamCore {
 public:
  using StreamCore::StreamCore;

 private:
  enum class Body { Outside, Content, Reasoning, Args };
  std::vector<std::string_view> call_starts() const override { return {}; }
  R call_step(bool, int) override { return R::Fail; }
  // Cut off: what the steps hold is a header not yet whole or the start of a marker.
  void cut_rest() override { buf_.clear(); }

  bool step(bool final) override {
    if (buf_.empty()) return false;
    if (header_) return header(final);
    if (body_ == Body::Outside) return outside(final);
    return body(final);
  }

  bool outside(bool final) {
    const Scan sc = scan_markers(buf_, kHeaderStarts);
    if (sc.which >= 0 && (final || sc.hold >= sc.at)) {
      emit_content(std::string_view(buf_).substr(0, sc.at));
      consume(sc.at);
      header_ = true;
      return true;
    }
    const size_t safe = final ? buf_.size() : std::min(sc.hold, sc.at);
    emit_content(std::string_view(buf_).substr(0, safe));
    consume(safe);
    return safe > 0;
  }

  bool header(bool final) {
    constexpr size_t kMaxHeader = 512;  // <|message|> must start within this many bytes
    const size_t at = buf_.find(kMessage);
    if (at == std::string::npos || at > kMaxHeader) {
      if (!final && at == std::string::npos && buf_.size() <= kMaxHeader + kMessage.size()) return false;
      header_ = false;  // not a harmony header: content
      emit_content(std::string_view(buf_).substr(0, 1));
      consume(1);
      return true;
    }
    const std::string_view h = std::string_view(buf_).substr(0, at);
    std::string_view channel, recipient;
    if (const size_t c = h.find(kChannel); c != std::string_view::npos) {
      channel = h.substr(c + kChannel.size());
      channel = channel.substr(0, channel.find_first_of(" \n<"));
    }
    if (const size_t t = h.find("to="); t != std::string_view::npos) {
      recipient = h.substr(t + 3);
      recipient = recipient.substr(0, recipient.find_first_of(" \n<"));
    }
    if (recipient.substr(0, 10) == "functions." && recipient.size() > 10 && !opts_.tools.empty()) {
      start_call(recipient.substr(10));
      body_ = Body::Args;
    } else if (channel == "analysis" && recipient.empty() && opts_.reasoning) {
      body_ = Body::Reasoning;
    } else {
      body_ = Body::Content;
    }
    consume(at + kMessage.size());
    header_ = false;
    return true;
  }

  bool body(bool final) {
    static constexpr std::string_view kEnds[] = {"<|end|>", "<|call|>", "<|return|>", kStart, kChannel};
    const Scan sc = scan_markers(buf_, kEnds);
    const bool found = sc.which >= 0 && (final || sc.hold >= sc.at);
    const size_t n = found ? sc.at : final ? buf_.size() : std::min(sc.hold, sc.at);
    const std::string_view text = std::string_view(buf_).substr(0, n);
    if (body_ == Body::Args) call_args(text);
    else if (body_ == Body::Reasoning) emit_text(Event::Kind::Reasoning, text);
    else emit_content(text);
    consume(n);
    if (!found) return n > 0;
    if (sc.which <= 2) consume(kEnds[sc.which].size());  // an end token; <|start|> / <|channel|> open the next header
    end_call();
    body_ = Body::Outside;
    return true;
  }

  bool header_ = true;  // the output opens with a header (the prompt ended with <|start|>assistant)
  Body body_ = Body::Outside;
};

}  // namespace

std::unique_ptr<StreamParser> make_harmony(ParserOptions o) { return std::make_unique<Harmony>(std::move(o)); }

}  // namespace strata::toolcall::detail
