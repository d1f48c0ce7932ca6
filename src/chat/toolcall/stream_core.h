#pragma once
// The shared streaming core of the tool-call parsers (see toolcall.h). Internal to chat/toolcall/.
//
// StreamCore keeps the text not yet turned into events in buf_. Outside calls it scans for the
// family's markers (the reasoning block and the call openers), emits as content what cannot be the
// start of a marker and holds back a possible partial marker (and trailing whitespace, dropped when
// a call follows). Inside a call the family's call_step() parses from the front of buf_ with Cur,
// which answers Ok, More (the decision needs text not yet seen) or Fail. Every decision is taken
// only on enough text, so any split of the same output gives the same events once folded.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/toolcall/toolcall.h"

namespace strata::toolcall::detail {

enum class R { Ok, More, Fail };

// Where the earliest of `markers` occurs in s: at/which (which = -1: none), and hold: the start of
// the longest tail of s that is a proper prefix of a marker (s.size() when none).
struct Scan {
  size_t at = std::string_view::npos;
  int which = -1;
  size_t hold = 0;
};
Scan scan_markers(std::string_view s, std::span<const std::string_view> markers);

// A sticky cursor over text: each step does nothing once state is not Ok. At final, a step that
// would need more text fails instead.
struct Cur {
  std::string_view s;
  bool final = false;
  size_t p = 0;
  R st = R::Ok;

  bool ok() const { return st == R::Ok; }
  bool at_end() const { return p >= s.size(); }
  void more() { st = final ? R::Fail : R::More; }
  void ws();                                         // skips whitespace
  void lit(std::string_view m);                      // exactly m
  bool try_lit(std::string_view m);                  // m if it is there (More while it may be)
  // body up to m, then past m; fails when m is not within max bytes.
  void until(std::string_view m, std::string_view& body, size_t max = 256);
  void jstring(std::string& decoded);                // a JSON string token
  void jvalue(std::string_view& raw);                // one complete JSON value (balanced; scalars need a delimiter)
};

// Incremental bracket balance of a JSON value, string-aware (no validation).
struct JsonBalance {
  int depth = 0;
  bool in_str = false, esc = false, done = false;
  // Consumes s until the value closes; returns how many bytes belong to the value.
  size_t consume(std::string_view s);
};

// JSON string body escaping (no quotes): control characters as \u00XX, valid UTF-8 as is, every
// byte of an invalid sequence as \ufffd, so the result is always valid JSON.
void append_json_escaped(std::string& out, std::string_view s);
// The length of the valid UTF-8 sequence at s[i] (0: invalid or cut off).
size_t utf8_sequence(std::string_view s, size_t i);
// How much of s ends on a code point boundary: s.size() less an unfinished trailing sequence.
size_t utf8_complete_prefix(std::string_view s);
// Parses text as JSON only when it is not nested deeper than 64 (nlohmann recurses); nullopt when it fails.
std::optional<nlohmann::json> parse_json(std::string_view text);
std::string dump_json(const nlohmann::json& j);  // compact, invalid UTF-8 replaced
bool is_ws(char c);

const ToolSpec* find_tool(const std::vector<ToolSpec>& tools, std::string_view name);
// The JSON Schema type of argument `key` of tool (nullptr: unknown) is "string" only.
bool arg_is_string(const ToolSpec* tool, std::string_view key);

// Builds the arguments object of a call written as key/value pairs (Qwen3-Coder, GLM, MiniMax)
// as JSON, emitting only final text: values typed by the tool's schema (strings raw, others JSON,
// a non-string that does not parse as JSON becomes a string).
class KvArgs {
 public:
  void begin(const ToolSpec* tool);
  std::string open();                        // "{"
  std::string key(std::string_view k);       // `"k": ` (with the comma) and, for a string value, its opening quote
  std::string value_chunk(std::string_view v);  // final text for part of the value (empty while buffered)
  std::string end_value();                   // the rest of the value
  std::string close();                       // what closes the object (and an open value)
  bool in_value() const { return in_value_; }
  bool value_is_string() const { return string_; }

 private:
  const ToolSpec* tool_ = nullptr;
  bool first_ = true, in_value_ = false, string_ = false;
  std::string pending_;  // a non-string value, until it ends
};

class StreamCore : public StreamParser {
 public:
  explicit StreamCore(ParserOptions opts);
  void feed(std::string_view text, std::vector<Event>& out) override;
  void finish(std::vector<Event>& out) override;
  // What a plain step leaves in buf_ at the cut (a call it waits on, a marker's start) is handed
  // to cut_rest(); then finish(), with every call still open marked cut.
  void finish_cut(std::vector<Event>& out) override;

 protected:
  enum class Mode { Content, Reasoning, Call };

  // Family hooks. call_starts: the markers that open a call (section) in content.
  virtual std::vector<std::string_view> call_starts() const = 0;
  // buf_ starts with call_starts()[which] (first step of a call section) or continues the section.
  // Returns More to wait, Fail when nothing of the section was emitted and it is not a call (the
  // opener becomes content), Ok after progress. The family calls end_section() when done.
  virtual R call_step(bool final, int which) = 0;
  virtual void on_finish() {}  // flush a call cut off by the end of the output
  // The output was cut off with buf_ holding what the plain steps could not decide: in a call
  // section, the call as far as it parses (steps at final; a step that fails drops the rest), the
  // rest dropped; in content or reasoning, a held start of a marker dropped.
  virtual void cut_rest();
  virtual bool step(bool final);  // one step of the current mode; false: nothing more to do now

  bool content_step(bool final);
  bool reasoning_step(bool final);
  void end_section();  // back to content, skipping the whitespace that follows

  // Events.
  void emit_text(Event::Kind kind, std::string_view text);
  void start_call(std::string_view name);
  void call_args(std::string_view fragment);
  void end_call();
  void consume(size_t n) { buf_.erase(0, n); }
  void emit_content(std::string_view text);  // holds trailing whitespace back (dropped if a call follows)
  void emit_reasoning(std::string_view text);
  virtual void begin_section(int /*which*/) {}

  // Shared call pieces. args_step streams one arguments JSON value from the front of buf_ (an
  // object as written; another value once complete: a string holding an object gives its text);
  // returns Ok with args_done_ set when it ended. envelope_step parses {"name": ..., "arguments" |
  // "parameters": ...} starting `skip` bytes into buf_ (name first streams; other orders are taken
  // whole); env_done_ when the object closed. kv_value_step streams a key/value value up to end.
  R args_step(bool final);
  R envelope_step(bool final, size_t skip);
  R kv_value_step(bool final, std::string_view end, bool strip_newlines);
  void reset_call_state();

  ParserOptions opts_;
  std::string buf_;                  // text not yet turned into events
  std::vector<Event>* out_ = nullptr;
  Mode mode_ = Mode::Content;
  bool skip_ws_ = false;             // drop whitespace at the front of buf_ (after </think>, after a call)
  bool in_call_ = false;             // between CallStart and CallEnd
  bool section_emitted_ = false;     // the current section emitted a call (no Fail any more)
  int section_marker_ = -1;          // which call_starts() opened the section
  int calls_ = 0;                    // calls started
  std::string held_ws_;              // content whitespace before a call opener, dropped if it is a call
  std::string_view think_open_ = "<think>", think_close_ = "</think>";
  std::vector<std::string_view> content_markers_;  // what content_step scans for
  bool markers_ready_ = false;
  bool content_seen_ = false;        // content other than whitespace was emitted
  bool cutting_ = false;             // inside finish_cut: a call that ends now is cut (Event::cut)
  std::string held_rws_;             // reasoning whitespace before </think>

  // Call state of the shared pieces.
  enum class ArgsPhase { Start, Object, Value } args_phase_ = ArgsPhase::Start;
  bool args_done_ = false;
  JsonBalance bal_;
  size_t scanned_ = 0;  // bytes of buf_ already fed to bal_ (values taken whole)
  enum class EnvPhase { Header, Args, Tail } env_phase_ = EnvPhase::Header;
  bool env_done_ = false;
  bool value_start_ = true;  // kv value: its first byte not seen yet
  KvArgs kv_;
};


}  // namespace strata::toolcall::detail
