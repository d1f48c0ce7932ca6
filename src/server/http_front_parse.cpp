// The front's request parsing: a request head (line + headers) and chunked bodies, both under the
// limits of front_limits (server/http_front.h).
#include <algorithm>
#include <cctype>
#include <cstring>

#include "server/http_front.h"

namespace strata::server {

using namespace front_limits;

namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y)); });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c <= ' ' || c >= 127 || std::strchr("()<>@,;:\\\"/[]?={}", c)) return false;
  return true;
}

Refusal refuse(int status, std::string message, std::string code) { return Refusal{status, std::move(message), std::move(code)}; }

std::optional<Refusal> parse_request_line(std::string_view line, RequestHead& h) {
  const size_t a = line.find(' ');
  const size_t b = a == std::string_view::npos ? a : line.find(' ', a + 1);
  if (b == std::string_view::npos || line.find(' ', b + 1) != std::string_view::npos)
    return refuse(400, "malformed request line", "bad_request");
  h.method = line.substr(0, a);
  h.target = line.substr(a + 1, b - a - 1);
  h.version = line.substr(b + 1);
  if (!is_token(h.method) || h.target.empty() || (h.version != "HTTP/1.1" && h.version != "HTTP/1.0"))
    return refuse(400, "malformed request line", "bad_request");
  h.path = h.target.substr(0, h.target.find('?'));
  return std::nullopt;
}

std::optional<Refusal> parse_header(std::string_view line, RequestHead& h) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) return refuse(400, "malformed header line", "bad_request");
  h.headers.emplace_back(std::string(line.substr(0, colon)), std::string(trim(line.substr(colon + 1))));
  return std::nullopt;
}

// Content-Length / Transfer-Encoding: one framing, no smuggling ambiguity.
std::optional<Refusal> body_framing(RequestHead& h) {
  int n_te = 0, n_cl = 0;
  for (const auto& [name, value] : h.headers) {
    if (iequals(name, "Transfer-Encoding")) {
      if (++n_te > 1 || !iequals(value, "chunked")) return refuse(501, "only 'Transfer-Encoding: chunked' is supported", "unsupported_transfer_encoding");
      h.chunked = true;
    } else if (iequals(name, "Content-Length")) {
      if (value.empty() || value.size() > 18 || !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return refuse(400, "malformed Content-Length", "bad_request");
      const size_t v = std::stoull(value);
      if (n_cl++ > 0 && v != h.content_length) return refuse(400, "conflicting Content-Length headers", "bad_request");
      h.content_length = v;
    }
  }
  if (n_te && n_cl) return refuse(400, "both Content-Length and Transfer-Encoding", "bad_request");
  return std::nullopt;
}

Refusal too_large_head(bool in_request_line) {
  if (in_request_line) return refuse(414, "the request line exceeds the limit of " + std::to_string(kMaxHeadBytes) + " bytes", "uri_too_long");
  return refuse(431, "the request head exceeds the limit of " + std::to_string(kMaxHeadBytes) + " bytes", "headers_too_large");
}

}  // namespace

const std::string* RequestHead::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (iequals(n, name)) return &v;
  return nullptr;
}

HeadParse parse_head(std::string_view buf, RequestHead& head) {
  head = RequestHead{};
  size_t pos = 0;
  bool first = true;
  for (;;) {
    const size_t nl = buf.find('\n', pos);
    if (nl == std::string_view::npos || nl >= kMaxHeadBytes) {
      if (std::min(buf.size(), nl) >= kMaxHeadBytes) return {0, too_large_head(first)};
      return {};
    }
    std::string_view line = buf.substr(pos, nl - pos);
    pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::optional<Refusal> r;
    if (first) {
      r = parse_request_line(line, head);
      first = false;
    } else if (line.empty()) {
      r = body_framing(head);
      return {pos, r};
    } else if (head.headers.size() >= kMaxHeaders) {
      r = refuse(431, "more than " + std::to_string(kMaxHeaders) + " header lines", "headers_too_large");
    } else {
      r = parse_header(line, head);
    }
    if (r) return {0, r};
  }
}

bool ChunkDecoder::size_line(std::optional<Refusal>& refusal) {
  const std::string_view s = trim(std::string_view(line_).substr(0, line_.find(';')));
  size_t v = 0;
  if (s.empty() || s.size() > 15) {
    refusal = refuse(400, "malformed chunk size", "bad_request");
    return false;
  }
  for (char c : s) {
    const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1;
    if (d < 0) {
      refusal = refuse(400, "malformed chunk size", "bad_request");
      return false;
    }
    v = v * 16 + static_cast<size_t>(d);
  }
  if (v > cap_ - total_) {
    refusal = refuse(413, "the request body exceeds the limit of " + std::to_string(cap_) + " bytes", "request_too_large");
    return false;
  }
  total_ += v;
  remaining_ = v;
  state_ = v == 0 ? State::Trailer : State::Data;
  return true;
}

size_t ChunkDecoder::feed(std::string_view in, std::string& out, std::optional<Refusal>& refusal) {
  size_t i = 0;
  while (i < in.size() && state_ != State::Done) {
    if (state_ == State::Data) {
      const size_t take = std::min(remaining_, in.size() - i);
      out.append(in.data() + i, take);
      i += take;
      remaining_ -= take;
      if (remaining_ == 0) state_ = State::DataEnd;
      continue;
    }
    const size_t nl = in.find('\n', i);
    const size_t take = (nl == std::string_view::npos ? in.size() : nl) - i;
    if (line_.size() + take > kMaxChunkLine) {
      refusal = refuse(400, "a chunk line exceeds " + std::to_string(kMaxChunkLine) + " bytes", "bad_request");
      return i;
    }
    line_.append(in.substr(i, take));
    i += take;
    if (nl == std::string_view::npos) break;
    ++i;  // the '\n'
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (state_ == State::DataEnd) {
      if (!line_.empty()) {
        refusal = refuse(400, "chunk data longer than its size", "bad_request");
        return i;
      }
      state_ = State::Size;
    } else if (state_ == State::Size) {
      if (!size_line(refusal)) return i;
    } else if (line_.empty()) {
      state_ = State::Done;  // trailers (ignored) end with an empty line
    } else if (++trailers_ > kMaxHeaders) {
      refusal = refuse(431, "more than " + std::to_string(kMaxHeaders) + " trailer lines", "headers_too_large");
      return i;
    }
    line_.clear();
  }
  return i;
}

size_t json_values_bound(std::string_view body) {
  size_t n = 1;
  bool in_string = false, escaped = false;
  for (const char ch : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == ',' || ch == ':') {
      ++n;
    }
  }
  return n;
}

}  // namespace strata::server
