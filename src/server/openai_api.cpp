#include "server/openai_api.h"

#include <fmt/format.h>

#include <chrono>
#include <optional>
#include <random>

#include "runtime/text_stream.h"
#include "core/json_depth.h"

namespace strata::server {

using nlohmann::json;

ApiError bad_request(const std::string& message, const std::string& param, const std::string& code) {
  return ApiError(400, message, "invalid_request_error", param, code);
}

json error_json(const std::string& message, const std::string& type, const std::string& param, const std::string& code) {
  json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? json(nullptr) : json(param);
  e["code"] = code.empty() ? json(nullptr) : json(code);
  return json{{"error", e}};
}

json error_json(const ApiError& e) { return error_json(e.what(), e.type, e.param, e.code); }

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

Json parse_body(const std::string& body) {
  if (!valid_utf8(body)) throw bad_request("the request body is not valid UTF-8", "", "invalid_utf8");
  // Before parsing: every later walk over the value recurses.
  const JsonNesting nest = json_nesting(body);
  if (nest.over())
    throw bad_request(fmt::format("the request body nests arrays/objects deeper than {} levels{} (at byte {})", kMaxJsonDepth,
                                  nest.top_key.empty() ? "" : fmt::format(" in '{}'", nest.top_key), nest.over_at),
                      nest.top_key, "json_too_deep");
  Json j;
  try {
    j = Json::parse(body);
  } catch (const Json::exception& e) {  // a syntax error, or a number out of range (406)
    throw bad_request(fmt::format("the request body is not valid JSON: {}", e.what()), "", "invalid_json");
  }
  if (!j.is_object()) throw bad_request("the request body must be a JSON object", "", "invalid_json");
  return j;
}

const Json* field(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

ApiError wrong_type(const std::string& name, const char* what) { return bad_request(fmt::format("'{}' must be {}", name, what), name, "invalid_type"); }

std::optional<double> opt_number(const Json& j, const char* name, double lo, double hi) {
  const Json* f = field(j, name);
  if (!f) return std::nullopt;
  if (!f->is_number()) throw wrong_type(name, "a number");
  const double v = f->get<double>();
  if (!(v >= lo && v <= hi)) throw bad_request(fmt::format("'{}' must be between {} and {} (got {})", name, lo, hi, v), name, "invalid_value");
  return v;
}

std::optional<int64_t> opt_integer(const Json& j, const char* name, int64_t lo, int64_t hi) {
  const Json* f = field(j, name);
  if (!f) return std::nullopt;
  if (!f->is_number_integer()) throw wrong_type(name, "an integer");
  if (f->is_number_unsigned() && f->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    throw bad_request(fmt::format("'{}' is out of range", name), name, "invalid_value");
  const int64_t v = f->get<int64_t>();
  if (v < lo || v > hi) throw bad_request(fmt::format("'{}' must be between {} and {} (got {})", name, lo, hi, v), name, "invalid_value");
  return v;
}

std::optional<bool> opt_boolean(const Json& j, const char* name) {
  const Json* f = field(j, name);
  if (!f) return std::nullopt;
  if (!f->is_boolean()) throw wrong_type(name, "a boolean");
  return f->get<bool>();
}

std::optional<std::string> opt_string(const Json& j, const char* key, const std::string& where) {
  const Json* f = field(j, key);
  if (!f) return std::nullopt;
  const std::string name = where.empty() ? std::string(key) : where + "." + key;
  if (!f->is_string()) throw wrong_type(name, "a string");
  return f->get<std::string>();
}

namespace {

void parse_logprobs(const Json& j, bool chat, CommonParams& p) {
  if (chat) {
    const bool on = opt_boolean(j, "logprobs").value_or(false);
    const auto top = opt_integer(j, "top_logprobs", 0, kMaxTopLogprobs);
    if (top && !on) throw bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value");
    if (on) p.n_probs = static_cast<int>(top.value_or(0));
  } else if (auto n = opt_integer(j, "logprobs", 0, kMaxTopLogprobs)) {
    p.n_probs = static_cast<int>(*n);
  }
}

// OpenAI's logit_bias: {"token id": bias in -100..100}; llama.cpp's [[id, bias], ...] too. Ids are
// checked against the vocabulary when the request is prepared (request_core.cpp).
void parse_logit_bias(const Json& j, SamplerParams& sp) {
  const Json* lb = field(j, "logit_bias");
  if (!lb || lb->is_null()) return;
  if (lb->size() > kMaxLogitBias) throw bad_request(fmt::format("'logit_bias' has {} entries; at most {}", lb->size(), kMaxLogitBias), "logit_bias", "invalid_value");
  auto add = [&](const std::string& key, const Json& v) {
    if (!v.is_number()) throw bad_request(fmt::format("'logit_bias' of token {} must be a number", key), "logit_bias", "invalid_type");
    const double b = v.get<double>();
    if (!(b >= -100.0 && b <= 100.0)) throw bad_request(fmt::format("'logit_bias' of token {} must be in -100..100 (got {})", key, b), "logit_bias", "invalid_value");
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != key.size() || id < 0 || id > INT32_MAX)
      throw bad_request(fmt::format("'logit_bias' key '{}' is not a token id", key), "logit_bias", "invalid_value");
    sp.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  };
  if (lb->is_object()) {
    for (const auto& [k, v] : lb->items()) add(k, v);
  } else if (lb->is_array()) {
    for (const Json& e : *lb) {
      if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer()) throw wrong_type("logit_bias", "an object of token ids, or [[id, bias], ...]");
      add(std::to_string(e[0].get<long long>()), e[1]);
    }
  } else {
    throw wrong_type("logit_bias", "an object of token ids");
  }
}

}  // namespace

CommonParams parse_common(const Json& j, const SamplerParams& defaults, bool chat) {
  CommonParams p;
  p.sampling = defaults;
  p.model = opt_string(j, "model").value_or("");
  p.stream = opt_boolean(j, "stream").value_or(false);
  if (const Json* so = field(j, "stream_options")) {
    if (!so->is_object()) throw wrong_type("stream_options", "an object");
    p.include_usage = opt_boolean(*so, "include_usage").value_or(false);
  }
  // max_completion_tokens (newer) wins over max_tokens.
  auto mt = opt_integer(j, "max_completion_tokens", 0, INT32_MAX);
  if (!mt) mt = opt_integer(j, "max_tokens", 0, INT32_MAX);
  if (mt) p.max_tokens = static_cast<int>(*mt);
  p.n = static_cast<int>(opt_integer(j, "n", 1, kMaxChoices).value_or(1));
  parse_logprobs(j, chat, p);
  if (const Json* st = field(j, "stop")) {
    if (st->is_string()) {
      p.stop.push_back(st->get<std::string>());
    } else if (st->is_array()) {
      if (st->size() > 16) throw bad_request("'stop' holds at most 16 strings", "stop", "invalid_value");
      for (const auto& s : *st) {
        if (!s.is_string()) throw wrong_type("stop", "a string or an array of strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      throw wrong_type("stop", "a string or an array of strings");
    }
  }
  if (auto v = opt_number(j, "temperature", 0.0, 2.0)) p.sampling.temp = static_cast<float>(*v);
  if (auto v = opt_number(j, "top_p", 0.0, 1.0)) p.sampling.top_p = static_cast<float>(*v);
  if (auto v = opt_number(j, "presence_penalty", -2.0, 2.0)) p.sampling.presence_penalty = static_cast<float>(*v);
  if (auto v = opt_number(j, "frequency_penalty", -2.0, 2.0)) p.sampling.frequency_penalty = static_cast<float>(*v);
  // Extensions (llama.cpp names).
  if (auto v = opt_integer(j, "top_k", 0, INT32_MAX)) p.sampling.top_k = static_cast<int>(*v);
  if (auto v = opt_number(j, "min_p", 0.0, 1.0)) p.sampling.min_p = static_cast<float>(*v);
  if (auto v = opt_number(j, "repeat_penalty", 0.0, 10.0)) p.sampling.repeat_penalty = static_cast<float>(*v);
  p.ignore_eos = opt_boolean(j, "ignore_eos").value_or(false);
  parse_logit_bias(j, p.sampling);
  if (auto v = opt_integer(j, "speculative.n_max", 0, kMaxDraft)) p.draft_max = static_cast<int>(*v);
  if (auto v = opt_integer(j, "speculative.n_min", 0, kMaxDraft)) p.draft_min = static_cast<int>(*v);
  if (p.draft_max > 0 && p.draft_min > p.draft_max)  // (n_max 0: off, n_min moot)
    throw bad_request(fmt::format("'speculative.n_min' ({}) must not exceed 'speculative.n_max' ({})", p.draft_min, p.draft_max), "speculative.n_min",
                      "invalid_value");
  if (auto v = opt_integer(j, "seed", INT64_MIN, INT64_MAX)) {
    p.sampling.seed = static_cast<uint64_t>(*v);
  } else {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    p.sampling.seed = rng();
  }
  return p;
}

uint64_t choice_seed(uint64_t seed, int i) {
  if (i == 0) return seed;
  // splitmix64 of (seed, i): choices of one request differ, and each is reproducible.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(i);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {

// One prompt: a string or an array of token ids (`where` names it in errors).
PromptInput one_prompt(const Json& v, const std::string& where) {
  PromptInput in;
  if (v.is_string()) {
    in.text = v.get<std::string>();
    return in;
  }
  if (!v.is_array()) throw bad_request(fmt::format("'{}' must be a string or an array of token ids", where), where, "invalid_type");
  in.is_tokens = true;
  for (const auto& t : v) {
    if (!t.is_number_integer()) throw bad_request(fmt::format("'{}' must be a string or an array of token ids", where), where, "invalid_type");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id > INT32_MAX) throw bad_request(fmt::format("token id {} is out of range", id), where, "invalid_value");
    in.tokens.push_back(static_cast<int32_t>(id));
  }
  return in;
}

}  // namespace

std::vector<PromptInput> parse_prompts(const Json& j) {
  const Json* p = field(j, "prompt");
  if (!p) throw bad_request("'prompt' is required", "prompt", "missing_required_parameter");
  // An array of strings or of arrays is several prompts; any other array is one prompt of token ids.
  const bool several = p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array());
  if (!several) return {one_prompt(*p, "prompt")};
  if (p->size() > static_cast<size_t>(kMaxPrompts))
    throw bad_request(fmt::format("at most {} prompts per request (got {})", kMaxPrompts, p->size()), "prompt", "invalid_value");
  std::vector<PromptInput> out;
  for (size_t i = 0; i < p->size(); ++i) {
    const Json& v = (*p)[i];
    if (!v.is_string() && !v.is_array()) throw bad_request(fmt::format("'prompt[{}]' must be a string or an array of token ids", i), fmt::format("prompt[{}]", i), "invalid_type");
    out.push_back(one_prompt(v, fmt::format("prompt[{}]", i)));
  }
  return out;
}

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace strata::server
