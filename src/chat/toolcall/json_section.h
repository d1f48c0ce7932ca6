#pragma once
// A section of calls with JSON arguments between special tokens (DeepSeek V3.1, Kimi K2):
//   SECTION_BEGIN (CALL_BEGIN header ARGS_BEGIN {json} CALL_END)* SECTION_END
// The family gives the markers and how a header names the function. A call may also open without
// the section marker. Text between the arguments and CALL_END is dropped. Internal to chat/toolcall/.
#include <string>
#include <string_view>

#include "chat/toolcall/stream_core.h"

namespace strata::toolcall::detail {

struct SectionSyntax {
  std::string_view section_begin, call_begin, args_begin, call_end, section_end;
};

class JsonSection : public StreamCore {
 public:
  JsonSection(ParserOptions opts, SectionSyntax syntax) : StreamCore(std::move(opts)), syn_(syntax) {}

 protected:
  // The function name from the header text between call_begin and args_begin, and in `c` the
  // text that follows args_begin before the JSON (empty name: not a call).
  virtual std::string name_of(std::string_view header, Cur& c) const = 0;

 private:
  enum class Phase { Call, Args, CallEnd };
  std::vector<std::string_view> call_starts() const override { return {syn_.section_begin, syn_.call_begin}; }
  void begin_section(int) override { phase_ = Phase::Call; }

  R call_step(bool final, int which) override {
    if (phase_ == Phase::Args) {
      const R r = args_step(final);
      if (r == R::Ok && args_done_) phase_ = Phase::CallEnd;
      return r;
    }
    if (phase_ == Phase::CallEnd) return call_end(final);
    Cur c{buf_, final, !section_emitted_ && which == 0 ? syn_.section_begin.size() : 0};
    c.ws();
    if (section_emitted_ && c.try_lit(syn_.section_end)) {
      consume(c.p);
      end_section();
      return R::Ok;
    }
    std::string_view header;
    c.lit(syn_.call_begin);
    c.until(syn_.args_begin, header);
    const std::string name = c.ok() ? name_of(header, c) : std::string();
    if (c.ok() && name.empty()) c.st = R::Fail;
    if (c.st == R::More) return R::More;
    if (c.st == R::Fail) {
      if (!section_emitted_) return R::Fail;
      end_section();  // what follows the calls is content
      return R::Ok;
    }
    consume(c.p);
    start_call(name);
    reset_call_state();
    phase_ = Phase::Args;
    return R::Ok;
  }

  R call_end(bool final) {
    const Scan sc = scan_markers(buf_, {&syn_.call_end, 1});
    if (sc.which >= 0) {
      consume(sc.at + syn_.call_end.size());
      end_call();
      phase_ = Phase::Call;
      return R::Ok;
    }
    const size_t drop = final ? buf_.size() : sc.hold;
    consume(drop);
    if (final) end_call();
    return drop > 0 || final ? R::Ok : R::More;
  }

  SectionSyntax syn_;
  Phase phase_ = Phase::Call;
};

}  // namespace strata::toolcall::detail
