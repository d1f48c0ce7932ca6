#pragma once
// Waiting on a condition instead of sleeping for a guessed time: polls `cond` until it holds.
// The deadline is generous (60 s by default) so that it only fails when something is really
// stuck, never because a machine is slow or loaded (sanitizers, shared CI runners).
#include <chrono>
#include <thread>

namespace strata::test {

inline constexpr std::chrono::seconds kStuckAfter{60};

// True as soon as cond() holds; false if it still does not after `timeout`.
template <typename F>
bool wait_until(F&& cond, std::chrono::milliseconds timeout = kStuckAfter) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() >= end) return cond();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polling interval, not a guess at the condition
  }
}

}  // namespace strata::test
