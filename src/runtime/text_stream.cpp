#include "runtime/text_stream.h"

#include <algorithm>

namespace strata {

size_t partial_suffix(std::string_view s, std::string_view tag) {
  const size_t max = std::min(s.size(), tag.empty() ? 0 : tag.size() - 1);
  for (size_t k = max; k > 0; --k)
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::push(std::string_view text) {
  if (matched_) return {};
  held_.append(text);
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at < first) first = at, which_ = s;
  }
  if (first != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  size_t keep = 0;
  for (const auto& s : stops_) keep = std::max(keep, partial_suffix(held_, s));
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return matched_ ? std::string() : out;
}

namespace {
constexpr std::string_view kOpen = "<think>", kClose = "</think>";
bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
}  // namespace

ReasoningSplitter::ReasoningSplitter(bool enabled, bool start_in_think)
    : enabled_(enabled), st_(!enabled ? State::Content : start_in_think ? State::Think : State::Start) {}

void ReasoningSplitter::run(Out& o) {
  for (;;) {
    if (st_ == State::Start) {
      size_t i = 0;
      while (i < buf_.size() && is_space(buf_[i])) ++i;
      std::string_view t = std::string_view(buf_).substr(i);
      if (t.size() < kOpen.size() && kOpen.substr(0, t.size()) == t) return;  // undecided
      if (t.substr(0, kOpen.size()) == kOpen) {
        buf_.erase(0, i + kOpen.size());
        st_ = State::Think;
        continue;
      }
      st_ = State::Content;
      continue;
    }
    if (st_ == State::Think) {
      const size_t p = buf_.find(kClose);
      if (p != std::string::npos) {
        o.reasoning += buf_.substr(0, p);
        buf_.erase(0, p + kClose.size());
        st_ = State::Content;
        trim_ = true;
        continue;
      }
      const size_t keep = partial_suffix(buf_, kClose);
      o.reasoning += buf_.substr(0, buf_.size() - keep);
      buf_.erase(0, buf_.size() - keep);
      return;
    }
    // Content
    if (trim_) {
      size_t i = 0;
      while (i < buf_.size() && is_space(buf_[i])) ++i;
      buf_.erase(0, i);
      if (buf_.empty()) return;
      trim_ = false;
    }
    o.content += buf_;
    buf_.clear();
    return;
  }
}

ReasoningSplitter::Out ReasoningSplitter::push(std::string_view text) {
  Out o;
  buf_.append(text);
  run(o);
  return o;
}

ReasoningSplitter::Out ReasoningSplitter::flush() {
  Out o;
  if (st_ == State::Think) o.reasoning = buf_;
  else if (!trim_) o.content = buf_;
  buf_.clear();
  return o;
}

bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    unsigned cp;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else return false;
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return false;
    i += len;
  }
  return true;
}

}  // namespace strata
