#pragma once
// Errors: one exception type whose message names the file, offset or tensor.
// Hot paths never throw; loading, parsing and request validation do.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace strata {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace strata

// Checks that stay in release builds (unlike assert).
#define STRATA_CHECK(cond, ...)                \
  do {                                         \
    if (!(cond)) ::strata::fail(__VA_ARGS__);  \
  } while (0)
