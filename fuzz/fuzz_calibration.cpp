// libFuzzer target for the calibration file --quality-budget reads (runtime/calibration.h) and the
// knob specs of strata calibrate --settings: parse_calibration on arbitrary bytes returns a
// calibration or nullopt with a reason (never throws); a parsed one is written back and re-read
// unchanged, and the chooser picks a setting within any budget. parse_knob_setting on the same
// bytes returns a setting or throws strata::Error. Nothing else: no crash, no other exception.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "runtime/calibration.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)strata::parse_knob_setting(text, 4, 64);
  } catch (const strata::Error&) {
  }
  std::string why;
  // The seed's model key (fuzz/corpus-calibration/tiny-default-grid.json); any other is a foreign file.
  const auto d = strata::parse_calibration(text, 0x305a3355b8d49657ull, &why);
  if (!d) {
    if (why.empty()) __builtin_trap();  // a refusal always says why
    return 0;
  }
  const auto e = strata::parse_calibration(strata::serialize_calibration(*d), d->model_key, &why);
  if (!e || e->settings.size() != d->settings.size() || e->ram_budget != d->ram_budget || e->miss_model != d->miss_model) __builtin_trap();
  for (size_t i = 0; i < d->settings.size(); ++i)
    if (e->settings[i].knobs.name() != d->settings[i].knobs.name() || e->settings[i].mean_kl != d->settings[i].mean_kl) __builtin_trap();
  for (double budget : {0.0, 0.001, 1e9})
  {
    if (const auto i = strata::choose_setting(*d, budget); i && !(d->settings[*i].mean_kl <= budget)) __builtin_trap();
    if (const auto i = strata::choose_setting(*d, budget, false); i && d->settings[*i].knobs.miss_model) __builtin_trap();
  }
  return 0;
}
