// The calibration file of --quality-budget (runtime/calibration.h): it round-trips, the chooser
// takes the fewest bytes per token within the budget, and truncated, foreign-model, garbage or
// ill-typed files are refused with a reason (never a throw); knob specs parse against the model's k.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "runtime/calibration.h"

namespace strata {
namespace {

constexpr uint64_t kCalibKey = 0x0123456789abcdefull;

CalibratedSetting calib_setting(const std::string& rc, float mass, double kl, double bytes) {
  CalibratedSetting s;
  s.knobs.route_cache = rc;
  s.knobs.moe_min_mass = mass;
  s.mean_kl = kl;
  s.p99_kl = 10 * kl;
  s.top1 = 1.0 - kl;
  s.bytes_per_token = bytes;
  return s;
}

// off; A; B and C at the same bytes (C the lower KL); D the fewest bytes and the most KL.
Calibration calib_synthetic() {
  Calibration c;
  c.model_key = kCalibKey;
  c.ram_budget = 64ull << 20;
  c.text_hash = 0xfeedfacecafebeefull;
  c.scored_tokens = 381;
  c.n_ctx = 256;
  c.n_batch = 1;
  c.settings = {calib_setting("", 1.0f, 0.0, 100), calib_setting("3,8", 1.0f, 0.001, 80), calib_setting("2,8", 1.0f, 0.005, 50), calib_setting("", 0.9f, 0.004, 50),
                calib_setting("1,16", 0.8f, 0.02, 10)};
  return c;
}

TEST(Calibration, RoundTrips) {
  Calibration c = calib_synthetic();
  c.settings[4].knobs.moe_k = 3;
  std::string why;
  const auto back = parse_calibration(serialize_calibration(c), kCalibKey, &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->model_key, c.model_key);
  EXPECT_EQ(back->ram_budget, c.ram_budget);
  EXPECT_EQ(back->text_hash, c.text_hash);
  EXPECT_EQ(back->scored_tokens, c.scored_tokens);
  EXPECT_EQ(back->n_ctx, c.n_ctx);
  EXPECT_EQ(back->n_batch, c.n_batch);
  ASSERT_EQ(back->settings.size(), c.settings.size());
  for (size_t i = 0; i < c.settings.size(); ++i) {
    const CalibratedSetting &a = c.settings[i], &b = back->settings[i];
    EXPECT_EQ(b.knobs.name(), a.knobs.name()) << i;
    EXPECT_EQ(b.knobs.moe_k, a.knobs.moe_k) << i;
    EXPECT_EQ(b.knobs.moe_min_mass, a.knobs.moe_min_mass) << i;
    EXPECT_EQ(b.knobs.route_cache, a.knobs.route_cache) << i;
    EXPECT_EQ(b.mean_kl, a.mean_kl) << i;
    EXPECT_EQ(b.p99_kl, a.p99_kl) << i;
    EXPECT_EQ(b.top1, a.top1) << i;
    EXPECT_EQ(b.bytes_per_token, a.bytes_per_token) << i;
  }
  EXPECT_EQ(c.settings[4].knobs.name(), "route-cache=1,16+moe-min-mass=0.8+moe-k=3");
  EXPECT_EQ(c.settings[4].knobs.options(), "--route-cache 1,16 --moe-min-mass 0.8 --moe-k 3");
  EXPECT_EQ(c.settings[0].knobs.options(), "knobs off");

  // On disk beside the warm-start statistics: saved, loaded back; a missing file is no error.
  const std::string dir = "/tmp/strata_calib_unit_" + std::to_string(::getpid());
  const std::string path = calibration_path(dir, kCalibKey);
  EXPECT_EQ(path, dir + "/experts-0123456789abcdef.calib.json");
  save_calibration(path, c);
  const auto loaded = load_calibration(path, kCalibKey, &why);
  ASSERT_TRUE(loaded) << why;
  EXPECT_EQ(loaded->settings.size(), c.settings.size());
  why = "x";
  EXPECT_FALSE(load_calibration(dir + "/none.calib.json", kCalibKey, &why));
  EXPECT_TRUE(why.empty()) << why;
  std::filesystem::remove_all(dir);
}

TEST(Calibration, ChooserTakesTheFewestBytesWithinTheBudget) {
  const Calibration c = calib_synthetic();
  EXPECT_EQ(choose_setting(c, 0.0), 0u);       // only the base fits: knobs off
  EXPECT_EQ(choose_setting(c, 0.002), 1u);     // A
  EXPECT_EQ(choose_setting(c, 0.0045), 3u);    // C (B's KL is over)
  EXPECT_EQ(choose_setting(c, 0.005), 3u);     // B and C read as much: the lower KL
  EXPECT_EQ(choose_setting(c, 1.0), 4u);       // above all: the fewest bytes
  Calibration lossy = c;
  lossy.settings.erase(lossy.settings.begin());  // no base in the table
  EXPECT_FALSE(choose_setting(lossy, 0.0005));   // below every setting: none (knobs off)
}

// Settings with the stand-in (--miss-model): they round-trip with the file's path and key, the
// chooser passes them over when the stand-in cannot be used, and a file whose setting uses a
// stand-in it does not name is refused.
TEST(Calibration, StandInSettingsRoundTripAndArePassedOverWithoutTheFile) {
  Calibration c = calib_synthetic();
  c.miss_model = "/models/q2_k.gguf";
  c.miss_model_key = 0x1111222233334444ull;
  CalibratedSetting si = calib_setting("", 1.0f, 0.0002, 40);
  si.knobs.miss_model = true;
  si.standin_bytes_per_token = 12.5;
  c.settings.push_back(si);
  std::string why;
  const auto back = parse_calibration(serialize_calibration(c), kCalibKey, &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->miss_model, c.miss_model);
  EXPECT_EQ(back->miss_model_key, c.miss_model_key);
  ASSERT_EQ(back->settings.size(), c.settings.size());
  EXPECT_TRUE(back->settings.back().knobs.miss_model);
  EXPECT_FALSE(back->settings.front().knobs.miss_model);
  EXPECT_EQ(back->settings.back().standin_bytes_per_token, 12.5);
  EXPECT_EQ(back->settings.back().knobs.name(), "miss-model");
  EXPECT_EQ(back->settings.back().knobs.options(), "--miss-model");
  EXPECT_EQ(choose_setting(*back, 0.003), 5u);                       // the stand-in: fewer bytes than A within the budget
  EXPECT_EQ(choose_setting(*back, 0.003, /*standin_ok=*/false), 1u);  // without it: A
  // A file from before stand-ins (no miss_model fields) still reads: no setting uses one.
  const auto old = parse_calibration(serialize_calibration(calib_synthetic()), kCalibKey, &why);
  ASSERT_TRUE(old) << why;
  EXPECT_TRUE(old->miss_model.empty());
  // A stand-in setting without the file's stand-in: refused naming it.
  Calibration orphan = c;
  orphan.miss_model.clear();
  EXPECT_FALSE(parse_calibration(serialize_calibration(orphan), kCalibKey, &why));
  EXPECT_NE(why.find("'miss_model'"), std::string::npos) << why;
}

TEST(Calibration, BadFilesAreRefusedWithAReason) {
  const std::string good = serialize_calibration(calib_synthetic());
  std::string why;
  for (size_t n : {size_t{0}, size_t{1}, good.size() / 3, good.size() / 2, good.size() - 3}) {
    EXPECT_FALSE(parse_calibration(good.substr(0, n), kCalibKey, &why)) << n;
    EXPECT_NE(why.find("truncated"), std::string::npos) << n << ": " << why;
  }
  EXPECT_FALSE(parse_calibration(good, kCalibKey + 1, &why));
  EXPECT_NE(why.find("another model"), std::string::npos) << why;
  EXPECT_FALSE(parse_calibration(std::string("\x00\xff garbage {{", 14), kCalibKey, &why));
  EXPECT_NE(why.find("not a calibration file"), std::string::npos) << why;
  EXPECT_FALSE(parse_calibration(R"({"format": "other"})", kCalibKey, &why));
  EXPECT_NE(why.find("format"), std::string::npos) << why;
  const auto edited = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  const std::pair<std::string, std::string> cases[][2] = {
      {{"\"version\": 1", "\"version\": 2"}, {"version", ""}},
      {{"\"mean_kl\": 0.0", "\"mean_kl\": \"low\""}, {"mean_kl", ""}},
      {{"\"top1\": 1.0", "\"top1\": 1.5"}, {"top1", ""}},
      {{"\"route_cache\": \"3,8\"", "\"route_cache\": \"3;8\""}, {"route_cache", ""}},
      {{"\"model_key\": \"0123456789abcdef\"", "\"model_key\": 5"}, {"model_key", ""}},
  };
  for (const auto& c : cases) {
    const std::string text = edited(c[0].first, c[0].second);
    EXPECT_FALSE(parse_calibration(text, kCalibKey, &why)) << c[0].second;
    EXPECT_NE(why.find(c[1].first), std::string::npos) << c[0].second << ": " << why;
  }
}

TEST(Calibration, KnobSpecsParseAgainstTheModel) {
  EXPECT_EQ(parse_knob_setting("route-cache=k-1,2k", 4, 64).route_cache, "3,8");
  EXPECT_EQ(parse_knob_setting("route-cache=1", 4, 64).route_cache, "1,8");
  const KnobSetting both = parse_knob_setting("route-cache=2,8+moe-min-mass=0.9+moe-k=3", 4, 64);
  EXPECT_EQ(both.name(), "route-cache=2,8+moe-min-mass=0.9+moe-k=3");
  EXPECT_EQ(parse_knob_setting("moe-k=k", 4, 64).moe_k, 0);  // the model's k: off
  EXPECT_TRUE(parse_knob_setting("off", 4, 64).off());
  for (const auto& [bad, msg] : {std::pair{"route-cache=5,8", "J = 5"}, {"route-cache=1,99", "M = 99"}, {"moe-min-mass=0", "(0, 1]"},
                                 {"moe-min-mass=x", "(0, 1]"}, {"warp=1", "unknown knob"}, {"route-cache", "NAME=VALUE"}, {"route-cache=1,q", "whole number"}}) {
    try {
      parse_knob_setting(bad, 4, 64);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(msg), std::string::npos) << bad << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << bad << ": " << e.what();
    }
  }
  const std::vector<KnobSetting> list = parse_knob_settings("route-cache=1,16;moe-min-mass=0.8;route-cache=1,16", 4, 64);
  ASSERT_EQ(list.size(), 3u);  // the base first, the repeat dropped
  EXPECT_TRUE(list[0].off());
  const std::vector<KnobSetting> grid = default_knob_grid(4, 64);
  EXPECT_EQ(grid.size(), kCalibrationGrid.size());
  EXPECT_TRUE(grid[0].off());
  const std::vector<KnobSetting> with = default_knob_grid(4, 64, /*standin=*/true);
  ASSERT_EQ(with.size(), kCalibrationGrid.size() + kCalibrationStandInGrid.size());
  EXPECT_EQ(with.back().name(), "route-cache=2,8+miss-model");
  EXPECT_TRUE(parse_knob_setting("miss-model", 4, 64).miss_model);
  EXPECT_FALSE(parse_knob_setting("miss-model", 4, 64).off());
  // k = 2 of 6 experts: route-cache 2,8 and 1,16 (M past 6) are left out, k-1,2k is 1,4.
  const std::vector<KnobSetting> small = default_knob_grid(2, 6);
  for (const KnobSetting& s : small) EXPECT_TRUE(s.route_cache.empty() || s.route_cache == "1,4") << s.name();
  EXPECT_EQ(small.size(), 6u);
}

}  // namespace
}  // namespace strata
