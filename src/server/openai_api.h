#pragma once
// The OpenAI wire format: request parsing with validation (every problem becomes an ApiError
// with its HTTP status) and the response / chunk objects.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "server/chat_format.h"

namespace strata::server {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string type, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string type, param, code;
};
// 400 invalid_request_error
ApiError bad_request(const std::string& message, const std::string& param = {}, const std::string& code = {});

// {"error": {"message", "type", "param", "code"}} (param / code null when empty).
nlohmann::json error_json(const std::string& message, const std::string& type, const std::string& param, const std::string& code);
nlohmann::json error_json(const ApiError& e);

// Serialized without throwing on invalid UTF-8 (replaced by U+FFFD).
std::string dump(const nlohmann::json& j);

// Requests keep their key order (tool schemas and arguments reach the template as sent).
using Json = nlohmann::ordered_json;

// The body as a JSON object: invalid UTF-8, malformed JSON or a non-object -> 400.
Json parse_body(const std::string& body);

// Field access for request parsing: absent and null are the same; a wrong type or a value out
// of range is a 400 naming the field (`name` is the field's path, e.g. "messages[2].tool_calls").
const Json* field(const Json& j, const char* key);
ApiError wrong_type(const std::string& name, const char* what);
std::optional<double> opt_number(const Json& j, const char* key, double lo, double hi);
std::optional<int64_t> opt_integer(const Json& j, const char* key, int64_t lo, int64_t hi);
std::optional<bool> opt_boolean(const Json& j, const char* key);
std::optional<std::string> opt_string(const Json& j, const char* key, const std::string& where = {});

// Fields shared by /v1/chat/completions and /v1/completions.
struct CommonParams {
  std::string model;               // as requested ("" when absent)
  bool stream = false;
  bool include_usage = false;
  int max_tokens = -1;             // -1: until the context is full
  std::vector<std::string> stop;
  SamplerParams sampling;
  bool ignore_eos = false;
  int n = 1;                       // choices (1..kMaxChoices), each its own sequence
  int n_probs = -1;                // -1: no logprobs; else the alternatives per token (0..kMaxTopLogprobs)
  // llama.cpp's "speculative.n_max" / "speculative.n_min": drafts per pass at most (0: no
  // speculation) and fewer than which a pass is plain; -1: the server's.
  int draft_max = -1, draft_min = -1;
};
constexpr int kMaxDraft = 63;
constexpr size_t kMaxLogitBias = 1024;  // logit_bias entries in a request
constexpr int kMaxChoices = 8;
constexpr int kMaxTopLogprobs = 20;
// `defaults`: the server's sampling settings (request fields override them). `chat` picks the
// logprobs fields: chat `logprobs` (bool) + `top_logprobs`, completions `logprobs` (int).
CommonParams parse_common(const Json& j, const SamplerParams& defaults, bool chat);

// The seed of choice `i` of a request seeded `seed` (choice 0 keeps the seed itself).
uint64_t choice_seed(uint64_t seed, int i);

// /v1/completions "prompt": a string, an array of token ids, or an array of several of either
// (one choice per prompt; at most kMaxPrompts, and prompts x n at most kMaxSequences).
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};
constexpr int kMaxPrompts = 32;
constexpr int kMaxSequences = 64;
std::vector<PromptInput> parse_prompts(const Json& j);

std::string random_id(const char* prefix);
int64_t unix_time();

}  // namespace strata::server
