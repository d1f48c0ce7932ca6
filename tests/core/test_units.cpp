// Byte sizes as --ram-budget takes them: binary suffixes K/M/G/T (optionally followed by B or
// iB, any case), fractions, and a clear error for anything else.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/units.h"

using namespace strata;

TEST(Units, ParsesBinarySuffixes) {
  EXPECT_EQ(parse_bytes("64G"), 64ull << 30);
  EXPECT_EQ(parse_bytes("96M"), 96ull << 20);
  EXPECT_EQ(parse_bytes("512K"), 512ull << 10);
  EXPECT_EQ(parse_bytes("2T"), 2ull << 40);
  EXPECT_EQ(parse_bytes("1.5G"), 1610612736ull);  // 1.5 * 2^30
  EXPECT_EQ(parse_bytes("0.5K"), 512ull);
  EXPECT_EQ(parse_bytes("12345"), 12345ull);
  EXPECT_EQ(parse_bytes("0"), 0ull);
  EXPECT_EQ(parse_bytes("17B"), 17ull);
}

TEST(Units, SuffixSpellings) {
  for (const char* s : {"64G", "64g", "64GB", "64gb", "64GiB", "64gib", "64Gib"}) EXPECT_EQ(parse_bytes(s), 64ull << 30) << s;
  for (const char* s : {"3K", "3k", "3KB", "3KiB"}) EXPECT_EQ(parse_bytes(s), 3072ull) << s;
  for (const char* s : {"7M", "7m", "7MB", "7MiB"}) EXPECT_EQ(parse_bytes(s), 7ull << 20) << s;
  EXPECT_EQ(parse_bytes("1TiB"), 1ull << 40);
}

TEST(Units, RejectsBadInput) {
  for (const char* s : {"", "G", "abc", "-1", "-1G", "64X", "64 G", "64G ", "1.5.5G", "64GG", "64GiBB", "nan", "inf", "infG", "1e30",
                        "20000000T", "G64", "6 4G"}) {
    try {
      const uint64_t v = parse_bytes(s);
      ADD_FAILURE() << "'" << s << "' parsed as " << v;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("invalid byte size"), std::string::npos) << e.what();
    }
  }
}

TEST(Units, ErrorNamesTheInputAndTheProblem) {
  try {
    parse_bytes("64X");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'64X'"), std::string::npos) << m;
    EXPECT_NE(m.find("unknown suffix 'X'"), std::string::npos) << m;
  }
}

TEST(Units, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(96ull << 20), "96.00 MiB");
  EXPECT_EQ(format_bytes(1610612736ull), "1.50 GiB");
  EXPECT_EQ(format_bytes(3ull << 40), "3.00 TiB");
  EXPECT_EQ(format_bytes(4096ull << 40), "4096.00 TiB");  // no unit past TiB
}
