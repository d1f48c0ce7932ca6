#pragma once
#include <chrono>
#include <ctime>

namespace strata {
// Monotonic wall clock in seconds.
inline double clock_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
// CPU seconds this process has used so far (every thread, user + system): steadier than the wall
// clock on a shared machine, which it does not count while another process runs.
inline double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
}  // namespace strata
