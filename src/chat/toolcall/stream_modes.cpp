// StreamCore: the content and reasoning modes, call events, and the call pieces several families
// share (JSON arguments, the {"name", "arguments"} envelope, key/value values). See stream_core.h.
#include <string>

#include "chat/toolcall/stream_core.h"

namespace strata::toolcall::detail {

StreamCore::StreamCore(ParserOptions opts) : opts_(std::move(opts)) {
  if (opts_.reasoning && opts_.thinking_open) {
    mode_ = Mode::Reasoning;
    skip_ws_ = true;
  }
}

void StreamCore::feed(std::string_view text, std::vector<Event>& out) {
  out_ = &out;
  try {
    buf_.append(text);
    while (step(false)) {
    }
  } catch (const std::exception&) {  // only allocation failures can get here: keep the text as content
    emit_text(Event::Kind::Content, buf_);
    buf_.clear();
  }
  out_ = nullptr;
}

void StreamCore::finish(std::vector<Event>& out) {
  out_ = &out;
  try {
    while (step(true)) {
    }
    on_finish();
    if (in_call_) end_call();
    if (mode_ == Mode::Reasoning) emit_text(Event::Kind::Reasoning, held_rws_);
    if (!buf_.empty() && mode_ != Mode::Call) emit_content(buf_);
    emit_text(Event::Kind::Content, held_ws_);
  } catch (const std::exception&) {
  }
  buf_.clear();
  held_ws_.clear();
  held_rws_.clear();
  out_ = nullptr;
}

void StreamCore::finish_cut(std::vector<Event>& out) {
  out_ = &out;
  try {
    while (step(false)) {
    }
    cutting_ = true;
    cut_rest();
  } catch (const std::exception&) {  // allocation failures only: drop what was held
    buf_.clear();
  }
  out_ = nullptr;
  finish(out);
}

void StreamCore::cut_rest() {
  if (mode_ == Mode::Call) {
    while (mode_ == Mode::Call && step(true)) {
    }
    buf_.clear();
    return;
  }
  // What is held is the start of a marker (reasoning's close, or in content a call opener or <think>).
  std::vector<std::string_view> markers;
  if (mode_ == Mode::Reasoning) markers.push_back(think_close_);
  if (mode_ == Mode::Content) markers = content_markers_;
  for (const std::string_view m : markers) {
    if (!buf_.empty() && m.size() > buf_.size() && m.substr(0, buf_.size()) == buf_) {
      buf_.clear();
      return;
    }
  }
}

bool StreamCore::step(bool final) {
  if (skip_ws_) {
    size_t n = 0;
    while (n < buf_.size() && is_ws(buf_[n])) ++n;
    consume(n);
    if (buf_.empty()) return false;
    skip_ws_ = false;
  }
  if (buf_.empty()) return false;
  switch (mode_) {
    case Mode::Content: return content_step(final);
    case Mode::Reasoning: return reasoning_step(final);
    case Mode::Call: break;
  }
  const R r = call_step(final, section_marker_);
  if (r == R::Ok) return true;
  if (r == R::More) return false;
  if (cutting_) {  // the call the output was cut in does not parse any further: drop the rest (finish ends the call)
    buf_.clear();
    end_section();
    return false;
  }
  if (section_emitted_) {  // a family gave up after its calls: the rest is content
    if (in_call_) end_call();
    end_section();
    return true;
  }
  // Not a call: the opener is content, the text after it is scanned again.
  const std::string_view opener = call_starts()[section_marker_];
  mode_ = Mode::Content;
  reset_call_state();
  emit_content(std::string_view(buf_).substr(0, std::min(opener.size(), buf_.size())));
  consume(opener.size());
  return true;
}

bool StreamCore::content_step(bool final) {
  if (!markers_ready_) {  // built once: think_open_, then the call openers
    if (opts_.reasoning) content_markers_.push_back(think_open_);
    if (!opts_.tools.empty()) {
      for (const auto m : call_starts()) content_markers_.push_back(m);
    }
    markers_ready_ = true;
  }
  const size_t first_call = opts_.reasoning ? 1 : 0;
  const Scan sc = scan_markers(buf_, content_markers_);
  if (sc.which >= 0 && (final || sc.hold >= sc.at)) {
    emit_content(std::string_view(buf_).substr(0, sc.at));
    if (static_cast<size_t>(sc.which) < first_call) {
      consume(sc.at + think_open_.size());
      mode_ = Mode::Reasoning;
      skip_ws_ = true;
    } else {
      consume(sc.at);
      mode_ = Mode::Call;
      section_marker_ = sc.which - static_cast<int>(first_call);
      section_emitted_ = false;
      reset_call_state();
      begin_section(section_marker_);
    }
    return true;
  }
  const size_t safe = final ? buf_.size() : std::min(sc.hold, sc.at);
  if (safe == 0) return false;
  emit_content(std::string_view(buf_).substr(0, safe));
  consume(safe);
  return true;
}

bool StreamCore::reasoning_step(bool final) {
  const Scan sc = scan_markers(buf_, {&think_close_, 1});
  if (sc.which >= 0) {
    emit_reasoning(std::string_view(buf_).substr(0, sc.at));
    held_rws_.clear();
    consume(sc.at + think_close_.size());
    mode_ = Mode::Content;
    skip_ws_ = true;
    return true;
  }
  const size_t safe = final ? buf_.size() : sc.hold;
  if (safe == 0) return false;
  emit_reasoning(std::string_view(buf_).substr(0, safe));
  consume(safe);
  return true;
}

void StreamCore::end_section() {
  mode_ = Mode::Content;
  skip_ws_ = true;
  reset_call_state();
}

void StreamCore::reset_call_state() {
  args_phase_ = ArgsPhase::Start;
  args_done_ = false;
  bal_ = JsonBalance{};
  env_phase_ = EnvPhase::Header;
  env_done_ = false;
  scanned_ = 0;
  value_start_ = true;
}

// ---- events

void StreamCore::emit_text(Event::Kind kind, std::string_view text) {
  if (text.empty() || out_ == nullptr) return;
  Event e;
  e.kind = kind;
  e.index = calls_;
  e.text = std::string(text);
  out_->push_back(std::move(e));
}

// Whitespace at the end of content is held: a call that follows drops it.
void StreamCore::emit_content(std::string_view text) {
  size_t e = text.size();
  while (e > 0 && is_ws(text[e - 1])) --e;
  if (e == 0) {
    held_ws_.append(text);
    return;
  }
  content_seen_ = true;
  std::string t = std::move(held_ws_);
  t.append(text.substr(0, e));
  emit_text(Event::Kind::Content, t);
  held_ws_ = std::string(text.substr(e));
}

void StreamCore::emit_reasoning(std::string_view text) {
  size_t e = text.size();
  while (e > 0 && is_ws(text[e - 1])) --e;
  if (e == 0) {
    held_rws_.append(text);
    return;
  }
  std::string t = std::move(held_rws_);
  t.append(text.substr(0, e));
  emit_text(Event::Kind::Reasoning, t);
  held_rws_ = std::string(text.substr(e));
}

void StreamCore::start_call(std::string_view name) {
  if (in_call_) end_call();
  held_ws_.clear();
  Event e;
  e.kind = Event::Kind::CallStart;
  e.index = calls_;
  e.id = opts_.id_prefix + std::to_string(calls_);
  e.name = std::string(name);
  if (out_ != nullptr) out_->push_back(std::move(e));
  in_call_ = true;
  section_emitted_ = true;
}

void StreamCore::call_args(std::string_view fragment) {
  if (!in_call_ || fragment.empty() || out_ == nullptr) return;
  Event e;
  e.kind = Event::Kind::CallArgs;
  e.index = calls_;
  e.text = std::string(fragment);
  out_->push_back(std::move(e));
}

void StreamCore::end_call() {
  if (!in_call_) return;
  Event e;
  e.kind = Event::Kind::CallEnd;
  e.index = calls_;
  e.cut = cutting_;
  if (out_ != nullptr) out_->push_back(std::move(e));
  in_call_ = false;
  ++calls_;
}

// ---- shared call pieces

R StreamCore::args_step(bool final) {
  if (args_phase_ == ArgsPhase::Start) {
    size_t n = 0;
    while (n < buf_.size() && is_ws(buf_[n])) ++n;
    consume(n);
    if (buf_.empty()) return final ? (args_done_ = true, R::Ok) : R::More;
    args_phase_ = buf_[0] == '{' ? ArgsPhase::Object : ArgsPhase::Value;
    bal_ = JsonBalance{};
    scanned_ = 0;
  }
  if (args_phase_ == ArgsPhase::Object) {
    const size_t n = bal_.consume(buf_);
    call_args(std::string_view(buf_).substr(0, n));
    consume(n);
    args_done_ = bal_.done || final;
    return n > 0 || args_done_ ? R::Ok : R::More;
  }
  // Another value, taken whole: a string or array is balanced incrementally (scanned_ bytes so far).
  size_t end = 0;
  if (buf_[0] == '"' || buf_[0] == '[') {
    scanned_ += bal_.consume(std::string_view(buf_).substr(scanned_));
    if (!bal_.done && !final) return R::More;
    end = scanned_;
  } else {
    Cur c{buf_, final};
    std::string_view raw;
    c.jvalue(raw);
    if (c.st == R::More) return R::More;
    end = c.ok() ? c.p : 0;  // not a JSON value: empty arguments, the rest is dropped with the envelope's
  }
  const std::string_view raw = std::string_view(buf_).substr(0, end);
  const auto j = parse_json(raw);
  const auto inner = j && j->is_string() ? parse_json(j->get<std::string>()) : std::nullopt;
  call_args(inner && inner->is_object() ? j->get<std::string>() : std::string(raw));
  consume(end);
  args_done_ = true;
  return R::Ok;
}

namespace {

constexpr size_t kMaxHeader = 4096;  // {"name": ..., "arguments": must fit in this many bytes to stream

bool is_args_key(std::string_view k) { return k == "arguments" || k == "parameters"; }

// The whole envelope as one call, when its keys are not in the streamable order.
std::optional<std::pair<std::string, std::string>> whole_envelope(std::string_view raw) {
  const auto j = parse_json(raw);
  if (!j || !j->is_object()) return std::nullopt;
  const auto name = j->find("name");
  if (name == j->end() || !name->is_string()) return std::nullopt;
  for (const char* key : {"arguments", "parameters"}) {
    const auto args = j->find(key);
    if (args == j->end()) continue;
    return std::make_pair(name->get<std::string>(), args->is_string() ? args->get<std::string>() : dump_json(*args));
  }
  return std::make_pair(name->get<std::string>(), std::string("{}"));
}

}  // namespace

R StreamCore::envelope_step(bool final, size_t skip) {
  if (env_phase_ == EnvPhase::Header) {
    Cur c{buf_, final, skip};
    c.ws();
    const size_t open = c.p;
    c.lit("{");
    c.ws();
    Cur f = c;
    std::string name, key;
    f.lit("\"name\"");
    f.ws();
    f.lit(":");
    f.ws();
    f.jstring(name);
    f.ws();
    f.lit(",");
    f.ws();
    f.jstring(key);
    if (f.ok() && !is_args_key(key)) f.st = R::Fail;
    f.ws();
    f.lit(":");
    f.ws();
    if (f.ok() && f.at_end()) f.more();
    if (f.p > skip + kMaxHeader || (f.st == R::More && buf_.size() > skip + kMaxHeader)) f.st = R::Fail;
    if (f.ok()) {
      consume(f.p);
      start_call(name);
      env_phase_ = EnvPhase::Args;
      return R::Ok;
    }
    if (f.st == R::More || c.st != R::Ok) return c.st != R::Ok ? c.st : R::More;
    // Keys in another order: the whole object, balanced incrementally from `open`.
    if (scanned_ == 0) scanned_ = open;
    scanned_ += bal_.consume(std::string_view(buf_).substr(scanned_));
    if (!bal_.done) return final ? R::Fail : R::More;
    const auto call = whole_envelope(std::string_view(buf_).substr(open, scanned_ - open));
    if (!call) return R::Fail;
    start_call(call->first);
    call_args(call->second);
    end_call();
    consume(scanned_);
    env_done_ = true;
    return R::Ok;
  }
  if (env_phase_ == EnvPhase::Args) {
    const R r = args_step(final);
    if (r == R::Ok && args_done_) {
      env_phase_ = EnvPhase::Tail;
      bal_ = JsonBalance{};
      bal_.depth = 1;  // inside the envelope
    }
    return r;
  }
  // Tail: the rest of the envelope (other keys) is dropped.
  const size_t n = bal_.consume(buf_);
  consume(n);
  if (bal_.done || final) {
    end_call();
    env_done_ = true;
    return R::Ok;
  }
  return n > 0 ? R::Ok : R::More;
}

namespace {

size_t end_outside_json_strings(std::string_view s, std::string_view end) {
  bool in_str = false, esc = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (s.substr(i, end.size()) == end) {
      return i;
    }
  }
  return std::string::npos;
}

}  // namespace

R StreamCore::kv_value_step(bool final, std::string_view end, bool strip_newlines) {
  if (final && cutting_) {  // the start of `end` cut off is not part of the value
    const Scan cut = scan_markers(buf_, {&end, 1});
    if (cut.which < 0) buf_.resize(cut.hold);
  }
  if (value_start_) {
    if (buf_.empty()) return final ? R::Ok : R::More;
    if (strip_newlines && buf_[0] == '\n') consume(1);
    value_start_ = false;
  }
  Scan sc = scan_markers(buf_, {&end, 1});
  if (!kv_.value_is_string()) {
    // A JSON value ends at the first `end` outside its strings (a string may hold "</parameter>");
    // it is taken whole, so it stays in buf_ until then. Without one at the end of the output,
    // the first `end` anywhere (the value is then not JSON and becomes a string).
    const size_t at = end_outside_json_strings(buf_, end);
    if (at != std::string::npos) {
      sc.at = at;
      sc.which = 0;
    } else if (!final) {
      return R::More;
    }
  }
  if (sc.which >= 0) {
    std::string_view v = std::string_view(buf_).substr(0, sc.at);
    if (strip_newlines && !v.empty() && v.back() == '\n') v.remove_suffix(1);
    std::string text = kv_.value_chunk(v);  // before end_value, which uses what it buffered
    text += kv_.end_value();
    call_args(text);
    consume(sc.at + end.size());
    value_start_ = true;
    return R::Ok;
  }
  size_t safe = final ? buf_.size() : sc.hold;
  if (!final && strip_newlines && safe > 0 && buf_[safe - 1] == '\n') --safe;
  if (!final) safe = utf8_complete_prefix(std::string_view(buf_).substr(0, safe));  // escaped whole
  if (safe == 0) return R::More;
  call_args(kv_.value_chunk(std::string_view(buf_).substr(0, safe)));
  consume(safe);
  return R::Ok;
}

}  // namespace strata::toolcall::detail
