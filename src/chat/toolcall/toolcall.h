#pragma once
// Tool calls in model output: one parser per model family over a shared streaming core.
//
// A StreamParser takes the generated text as it comes (split anywhere, even inside a UTF-8
// character or a marker) and turns it into events: Content, Reasoning (<think>...</think>, the
// harmony analysis channel), and per call CallStart (index, id, name), CallArgs (fragments of the
// arguments JSON, each one extending the previous ones: their concatenation is always a prefix of
// the final arguments) and CallEnd. Folding the events of any split of a text gives parse_all of it.
//
// Malformed output has one defined result, whatever the split (tests/chat/test_toolcall*.cpp):
//  - arguments that are JSON on the wire (Hermes, Llama 3, harmony, DeepSeek, Kimi, generic) are
//    passed on as the model wrote them, so a call whose arguments do not parse, or are cut off at
//    finish, is kept with that raw text (like OpenAI, the client validates them);
//    An arguments value that does not start like JSON gives empty arguments;
//  - a call to a function that is not in ParserOptions::tools is kept as written;
//  - a call marker followed by text that is not a call in the family's syntax (no name, no JSON
//    object) is content, marker included.
//  - ParserOptions::tools empty: no call is ever parsed, everything but reasoning is content.
// Output cut off (max tokens, a full context) ends with finish_cut instead of finish: what there is
// of the calls comes out as calls, never their raw syntax as content: complete calls, and the call
// the cut interrupted as far as it parses (its name whole; arguments as written so far, the generic
// format's closed as far as they parse), its CallEnd marked `cut`; a call whose name was cut off, a
// marker cut off, and the rest of a call section are dropped.
// feed, finish and finish_cut never throw.
// Layer chat/: includes gguf/, core/ and nlohmann-json only.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::toolcall {

enum class Format { Generic, Hermes, Qwen3Coder, Llama3, Harmony, DeepSeekV31, Glm45, KimiK2, MinimaxM2 };

// From markers in the template text; Generic when it does not mention a known tool-call syntax.
Format detect_format(std::string_view chat_template_source);
const char* format_name(Format);

struct ToolSpec {  // an OpenAI function tool
  std::string name, description;
  nlohmann::json parameters;  // JSON Schema of the arguments object (null: any object)
};
struct ToolCall {
  std::string id, name, arguments;  // arguments: JSON text (an object)
  bool cut = false;                 // cut off by the end of the output (finish_cut): arguments may be incomplete
};

struct Event {
  enum class Kind { Content, Reasoning, CallStart, CallArgs, CallEnd } kind;
  int index = 0;         // tool call index (CallStart/CallArgs/CallEnd)
  std::string id, name;  // CallStart
  std::string text;      // Content / Reasoning / CallArgs fragment
  bool cut = false;      // CallEnd: the output ended inside this call (finish_cut); its arguments may be incomplete
};

struct ParserOptions {
  bool reasoning = true;            // extract <think>...</think> / harmony analysis into Reasoning events
  bool thinking_open = false;       // the prompt already opened the reasoning block (template ended with "<think>\n")
  std::vector<ToolSpec> tools;      // known functions (empty: never parse calls, all is content)
  std::string id_prefix = "call_";  // call ids are id_prefix + the call's index (unique per response)
};

class StreamParser {
 public:
  static std::unique_ptr<StreamParser> make(Format, ParserOptions);
  virtual ~StreamParser();
  virtual void feed(std::string_view text, std::vector<Event>& out) = 0;  // model output as it comes, any split
  virtual void finish(std::vector<Event>& out) = 0;                        // end of generation: flush held-back text
  virtual void finish_cut(std::vector<Event>& out) { finish(out); }        // end of an output that was cut off (see above)
};

struct Parsed {
  std::string content, reasoning;
  std::vector<ToolCall> calls;
};
// The non-streaming result (= folding the events of feed(text) + finish()).
Parsed parse_all(Format, ParserOptions, std::string_view text);
// The same, for an output that was cut off (feed(text) + finish_cut()).
Parsed parse_cut(Format, ParserOptions, std::string_view text);
// Folds events into a result: texts concatenated, one ToolCall per CallStart with its CallArgs joined.
Parsed fold(const std::vector<Event>& events);
void fold_into(Parsed& parsed, const std::vector<Event>& events);

// A JSON text cut off anywhere, completed as far as it parses: the containers still open are
// closed after their last whole member or element. `close_strings`: a string cut off is closed and
// kept (a cut-off key still drops its member), else the member or element it is in is dropped.
// A text that is whole gives its value; null when nothing parses (not even the opening bracket).
nlohmann::json close_partial_json(std::string_view text, bool close_strings);
// Call arguments as an object: the JSON text parsed, or when it was cut off closed as far as it
// parses (close_partial_json); an empty object when neither gives an object.
nlohmann::json arguments_object(std::string_view arguments);

// For a template that does not mention tools: the system-message text describing the tools and the
// JSON the Generic parser expects: {"tool_call": {"name": ..., "arguments": {...}}} (parallel:
// {"tool_calls": [...]}) or {"response": "..."} for a plain answer.
std::string generic_tools_prompt(const std::vector<ToolSpec>& tools, bool parallel);

// The grammar (GBNF text, root rule `root`) forcing the output to be one (or, if parallel, one or
// more) call(s) in this family's own syntax. args_rule(schema) returns the name of a GBNF rule (the
// caller defines it, e.g. with grammar::json_schema_rules) for a JSON value matching schema; `only`
// names the one tool allowed (tool_choice named) or is empty (required: any tool). trigger is the
// literal text at which the call starts, so a caller can let the model reason first and apply the
// grammar from there.
struct CallGrammar {
  std::string gbnf;
  std::string trigger;
};
CallGrammar call_grammar(Format, const std::vector<ToolSpec>& tools, bool parallel, std::string_view only,
                         const std::function<std::string(const nlohmann::json& schema)>& args_rule);

}  // namespace strata::toolcall
