#pragma once
#include <chrono>

namespace strata {
// Monotonic wall clock in seconds.
inline double clock_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace strata
