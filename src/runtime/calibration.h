#pragma once
// Calibration of issue 37's lossy routing knobs (strata calibrate; --quality-budget KL): what each
// knob setting costs in KL divergence from the knobs-off logits and what it saves in expert bytes
// read per token, measured on a text under a RAM budget, kept in a small versioned JSON file beside
// the model's warm-start statistics (same directory, same model key, suffix .calib.json):
//   {"format": "strata-calibration", "version": 1, "model_key": "<16 hex>", "ram_budget": B,
//    "text_hash": "<16 hex>", "scored_tokens": N, "n_ctx": C, "n_batch": b,
//    "miss_model": "/path/standin.gguf", "miss_model_key": "<16 hex>",          (when calibrated with one)
//    "settings": [{"name": "route-cache=2,8", "knobs": {"moe_k": 0, "moe_min_mass": 1, "route_cache": "2,8", "miss_model": false},
//                  "mean_kl": x, "p99_kl": x, "top1": x, "bytes_per_token": x, "standin_bytes_per_token": x}, ...]}
// (knobs.miss_model, standin_bytes_per_token and the top-level miss_model fields may be absent: false, 0, none).
// A budget then picks the setting with the fewest bytes per token whose mean KL fits. Loading never
// throws: a missing, truncated, malformed or foreign-model (other key) file is reported in `why`.
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

inline constexpr int kCalibrationVersion = 1;
inline constexpr std::string_view kCalibrationFormat = "strata-calibration";
// The largest calibration file read (a real one is a few KiB).
inline constexpr size_t kMaxCalibrationFileBytes = 1 << 20;
inline constexpr size_t kMaxCalibrationSettings = 256;

// One knob setting as the command line gives it (--moe-k, --moe-min-mass, --route-cache J,M, and
// --miss-model with the calibration's stand-in file).
struct KnobSetting {
  int moe_k = 0;             // 0: the model's k
  float moe_min_mass = 1.0f;  // 1: every chosen expert
  std::string route_cache;   // "J,M", or "" (off)
  bool miss_model = false;   // misses computed from the stand-in (Calibration::miss_model)
  bool off() const { return moe_k == 0 && moe_min_mass >= 1.0f && route_cache.empty() && !miss_model; }
  // The command-line options ("--route-cache 2,8 --moe-min-mass 0.9 --miss-model"), "knobs off" when off.
  std::string options() const;
  // The spec form parse_knob_setting reads ("route-cache=2,8+moe-min-mass=0.9+miss-model", "off").
  std::string name() const;
};

// strata calibrate's default grid, as specs (k: the model's experts per token). Settings a model
// cannot take (J above its k, M above its experts) are left out.
inline constexpr std::array<std::string_view, 9> kCalibrationGrid = {
    "off",
    "route-cache=k-1,2k",
    "route-cache=2,8",
    "route-cache=1,16",
    "moe-min-mass=0.95",
    "moe-min-mass=0.9",
    "moe-min-mass=0.8",
    "route-cache=k-1,2k+moe-min-mass=0.95",
    "route-cache=2,8+moe-min-mass=0.9",
};
// Added to the grid when strata calibrate is given a stand-in (--miss-model FILE).
inline constexpr std::array<std::string_view, 3> kCalibrationStandInGrid = {
    "miss-model",
    "route-cache=k-1,2k+miss-model",
    "route-cache=2,8+miss-model",
};
// The longest stand-in path a calibration file holds.
inline constexpr size_t kMaxCalibrationPath = 4096;

// A spec: "off", or options joined by '+': route-cache=J,M (J and M whole numbers or k, k-N, Nk),
// moe-min-mass=P (0 < P <= 1), moe-k=K (1..k), miss-model. Checked against the model's k and experts per
// layer; throws strata::Error naming the spec.
KnobSetting parse_knob_setting(std::string_view spec, int k, int n_expert);
// A ';'-separated list of specs; "off" (the base) is put first when missing, repeats dropped.
std::vector<KnobSetting> parse_knob_settings(std::string_view list, int k, int n_expert);
// kCalibrationGrid (and with a stand-in kCalibrationStandInGrid) for a model, without the settings it cannot take.
std::vector<KnobSetting> default_knob_grid(int k, int n_expert, bool standin = false);

struct CalibratedSetting {
  KnobSetting knobs;
  double mean_kl = 0, p99_kl = 0, top1 = 1;
  double bytes_per_token = 0;  // expert bytes read per evaluated token (the stand-in's included)
  double standin_bytes_per_token = 0;  // of those, the stand-in's (what its experts' products read at most)
};

struct Calibration {
  uint64_t model_key = 0;   // experts/warm_stats.h model_identity
  uint64_t ram_budget = 0;  // --ram-budget in bytes (0: none)
  uint64_t text_hash = 0;   // tokens_hash of the evaluated tokens
  int64_t scored_tokens = 0;
  int n_ctx = 0, n_batch = 0;
  std::string miss_model;       // the stand-in file of the miss-model settings ("": none)
  uint64_t miss_model_key = 0;  // its model_identity
  std::vector<CalibratedSetting> settings;
};

// <dir>/experts-<key>.calib.json, beside warm_stats_path(dir, key).
std::string calibration_path(const std::string& dir, uint64_t model_key);
// FNV-1a over the token ids.
uint64_t tokens_hash(std::span<const int32_t> tokens);

std::string serialize_calibration(const Calibration& c);
// Checks the format, version, model key and every field's type and range; nullopt with `why` set
// otherwise.
std::optional<Calibration> parse_calibration(std::string_view text, uint64_t model_key, std::string* why);
// nullopt with `why` empty when the file does not exist.
std::optional<Calibration> load_calibration(const std::string& path, uint64_t model_key, std::string* why);
// Writes a temporary file beside `path` and renames it over it (creates the directory). Throws
// strata::Error naming the file.
void save_calibration(const std::string& path, const Calibration& c);

// The setting with the fewest bytes per token whose mean KL is at most `budget` (ties: the lower
// KL, then the earlier), among those without the stand-in unless `standin_ok`; nullopt when none is.
std::optional<size_t> choose_setting(const Calibration& c, double budget, bool standin_ok = true);

// What --quality-budget did, for the run's report and the server's /props.
struct QualityChoice {
  double budget = 0;
  std::string file;
  bool applied = false;  // false: the file could not be used (`why`); knobs off
  std::string why;
  CalibratedSetting setting;  // when applied
  std::string standin;        // the stand-in file when the setting uses it
  std::string note;           // why a setting with the stand-in was passed over ("": none was)
  uint64_t calibrated_ram_budget = 0;
  std::string describe() const;  // one line
};
nlohmann::json quality_choice_json(const QualityChoice& q);

}  // namespace strata
