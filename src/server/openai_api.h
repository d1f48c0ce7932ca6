#pragma once
// The OpenAI wire format: request parsing with validation (every problem becomes an ApiError
// with its HTTP status) and the response / chunk objects.
#include <nlohmann/json.hpp>

#include <cstdint>
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

// The body as a JSON object: invalid UTF-8, malformed JSON or a non-object -> 400.
nlohmann::json parse_body(const std::string& body);

// Fields shared by /v1/chat/completions and /v1/completions.
struct CommonParams {
  std::string model;               // as requested ("" when absent)
  bool stream = false;
  bool include_usage = false;
  int max_tokens = -1;             // -1: until the context is full
  std::vector<std::string> stop;
  SamplerParams sampling;
  bool ignore_eos = false;
};
// `defaults`: the server's sampling settings (request fields override them).
CommonParams parse_common(const nlohmann::json& j, const SamplerParams& defaults);

std::vector<ChatMsg> parse_messages(const nlohmann::json& j);

// /v1/completions "prompt": a string, an array of token ids, or a one-element array of either.
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};
PromptInput parse_prompt(const nlohmann::json& j);

std::string random_id(const char* prefix);
int64_t unix_time();

}  // namespace strata::server
