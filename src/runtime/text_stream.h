#pragma once
// Streaming text filters applied to generated text: stop strings (held back while they may
// still match, never emitted) and <think>...</think> reasoning separation.
#include <string>
#include <string_view>
#include <vector>

namespace strata {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops = {});
  // Appends generated text; returns the text that can no longer become part of a stop string.
  // Once a stop string is found, the text before it is returned and matched() turns true.
  std::string push(std::string_view text);
  // Whatever is held back (the end of the stream). Empty after a match.
  std::string flush();
  bool matched() const { return matched_; }
  const std::string& which() const { return which_; }  // the stop string found (matched())

 private:
  std::vector<std::string> stops_;
  std::string which_;
  std::string held_;
  bool matched_ = false;
};

class ReasoningSplitter {
 public:
  // enabled=false: everything is content. start_in_think: the prompt already opened <think>.
  explicit ReasoningSplitter(bool enabled = true, bool start_in_think = false);
  struct Out {
    std::string reasoning, content;
    bool empty() const { return reasoning.empty() && content.empty(); }
  };
  Out push(std::string_view text);
  Out flush();
  bool in_think() const { return st_ == State::Think; }

 private:
  enum class State { Start, Think, Content };
  void run(Out& o);
  bool enabled_;
  State st_;
  bool trim_ = false;  // drop whitespace at the start of content after </think>
  std::string buf_;
};

// The length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_suffix(std::string_view s, std::string_view tag);

// Well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF)?
bool valid_utf8(std::string_view s);

}  // namespace strata
