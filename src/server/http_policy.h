#pragma once
// Who may send what, decided from a request's head before its body is read (the front's gate,
// server/http_front.h): the API key, the routes that take a body, and without a key on a loopback
// address the Host / Origin / Content-Type checks against DNS rebinding and cross-site requests.
// The security model: src/server/README.md, "Security".
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_front.h"

namespace strata::server {

struct AccessPolicy {
  std::string api_key;         // "": no key (then the loopback checks below, when loopback)
  bool loopback = true;        // --host is a loopback address (127.0.0.0/8, ::1, localhost)
  bool webui = true;           // / and /webui/* are open
  // --cors: origins whose pages may call the server (exact "scheme://host[:port]", or "*": any);
  // empty: no CORS headers, and without a key on loopback foreign Origins stay refused.
  std::vector<std::string> cors;
};

// The --cors value: "*" or a comma list of origins (scheme://host[:port], no path); throws
// std::invalid_argument naming a malformed entry.
std::vector<std::string> parse_cors(std::string_view value);
// Whether a page of `origin` may call the server (an entry equal to it, case-insensitive, or "*").
bool cors_allows(const std::vector<std::string>& cors, std::string_view origin);

// Constant-time in the key: the time depends only on the length of what was sent.
bool key_matches(std::string_view given, std::string_view key);
// A Host header naming this machine's loopback (localhost, 127.0.0.0/8, [::1]; any port).
bool is_loopback_host(std::string_view host);
// An Origin header of a loopback page (http(s)://localhost[:port], 127.0.0.0/8, [::1]).
bool is_loopback_origin(std::string_view origin);
// A --host value that listens on loopback only.
bool is_loopback_bind(std::string_view host);
// POST routes that read a body (a body to any other route is refused unread).
bool takes_body(std::string_view path);

// The refusal for this head, if any: 405 / 404 a body where none is read, 403 foreign Host or
// Origin (an Origin --cors allows is not foreign), 401 a body without the key (bodyless requests: their handlers check it), 415 a
// CORS-simple Content-Type (text/plain, multipart/form-data) without a key.
std::optional<Refusal> check_head(const AccessPolicy& policy, const RequestHead& head);

}  // namespace strata::server
