#include "server/http_policy.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <stdexcept>

namespace strata::server {

namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

bool is_port(std::string_view s) { return !s.empty() && s.size() <= 5 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }); }

// 127.a.b.c, dotted decimal.
bool is_loopback_v4(std::string_view s) {
  int parts = 0;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t dot = std::min(s.find('.', i), s.size());
    const std::string_view p = s.substr(i, dot - i);
    if (p.empty() || p.size() > 3 || !std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; }) || std::stoi(std::string(p)) > 255)
      return false;
    if (parts == 0 && p != "127") return false;
    ++parts;
    i = dot + 1;
  }
  return parts == 4;
}

bool is_loopback_name(std::string_view h) { return h == "localhost" || h == "::1" || is_loopback_v4(h); }

bool open_without_key(const AccessPolicy& p, const RequestHead& h) {
  if (h.path == "/health") return true;
  return p.webui && (h.method == "GET" || h.method == "HEAD") && (h.path == "/" || h.path.rfind("/webui/", 0) == 0);
}

// The media type of a Content-Type value, lower case, parameters dropped.
std::string media_type(std::string_view v) {
  v = v.substr(0, v.find(';'));
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return lower(v);
}

Refusal key_refusal(const RequestHead& h) {
  const bool none = !h.header("Authorization") && !h.header("x-api-key");
  return Refusal{401, none ? "missing API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')" : "incorrect API key provided", "invalid_api_key"};
}

bool key_ok(const AccessPolicy& p, const RequestHead& h) {
  const std::string* auth = h.header("Authorization");
  const std::string* x = h.header("x-api-key");
  bool ok = false;
  if (auth && auth->size() > 7 && lower(auth->substr(0, 7)) == "bearer ") ok |= key_matches(std::string_view(*auth).substr(7), p.api_key);
  if (x) ok |= key_matches(*x, p.api_key);
  return ok;
}

}  // namespace

bool key_matches(std::string_view given, std::string_view key) {
  if (key.empty()) return false;
  unsigned diff = given.size() == key.size() ? 0u : 1u;
  for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i]) ^ static_cast<unsigned char>(key[i % key.size()]);
  return diff == 0;
}

bool is_loopback_host(std::string_view host) {
  const std::string h = lower(host);
  std::string_view s(h);
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    if (close == std::string_view::npos) return false;
    const std::string_view rest = s.substr(close + 1);
    return s.substr(1, close - 1) == "::1" && (rest.empty() || (rest.front() == ':' && is_port(rest.substr(1))));
  }
  const size_t colon = s.find(':');
  if (colon != std::string_view::npos) {
    if (!is_port(s.substr(colon + 1))) return false;
    s = s.substr(0, colon);
  }
  return s != "::1" && is_loopback_name(s);
}

bool is_loopback_origin(std::string_view origin) {
  for (std::string_view scheme : {"http://", "https://"})
    if (origin.size() > scheme.size() && lower(origin.substr(0, scheme.size())) == scheme) {
      std::string_view rest = origin.substr(scheme.size());
      if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
      return rest.find('/') == std::string_view::npos && is_loopback_host(rest);
    }
  return false;
}

bool is_loopback_bind(std::string_view host) {
  const std::string h = lower(host);
  return is_loopback_name(h) || h == "[::1]";
}

std::vector<std::string> parse_cors(std::string_view value) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= value.size()) {
    const size_t comma = std::min(value.find(',', i), value.size());
    std::string_view o = value.substr(i, comma - i);
    while (!o.empty() && o.front() == ' ') o.remove_prefix(1);
    while (!o.empty() && (o.back() == ' ' || o.back() == '/')) o.remove_suffix(1);
    i = comma + 1;
    if (o.empty()) continue;
    if (o != "*") {
      const size_t scheme = o.find("://");
      const std::string_view host = scheme == std::string_view::npos ? std::string_view() : o.substr(scheme + 3);
      if (scheme == std::string_view::npos || scheme == 0 || host.empty() || host.find('/') != std::string_view::npos)
        throw std::invalid_argument("'" + std::string(o) + "' is not an origin (scheme://host[:port], or *)");
    }
    out.push_back(lower(o));
  }
  if (out.empty()) throw std::invalid_argument("no origin given (a comma list of scheme://host[:port], or *)");
  return out;
}

bool cors_allows(const std::vector<std::string>& cors, std::string_view origin) {
  if (origin.empty()) return false;
  std::string o = lower(origin);
  while (!o.empty() && o.back() == '/') o.pop_back();
  return std::any_of(cors.begin(), cors.end(), [&](const std::string& c) { return c == "*" || c == o; });
}

bool takes_body(std::string_view path) {
  static constexpr std::array<std::string_view, 10> kBodyRoutes = {
      "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens",
      "/api/chat",            "/api/generate",   "/api/show",     "/tokenize",    "/detokenize"};
  if (path.starts_with("/slots/")) return true;  // POST /slots/{id}?action=... (slot_actions.cpp)
  return std::find(kBodyRoutes.begin(), kBodyRoutes.end(), path) != kBodyRoutes.end();
}

std::optional<Refusal> check_head(const AccessPolicy& p, const RequestHead& h) {
  if (h.has_body() && h.method != "POST") return Refusal{405, "method not allowed with a body", "method_not_allowed"};
  if (h.has_body() && !takes_body(h.path)) return Refusal{404, "no such endpoint: " + h.method + " " + h.path, "not_found"};
  const bool keyless = p.api_key.empty();
  if (keyless && p.loopback && h.path != "/health") {
    const std::string* host = h.header("Host");
    if (host && !is_loopback_host(*host))
      return Refusal{403, "Host '" + *host + "' is not this machine's loopback: without --api-key the server answers only local names", "forbidden_host"};
    const std::string* origin = h.header("Origin");
    if (origin && !is_loopback_origin(*origin) && !cors_allows(p.cors, *origin))
      return Refusal{403, "requests from the page of another origin need an API key (--api-key)", "forbidden_origin"};
  }
  // A body is read only with the key; requests without one go on to the routes (their handlers
  // check the key again; an unknown route is a 404 with or without it).
  if (!keyless && h.has_body() && !open_without_key(p, h) && !key_ok(p, h)) return key_refusal(h);
  if (keyless && h.has_body()) {
    const std::string* ct = h.header("Content-Type");
    const std::string mt = ct ? media_type(*ct) : std::string();
    if (mt == "text/plain" || mt == "multipart/form-data")
      return Refusal{415, "the body must be JSON (Content-Type: application/json); '" + mt + "' is refused without an API key", "unsupported_media_type"};
  }
  return std::nullopt;
}

}  // namespace strata::server
