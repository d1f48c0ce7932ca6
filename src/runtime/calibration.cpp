#include "runtime/calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "core/error.h"
#include "core/units.h"

namespace strata {

std::string KnobSetting::options() const {
  std::string s;
  if (!route_cache.empty()) s += " --route-cache " + route_cache;
  if (moe_min_mass < 1.0f) s += fmt::format(" --moe-min-mass {}", moe_min_mass);
  if (moe_k > 0) s += fmt::format(" --moe-k {}", moe_k);
  if (miss_model) s += " --miss-model";
  return s.empty() ? "knobs off" : s.substr(1);
}

std::string KnobSetting::name() const {
  std::string s;
  if (!route_cache.empty()) s += "+route-cache=" + route_cache;
  if (moe_min_mass < 1.0f) s += fmt::format("+moe-min-mass={}", moe_min_mass);
  if (moe_k > 0) s += fmt::format("+moe-k={}", moe_k);
  if (miss_model) s += "+miss-model";
  return s.empty() ? "off" : s.substr(1);
}

namespace {

// A whole number, or (k_ok) k, k-N, Nk, against the model's k.
int knob_number(std::string_view t, int k, std::string_view spec) {
  const auto whole = [&](std::string_view d) {
    STRATA_CHECK(!d.empty() && d.size() < 8 && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; }),
                 "setting '{}': '{}' is not a whole number, k, k-N or Nk", spec, t);
    return std::stoi(std::string(d));
  };
  if (t == "k") return k;
  if (t.starts_with("k-")) return k - whole(t.substr(2));
  if (t.size() > 1 && t.back() == 'k') return whole(t.substr(0, t.size() - 1)) * k;
  return whole(t);
}

KnobSetting& add_option(KnobSetting& s, std::string_view opt, int k, int n_expert, std::string_view spec) {
  if (opt == "miss-model") {
    s.miss_model = true;
    return s;
  }
  const size_t eq = opt.find('=');
  STRATA_CHECK(eq != std::string_view::npos, "setting '{}': '{}' is not NAME=VALUE (route-cache, moe-min-mass, moe-k) or miss-model", spec, opt);
  const std::string_view key = opt.substr(0, eq), val = opt.substr(eq + 1);
  if (key == "route-cache") {
    const size_t comma = val.find(',');
    const int j = knob_number(val.substr(0, comma), k, spec);
    const int m = comma == std::string_view::npos ? std::min(2 * k, n_expert) : knob_number(val.substr(comma + 1), k, spec);
    STRATA_CHECK(j >= 0 && j <= k, "setting '{}': route-cache J = {} is not in 0..{} (the model's k)", spec, j, k);
    STRATA_CHECK(m >= k && m <= n_expert, "setting '{}': route-cache M = {} is not between the model's k ({}) and its experts ({})", spec, m, k, n_expert);
    s.route_cache = fmt::format("{},{}", j, m);
  } else if (key == "moe-min-mass") {
    char* end = nullptr;
    const std::string v(val);
    const float p = std::strtof(v.c_str(), &end);
    STRATA_CHECK(!v.empty() && end == v.c_str() + v.size() && p > 0.0f && p <= 1.0f, "setting '{}': moe-min-mass '{}' is not in (0, 1]", spec, val);
    s.moe_min_mass = p;
  } else if (key == "moe-k") {
    const int kk = knob_number(val, k, spec);
    STRATA_CHECK(kk >= 1 && kk <= k, "setting '{}': moe-k {} is not in 1..{} (the model's k)", spec, kk, k);
    s.moe_k = kk == k ? 0 : kk;
  } else {
    fail("setting '{}': unknown knob '{}' (route-cache, moe-min-mass, moe-k, miss-model)", spec, key);
  }
  return s;
}

}  // namespace

KnobSetting parse_knob_setting(std::string_view spec, int k, int n_expert) {
  KnobSetting s;
  if (spec == "off") return s;
  STRATA_CHECK(!spec.empty(), "an empty knob setting (give 'off' for the base)");
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t plus = std::min(spec.find('+', at), spec.size());
    add_option(s, spec.substr(at, plus - at), k, n_expert, spec);
    at = plus + 1;
  }
  return s;
}

std::vector<KnobSetting> parse_knob_settings(std::string_view list, int k, int n_expert) {
  std::vector<KnobSetting> out{KnobSetting{}};
  size_t at = 0;
  while (at <= list.size()) {
    const size_t semi = std::min(list.find(';', at), list.size());
    const KnobSetting s = parse_knob_setting(list.substr(at, semi - at), k, n_expert);
    if (std::none_of(out.begin(), out.end(), [&](const KnobSetting& o) { return o.name() == s.name(); })) out.push_back(s);
    at = semi + 1;
  }
  return out;
}

std::vector<KnobSetting> default_knob_grid(int k, int n_expert, bool standin) {
  std::vector<KnobSetting> out;
  std::vector<std::string_view> specs(kCalibrationGrid.begin(), kCalibrationGrid.end());
  if (standin) specs.insert(specs.end(), kCalibrationStandInGrid.begin(), kCalibrationStandInGrid.end());
  for (std::string_view spec : specs) {
    try {
      const KnobSetting s = parse_knob_setting(spec, k, n_expert);
      if (std::none_of(out.begin(), out.end(), [&](const KnobSetting& o) { return o.name() == s.name(); })) out.push_back(s);
    } catch (const Error&) {
      // A setting this model cannot take (J above its k, M above its experts): left out.
    }
  }
  return out;
}

std::string calibration_path(const std::string& dir, uint64_t model_key) { return fmt::format("{}/experts-{:016x}.calib.json", dir, model_key); }

uint64_t tokens_hash(std::span<const int32_t> tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens)
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<uint32_t>(t) >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  return h;
}

std::string serialize_calibration(const Calibration& c) {
  nlohmann::json settings = nlohmann::json::array();
  for (const CalibratedSetting& s : c.settings)
    settings.push_back({{"name", s.knobs.name()},
                        {"knobs", {{"moe_k", s.knobs.moe_k}, {"moe_min_mass", s.knobs.moe_min_mass}, {"route_cache", s.knobs.route_cache},
                                   {"miss_model", s.knobs.miss_model}}},
                        {"mean_kl", s.mean_kl},
                        {"p99_kl", s.p99_kl},
                        {"top1", s.top1},
                        {"bytes_per_token", s.bytes_per_token},
                        {"standin_bytes_per_token", s.standin_bytes_per_token}});
  nlohmann::json j = {{"format", std::string(kCalibrationFormat)},      {"version", kCalibrationVersion},
                      {"model_key", fmt::format("{:016x}", c.model_key)}, {"ram_budget", c.ram_budget},
                      {"text_hash", fmt::format("{:016x}", c.text_hash)}, {"scored_tokens", c.scored_tokens},
                      {"n_ctx", c.n_ctx},                  {"n_batch", c.n_batch}};
  if (!c.miss_model.empty()) {
    j["miss_model"] = c.miss_model;
    j["miss_model_key"] = fmt::format("{:016x}", c.miss_model_key);
  }
  j["settings"] = settings;
  return j.dump(1) + "\n";
}

namespace {

using nlohmann::json;

// The field `name` of `o` as a finite number in [lo, hi], else a message in `why`.
bool number_in(const json& o, const char* name, double lo, double hi, double* out, std::string* why) {
  const auto it = o.find(name);
  if (it == o.end() || !it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < lo || it->get<double>() > hi) {
    *why = fmt::format("'{}' is missing or not a number in [{}, {}]", name, lo, hi);
    return false;
  }
  *out = it->get<double>();
  return true;
}

bool hex_key(const json& o, const char* name, uint64_t* out, std::string* why) {
  const auto it = o.find(name);
  if (it == o.end() || !it->is_string() || it->get<std::string>().size() != 16) {
    *why = fmt::format("'{}' is missing or not 16 hex digits", name);
    return false;
  }
  const std::string s = it->get<std::string>();
  char* end = nullptr;
  *out = std::strtoull(s.c_str(), &end, 16);
  if (end != s.c_str() + s.size()) {
    *why = fmt::format("'{}' is not 16 hex digits", name);
    return false;
  }
  return true;
}

bool parse_setting(const json& e, CalibratedSetting* s, std::string* why) {
  if (!e.is_object() || !e.contains("knobs") || !e["knobs"].is_object()) {
    *why = "a setting has no 'knobs' object";
    return false;
  }
  const json& k = e["knobs"];
  double moe_k = 0, mass = 1;
  if (!number_in(k, "moe_k", 0, 1024, &moe_k, why) || !number_in(k, "moe_min_mass", 1e-6, 1, &mass, why)) return false;
  if (!k.contains("route_cache") || !k["route_cache"].is_string()) {
    *why = "'route_cache' is missing or not a string";
    return false;
  }
  const std::string rc = k["route_cache"].get<std::string>();
  const size_t comma = rc.find(',');
  const bool digits = std::all_of(rc.begin(), rc.end(), [](char c) { return (c >= '0' && c <= '9') || c == ','; });
  if (!rc.empty() && (!digits || rc.size() > 16 || comma == std::string::npos || comma == 0 || comma + 1 == rc.size() || rc.find(',', comma + 1) != std::string::npos)) {
    *why = fmt::format("'route_cache' '{}' is not J,M", rc);
    return false;
  }
  if (k.contains("miss_model") && !k["miss_model"].is_boolean()) {
    *why = "'miss_model' is not true or false";
    return false;
  }
  s->knobs.moe_k = static_cast<int>(moe_k);
  s->knobs.moe_min_mass = static_cast<float>(mass);
  s->knobs.route_cache = rc;
  s->knobs.miss_model = k.contains("miss_model") && k["miss_model"].get<bool>();
  if (e.is_object() && e.contains("standin_bytes_per_token") && !number_in(e, "standin_bytes_per_token", 0, 1e18, &s->standin_bytes_per_token, why))
    return false;
  return number_in(e, "mean_kl", 0, 1e9, &s->mean_kl, why) && number_in(e, "p99_kl", 0, 1e9, &s->p99_kl, why) &&
         number_in(e, "top1", 0, 1, &s->top1, why) && number_in(e, "bytes_per_token", 0, 1e18, &s->bytes_per_token, why);
}

}  // namespace

std::optional<Calibration> parse_calibration(std::string_view text, uint64_t model_key, std::string* why) {
  std::string w;
  std::string* msg = why ? why : &w;
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    *msg = "not a calibration file (malformed or truncated JSON)";
    return std::nullopt;
  }
  if (!j.contains("format") || j["format"] != std::string(kCalibrationFormat)) {
    *msg = fmt::format("not a calibration file ('format' is not \"{}\")", kCalibrationFormat);
    return std::nullopt;
  }
  if (!j.contains("version") || j["version"] != kCalibrationVersion) {
    *msg = fmt::format("calibration version {} (this build reads {})", j.contains("version") ? j["version"].dump() : "none", kCalibrationVersion);
    return std::nullopt;
  }
  Calibration c;
  double budget = 0, scored = 0, n_ctx = 0, n_batch = 0;
  if (!hex_key(j, "model_key", &c.model_key, msg) || !hex_key(j, "text_hash", &c.text_hash, msg) ||
      !number_in(j, "ram_budget", 0, 1.8e19, &budget, msg) || !number_in(j, "scored_tokens", 1, 1e15, &scored, msg) ||
      !number_in(j, "n_ctx", 1, 1 << 24, &n_ctx, msg) || !number_in(j, "n_batch", 1, 1 << 16, &n_batch, msg))
    return std::nullopt;
  if (c.model_key != model_key) {
    *msg = fmt::format("made for another model (key {:016x}, this model's {:016x})", c.model_key, model_key);
    return std::nullopt;
  }
  c.ram_budget = j["ram_budget"].get<uint64_t>();
  c.scored_tokens = static_cast<int64_t>(scored);
  c.n_ctx = static_cast<int>(n_ctx);
  c.n_batch = static_cast<int>(n_batch);
  if (!j.contains("settings") || !j["settings"].is_array() || j["settings"].empty() || j["settings"].size() > kMaxCalibrationSettings) {
    *msg = fmt::format("'settings' is missing or not an array of 1..{} settings", kMaxCalibrationSettings);
    return std::nullopt;
  }
  if (j.contains("miss_model")) {
    if (!j["miss_model"].is_string() || j["miss_model"].get<std::string>().empty() || j["miss_model"].get<std::string>().size() > kMaxCalibrationPath) {
      *msg = fmt::format("'miss_model' is not a file path of 1..{} bytes", kMaxCalibrationPath);
      return std::nullopt;
    }
    if (!hex_key(j, "miss_model_key", &c.miss_model_key, msg)) return std::nullopt;
    c.miss_model = j["miss_model"].get<std::string>();
  }
  for (const json& e : j["settings"]) {
    CalibratedSetting s;
    if (!parse_setting(e, &s, msg)) return std::nullopt;
    if (s.knobs.miss_model && c.miss_model.empty()) {
      *msg = fmt::format("setting '{}' uses a stand-in but the file names none ('miss_model')", s.knobs.name());
      return std::nullopt;
    }
    c.settings.push_back(std::move(s));
  }
  return c;
}

std::optional<Calibration> load_calibration(const std::string& path, uint64_t model_key, std::string* why) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (why) why->clear();
    return std::nullopt;
  }
  std::ifstream f(path, std::ios::binary);
  std::string text(kMaxCalibrationFileBytes + 1, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (f.bad() || (!f && !f.eof())) {
    if (why) *why = fmt::format("{}: cannot read", path);
    return std::nullopt;
  }
  text.resize(static_cast<size_t>(f.gcount()));
  if (text.size() > kMaxCalibrationFileBytes) {
    if (why) *why = fmt::format("{}: larger than {} (not a calibration file)", path, format_bytes(kMaxCalibrationFileBytes));
    return std::nullopt;
  }
  auto c = parse_calibration(text, model_key, why);
  if (!c && why) *why = path + ": " + *why;
  return c;
}

void save_calibration(const std::string& path, const Calibration& c) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  static std::atomic<uint64_t> serial{0};
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), serial++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    STRATA_CHECK(f.good(), "calibration: cannot create {}", tmp);
    f << serialize_calibration(c);
    f.close();
    if (!f) {
      std::filesystem::remove(tmp, ec);
      fail("calibration: cannot write {}", tmp);
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ec2;
    std::filesystem::remove(tmp, ec2);
    fail("calibration: cannot write {}: {}", path, ec.message());
  }
}

std::optional<size_t> choose_setting(const Calibration& c, double budget, bool standin_ok) {
  std::optional<size_t> best;
  for (size_t i = 0; i < c.settings.size(); ++i) {
    const CalibratedSetting& s = c.settings[i];
    if (!(s.mean_kl <= budget) || (s.knobs.miss_model && !standin_ok)) continue;
    if (!best) {
      best = i;
      continue;
    }
    const CalibratedSetting& b = c.settings[*best];
    if (s.bytes_per_token < b.bytes_per_token || (s.bytes_per_token == b.bytes_per_token && s.mean_kl < b.mean_kl)) best = i;
  }
  return best;
}

std::string QualityChoice::describe() const {
  if (!applied) return fmt::format("warning: --quality-budget {}: {}; running lossless (knobs off)", budget, why);
  const std::string under = calibrated_ram_budget ? "--ram-budget " + format_bytes(calibrated_ram_budget) : std::string("no --ram-budget");
  std::string opts = setting.knobs.options();
  if (!standin.empty()) opts += " " + standin;
  return fmt::format("quality budget {}: {} (calibrated in {}: mean KL {:.5f}, p99 KL {:.4f}, top-1 {:.2f}%, {} of experts read per token under {}){}",
                     budget, opts, file, setting.mean_kl, setting.p99_kl, 100.0 * setting.top1,
                     format_bytes(static_cast<uint64_t>(setting.bytes_per_token)), under, note.empty() ? "" : "; " + note);
}

nlohmann::json quality_choice_json(const QualityChoice& q) {
  nlohmann::json j = {{"budget", q.budget}, {"file", q.file}, {"applied", q.applied}};
  if (!q.applied) {
    j["warning"] = q.why;
    return j;
  }
  j["setting"] = q.setting.knobs.name();
  j["options"] = q.setting.knobs.options();
  j["expected_mean_kl"] = q.setting.mean_kl;
  j["expected_p99_kl"] = q.setting.p99_kl;
  j["expected_top1"] = q.setting.top1;
  j["expected_bytes_per_token"] = q.setting.bytes_per_token;
  j["miss_model"] = q.standin.empty() ? nlohmann::json(nullptr) : nlohmann::json(q.standin);
  if (!q.note.empty()) j["note"] = q.note;
  j["calibrated_ram_budget"] = q.calibrated_ram_budget;
  return j;
}

}  // namespace strata
