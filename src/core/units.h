#pragma once
// Human byte sizes: "64G", "512M", "1.5GiB", "12345" <-> uint64.
#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

// Parses a byte count with an optional K/M/G/T suffix (binary: 1K = 1024), optionally
// followed by "B" or "iB". Throws strata::Error on anything else.
uint64_t parse_bytes(std::string_view s);
// "1.50 GiB", "312.00 KiB", "17 B".
std::string format_bytes(uint64_t n);

}  // namespace strata
