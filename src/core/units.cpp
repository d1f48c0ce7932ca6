#include "core/units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace strata {

uint64_t parse_bytes(std::string_view s) {
  std::string str(s);
  if (str.empty()) fail("invalid byte size '': empty");
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(str.c_str(), &end);
  if (end == str.c_str() || errno != 0 || !(v >= 0) || !std::isfinite(v))
    fail("invalid byte size '{}': expected a number with optional K/M/G/T suffix", s);
  std::string suf(end);
  for (auto& c : suf) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mul = 1;
  if (suf.empty() || suf == "B") mul = 1;
  else if (suf == "K" || suf == "KB" || suf == "KIB") mul = 1024.0;
  else if (suf == "M" || suf == "MB" || suf == "MIB") mul = 1024.0 * 1024;
  else if (suf == "G" || suf == "GB" || suf == "GIB") mul = 1024.0 * 1024 * 1024;
  else if (suf == "T" || suf == "TB" || suf == "TIB") mul = 1024.0 * 1024 * 1024 * 1024;
  else fail("invalid byte size '{}': unknown suffix '{}'", s, end);
  double r = v * mul;
  if (r >= 1.8e19) fail("invalid byte size '{}': too large", s);
  return static_cast<uint64_t>(std::llround(r));
}

std::string format_bytes(uint64_t n) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (n < 1024) return fmt::format("{} B", n);
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace strata
