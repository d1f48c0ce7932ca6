// The generic JSON format (templates that do not mention tools; the system prompt from
// generic_tools_prompt asks for it): the reply is one JSON object,
//   {"tool_call": {"name": "f", "arguments": {...}}}, {"tool_calls": [{...}, ...]} or {"response": "..."}.
// A reply opening with `{` is held until the object closes, then parsed whole: calls, or the
// response string as content; anything else (other JSON, text after the object) is content.
// Cut off (finish_cut), the object is closed as far as it parses: the calls whose name is whole
// (the last one cut, its arguments closed as far as they parse), or the response so far.
#include "chat/toolcall/families.h"
#include "chat/toolcall/stream_core.h"

namespace strata::toolcall::detail {
namespace {

std::optional<std::pair<std::string, std::string>> call_of(const nlohmann::json& c) {
  if (!c.is_object()) return std::nullopt;
  const auto name = c.find("name");
  if (name == c.end() || !name->is_string()) return std::nullopt;
  std::string args = "{}";
  if (const auto a = c.find("arguments"); a != c.end()) args = a->is_string() ? a->get<std::string>() : dump_json(*a);
  return std::make_pair(name->get<std::string>(), args);
}

// The call objects of a reply object (none when it has neither key).
nlohmann::json calls_of(const nlohmann::json& j) {
  if (!j.is_object()) return nlohmann::json::array();
  if (const auto one = j.find("tool_call"); one != j.end()) return nlohmann::json::array({*one});
  if (const auto many = j.find("tool_calls"); many != j.end() && many->is_array()) return *many;
  return nlohmann::json::array();
}

class Generic final : public StreamCore {
 public:
  using StreamCore::StreamCore;

 private:
  void cut_rest() override {
    if (mode_ != Mode::Call) return StreamCore::cut_rest();
    // Closed without the strings cut off: which names are whole; with them: the arguments and response so far.
    const nlohmann::json whole = close_partial_json(buf_, /*close_strings=*/false);
    const nlohmann::json loose = close_partial_json(buf_, /*close_strings=*/true);
    buf_.clear();
    end_section();
    content_seen_ = true;
    if (!loose.is_object()) return;
    if (const auto r = loose.find("response"); r != loose.end() && r->is_string()) {
      held_ws_.clear();
      emit_content(r->get<std::string>());
      return;
    }
    const nlohmann::json names = calls_of(whole), calls = calls_of(loose);
    for (size_t i = 0; i < names.size() && i < calls.size(); ++i) {
      const auto c = call_of(calls[i]);
      if (!names[i].is_object() || !names[i].contains("name") || !c) break;  // the name was cut off
      cutting_ = i + 1 == calls.size();  // the calls before the last one are whole
      start_call(c->first);
      call_args(c->second);
      end_call();
    }
    cutting_ = true;
  }

  std::vector<std::string_view> call_starts() const override { return {"{"}; }

  R call_step(bool final, int) override {
    if (content_seen_) return R::Fail;  // only a reply that is one JSON object
    scanned_ += bal_.consume(std::string_view(buf_).substr(scanned_));
    if (!bal_.done) return final ? R::Fail : R::More;
    const auto j = parse_json(std::string_view(buf_).substr(0, scanned_));
    if (!j || !j->is_object()) return R::Fail;
    std::vector<std::pair<std::string, std::string>> calls;
    if (const auto one = j->find("tool_call"); one != j->end()) {
      const auto c = call_of(*one);
      if (!c) return R::Fail;
      calls.push_back(*c);
    } else if (const auto many = j->find("tool_calls"); many != j->end() && many->is_array()) {
      for (const auto& item : *many) {
        const auto c = call_of(item);
        if (!c) return R::Fail;
        calls.push_back(*c);
      }
    } else if (const auto r = j->find("response"); r != j->end() && r->is_string()) {
      consume(scanned_);
      end_section();
      held_ws_.clear();  // whitespace before the object is not part of the answer
      emit_content(r->get<std::string>());
      content_seen_ = true;
      return R::Ok;
    } else {
      return R::Fail;
    }
    consume(scanned_);
    for (const auto& [name, args] : calls) {
      start_call(name);
      call_args(args);
      end_call();
    }
    end_section();
    content_seen_ = true;  // one object per reply: what follows is content
    return R::Ok;
  }
};

}  // namespace

std::unique_ptr<StreamParser> make_generic(ParserOptions o) { return std::make_unique<Generic>(std::move(o)); }

}  // namespace strata::toolcall::detail
