#include "server/openai_api.h"

#include <fmt/format.h>

#include <chrono>
#include <optional>
#include <random>

#include "server/text_stream.h"

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

json parse_body(const std::string& body) {
  if (!valid_utf8(body)) throw bad_request("the request body is not valid UTF-8", "", "invalid_utf8");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    throw bad_request(fmt::format("the request body is not valid JSON: {}", e.what()), "", "invalid_json");
  }
  if (!j.is_object()) throw bad_request("the request body must be a JSON object", "", "invalid_json");
  return j;
}

namespace {

const json* field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

ApiError wrong_type(const char* name, const char* what) { return bad_request(fmt::format("'{}' must be {}", name, what), name, "invalid_type"); }

std::optional<double> number(const json& j, const char* name, double lo, double hi) {
  const json* f = field(j, name);
  if (!f) return std::nullopt;
  if (!f->is_number()) throw wrong_type(name, "a number");
  const double v = f->get<double>();
  if (!(v >= lo && v <= hi)) throw bad_request(fmt::format("'{}' must be between {} and {} (got {})", name, lo, hi, v), name, "invalid_value");
  return v;
}

std::optional<int64_t> integer(const json& j, const char* name, int64_t lo, int64_t hi) {
  const json* f = field(j, name);
  if (!f) return std::nullopt;
  if (!f->is_number_integer()) throw wrong_type(name, "an integer");
  if (f->is_number_unsigned() && f->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    throw bad_request(fmt::format("'{}' is out of range", name), name, "invalid_value");
  const int64_t v = f->get<int64_t>();
  if (v < lo || v > hi) throw bad_request(fmt::format("'{}' must be between {} and {} (got {})", name, lo, hi, v), name, "invalid_value");
  return v;
}

std::optional<bool> boolean(const json& j, const char* name) {
  const json* f = field(j, name);
  if (!f) return std::nullopt;
  if (!f->is_boolean()) throw wrong_type(name, "a boolean");
  return f->get<bool>();
}

}  // namespace

CommonParams parse_common(const json& j, const SamplerParams& defaults) {
  CommonParams p;
  p.sampling = defaults;
  if (const json* m = field(j, "model")) {
    if (!m->is_string()) throw wrong_type("model", "a string");
    p.model = m->get<std::string>();
  }
  p.stream = boolean(j, "stream").value_or(false);
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) throw wrong_type("stream_options", "an object");
    p.include_usage = boolean(*so, "include_usage").value_or(false);
  }
  // max_completion_tokens (newer) wins over max_tokens.
  auto mt = integer(j, "max_completion_tokens", 0, INT32_MAX);
  if (!mt) mt = integer(j, "max_tokens", 0, INT32_MAX);
  if (mt) p.max_tokens = static_cast<int>(*mt);
  if (auto n = integer(j, "n", 1, INT32_MAX); n && *n != 1) throw bad_request("only n = 1 is supported", "n", "unsupported_value");
  if (const json* st = field(j, "stop")) {
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
  if (auto v = number(j, "temperature", 0.0, 2.0)) p.sampling.temp = static_cast<float>(*v);
  if (auto v = number(j, "top_p", 0.0, 1.0)) p.sampling.top_p = static_cast<float>(*v);
  if (auto v = number(j, "presence_penalty", -2.0, 2.0)) p.sampling.presence_penalty = static_cast<float>(*v);
  if (auto v = number(j, "frequency_penalty", -2.0, 2.0)) p.sampling.frequency_penalty = static_cast<float>(*v);
  // Extensions (llama.cpp names).
  if (auto v = integer(j, "top_k", 0, INT32_MAX)) p.sampling.top_k = static_cast<int>(*v);
  if (auto v = number(j, "min_p", 0.0, 1.0)) p.sampling.min_p = static_cast<float>(*v);
  if (auto v = number(j, "repeat_penalty", 0.0, 10.0)) p.sampling.repeat_penalty = static_cast<float>(*v);
  p.ignore_eos = boolean(j, "ignore_eos").value_or(false);
  if (auto v = integer(j, "seed", INT64_MIN, INT64_MAX)) {
    p.sampling.seed = static_cast<uint64_t>(*v);
  } else {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    p.sampling.seed = rng();
  }
  return p;
}

std::vector<ChatMsg> parse_messages(const json& j) {
  const json* ms = field(j, "messages");
  if (!ms) throw bad_request("'messages' is required", "messages", "missing_required_parameter");
  if (!ms->is_array()) throw wrong_type("messages", "an array");
  if (ms->empty()) throw bad_request("'messages' must not be empty", "messages", "invalid_value");
  std::vector<ChatMsg> out;
  for (size_t i = 0; i < ms->size(); ++i) {
    const json& m = (*ms)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) throw bad_request(where + " must be an object", where, "invalid_type");
    const json* role = field(m, "role");
    if (!role || !role->is_string()) throw bad_request(where + ".role must be a string", where + ".role", "invalid_type");
    ChatMsg cm;
    cm.role = role->get<std::string>();
    if (cm.role != "system" && cm.role != "developer" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool")
      throw bad_request(fmt::format("{}.role '{}' is not one of system, developer, user, assistant, tool", where, cm.role), where + ".role",
                        "invalid_value");
    const json* c = field(m, "content");
    if (!c) {
      if (cm.role != "assistant") throw bad_request(where + ".content is required", where + ".content", "missing_required_parameter");
    } else if (c->is_string()) {
      cm.content = c->get<std::string>();
    } else if (c->is_array()) {
      for (const auto& part : *c) {
        const json* type = part.is_object() ? field(part, "type") : nullptr;
        const json* text = part.is_object() ? field(part, "text") : nullptr;
        if (!type || !type->is_string() || type->get<std::string>() != "text" || !text || !text->is_string())
          throw bad_request(where + ".content parts must be {\"type\": \"text\", \"text\": string}", where + ".content", "invalid_value");
        cm.content += text->get<std::string>();
      }
    } else {
      throw bad_request(where + ".content must be a string or an array of text parts", where + ".content", "invalid_type");
    }
    out.push_back(std::move(cm));
  }
  return out;
}

PromptInput parse_prompt(const json& j) {
  const json* p = field(j, "prompt");
  if (!p) throw bad_request("'prompt' is required", "prompt", "missing_required_parameter");
  const json* v = p;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) v = &(*p)[0];
  PromptInput in;
  if (v->is_string()) {
    in.text = v->get<std::string>();
    return in;
  }
  if (v->is_array()) {
    in.is_tokens = true;
    for (const auto& t : *v) {
      if (!t.is_number_integer()) {
        if (t.is_string() || t.is_array()) throw bad_request("only one prompt per request is supported", "prompt", "unsupported_value");
        throw bad_request("'prompt' must be a string or an array of token ids", "prompt", "invalid_type");
      }
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id > INT32_MAX) throw bad_request(fmt::format("token id {} is out of range", id), "prompt", "invalid_value");
      in.tokens.push_back(static_cast<int32_t>(id));
    }
    return in;
  }
  throw bad_request("'prompt' must be a string or an array of token ids", "prompt", "invalid_type");
}

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace strata::server
