// Hand-made malformed GGUF files: each must be rejected with a strata::Error that names the
// file, the offset and the specific problem, both through GgufModel::open (a file on disk) and
// GgufFile::parse (a buffer). None may crash, hang or allocate in proportion to a bogus count.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_util.h"

namespace strata::test {
namespace {

constexpr uint32_t kF32 = 0, kQ4_K = 12;

// Asserts that `bytes` is rejected with a message holding the file name, "offset" and `what`.
void expect_rejected(const std::string& bytes, const std::vector<std::string>& what) {
  TempDir dir;
  const std::string path = dir.write("bad.gguf", bytes);
  std::string msg;
  try {
    GgufModel::open(path);
    ADD_FAILURE() << "GgufModel::open accepted a malformed file";
    return;
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("offset"), std::string::npos) << msg;
  for (const auto& w : what) EXPECT_NE(msg.find(w), std::string::npos) << "expected '" << w << "' in: " << msg;

  // Same verdict over an in-memory buffer, named in the message.
  try {
    GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "buffer.gguf");
    ADD_FAILURE() << "GgufFile::parse accepted a malformed buffer";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("buffer.gguf"), std::string::npos) << m;
    for (const auto& w : what) EXPECT_NE(m.find(w), std::string::npos) << "expected '" << w << "' in: " << m;
  }
}

// A small valid file with one tensor, from the writer.
std::string valid_file() {
  GgufWriter w;
  w.set_string("general.architecture", "test");
  std::vector<float> x(64, 1.0f);
  w.add_tensor("w", GgmlType::F32, {64}, x.data(), x.size() * 4);
  return w.to_bytes();
}

// --- truncation ----------------------------------------------------------------------------

TEST(GgufMalformed, EmptyFile) { expect_rejected("", {"truncated", "magic", "offset 0"}); }
TEST(GgufMalformed, TruncatedInMagic) { expect_rejected("GG", {"truncated", "magic"}); }
TEST(GgufMalformed, TruncatedInVersion) { expect_rejected(Raw().u32(kGgufMagic).u16(3).b, {"truncated", "version", "offset 4"}); }
TEST(GgufMalformed, TruncatedInTensorCount) { expect_rejected(Raw().u32(kGgufMagic).u32(3).u32(0).b, {"truncated", "tensor count"}); }
TEST(GgufMalformed, TruncatedInMetadataCount) {
  expect_rejected(Raw().u32(kGgufMagic).u32(3).u64(0).u32(0).b, {"truncated", "metadata count", "offset 16"});
}
// The count sanity checks (every kv takes >= 13 bytes, every tensor info >= 32) fire before
// a too-short file is read further, so truncation cases keep enough bytes after the counts.
TEST(GgufMalformed, TruncatedInKey) {
  Raw r;
  r.header(0, 1).u64(20).bytes("general.ar");  // key length 20, 10 bytes present
  expect_rejected(r.b, {"metadata key length 20 exceeds the file", "offset 24"});
}
TEST(GgufMalformed, TruncatedInKeyLength) {
  Raw r;
  r.header(0, 2).kv_str("general.name", std::string(20, 'x')).u32(7);  // second key: half a length
  expect_rejected(r.b, {"truncated file while reading metadata key", "offset 76"});
}
TEST(GgufMalformed, TruncatedInValueType) {
  Raw r;
  r.header(0, 1).str("general.name").u16(8);
  expect_rejected(r.b, {"truncated", "metadata value type"});
}
TEST(GgufMalformed, TruncatedInValue) {
  Raw r;
  r.header(0, 1).str("general.alignment").type(GgufType::U32).u16(32);
  expect_rejected(r.b, {"truncated", "u32"});
}
TEST(GgufMalformed, TruncatedInArray) {
  Raw r;
  r.header(0, 1).str("a").type(GgufType::ARRAY).type(GgufType::I32).u32(3);  // half an array length
  expect_rejected(r.b, {"truncated", "array length"});
}
TEST(GgufMalformed, TruncatedInArrayData) {
  Raw r;
  r.header(0, 1).str("a").type(GgufType::ARRAY).type(GgufType::I32).u64(4).u32(1).u32(2);  // 2 of 4 i32
  expect_rejected(r.b, {"array of 4 i32 exceeds the file"});
}
TEST(GgufMalformed, TruncatedInStringArray) {
  Raw r;
  r.header(0, 1).str("a").type(GgufType::ARRAY).type(GgufType::STRING).u64(2).str("x").u64(9).bytes("abc");
  expect_rejected(r.b, {"string array element length 9 exceeds the file"});
}
TEST(GgufMalformed, TruncatedInTensorInfo) {
  Raw r;
  r.header(1, 1).kv_str("general.name", std::string(32, 'x')).str("w").u32(2).u64(32);  // 2nd dimension missing
  expect_rejected(r.b, {"truncated file while reading tensor dimension"});
}
TEST(GgufMalformed, TruncatedInTensorType) {
  Raw r;
  r.header(1, 1).kv_str("general.name", std::string(32, 'x')).str("w").u32(1).u64(32).u16(0);
  expect_rejected(r.b, {"truncated file while reading tensor type"});
}
TEST(GgufMalformed, TruncatedInTensorOffset) {
  Raw r;
  r.header(1, 1).kv_str("general.name", std::string(32, 'x')).str("w").u32(1).u64(8).u32(0).u32(0);
  expect_rejected(r.b, {"truncated file while reading tensor data offset"});
}
TEST(GgufMalformed, TruncatedInTensorData) {
  std::string b = valid_file();
  b.resize(b.size() - 100);  // the 256-byte tensor is cut short
  expect_rejected(b, {"tensor 'w'", "beyond the end of the file", "truncated"});
}

// --- header ----------------------------------------------------------------------------------

TEST(GgufMalformed, BadMagic) { expect_rejected(Raw().bytes("GGML").u32(3).u64(0).u64(0).b, {"bad magic", "not a GGUF file", "offset 0"}); }
TEST(GgufMalformed, Version1) { expect_rejected(Raw().header(0, 0, 1).b, {"version 1 is not supported", "offset 4"}); }
TEST(GgufMalformed, BigEndianVersion) { expect_rejected(Raw().header(0, 0, 0x03000000).b, {"byte-swapped", "big-endian", "offset 4"}); }
TEST(GgufMalformed, UnknownVersion) { expect_rejected(Raw().header(0, 0, 7).b, {"unsupported GGUF version 7", "offset 4"}); }
TEST(GgufMalformed, HugeMetadataCount) { expect_rejected(Raw().header(0, 1ull << 60).b, {"metadata count 1152921504606846976 exceeds the file"}); }
TEST(GgufMalformed, HugeTensorCount) { expect_rejected(Raw().header(~0ull, 0).b, {"tensor count 18446744073709551615 exceeds the file", "offset 8"}); }

// --- metadata --------------------------------------------------------------------------------

TEST(GgufMalformed, KeyLengthBeyondFile) {
  Raw r;
  r.header(0, 1).u64(1000).bytes("general.architecture").zeros(8);
  expect_rejected(r.b, {"metadata key length 1000 exceeds the file", "offset 24"});
}
TEST(GgufMalformed, StringValueLengthBeyondFile) {
  Raw r;
  r.header(0, 1).str("general.name").type(GgufType::STRING).u64(1ull << 40).bytes("tiny");
  expect_rejected(r.b, {"string value length 1099511627776 exceeds the file"});
}
TEST(GgufMalformed, UnknownValueType) {
  Raw r;
  r.header(0, 1).str("k").u32(13).u32(0);
  expect_rejected(r.b, {"unknown metadata value type 13", "offset 33"});
}
TEST(GgufMalformed, UnknownArrayElementType) {
  Raw r;
  r.header(0, 1).str("k").type(GgufType::ARRAY).u32(99).u64(0);
  expect_rejected(r.b, {"unknown metadata value type 99 in array element type"});
}
TEST(GgufMalformed, ArrayCountBeyondFile) {
  Raw r;
  r.header(0, 1).str("k").type(GgufType::ARRAY).type(GgufType::U64).u64(1000).u64(1).u64(2);
  expect_rejected(r.b, {"array of 1000 u64 exceeds the file"});
}
TEST(GgufMalformed, NestedArraysTooDeep) {
  Raw r;
  r.header(0, 1).str("k").type(GgufType::ARRAY);
  for (int d = 0; d < 9; ++d) r.type(GgufType::ARRAY).u64(1);  // 10 levels of array
  r.type(GgufType::U8).u64(0);
  expect_rejected(r.b, {"arrays nested deeper than 8"});
}
TEST(GgufMalformed, BadBool) {
  Raw r;
  r.header(0, 1).str("flag").type(GgufType::BOOL).u8(2);
  expect_rejected(r.b, {"bool value 2 is neither 0 nor 1", "offset 40"});
}
TEST(GgufMalformed, BadBoolInArray) {
  Raw r;
  r.header(0, 1).str("flags").type(GgufType::ARRAY).type(GgufType::BOOL).u64(3).u8(1).u8(0).u8(7);
  expect_rejected(r.b, {"bool array element 2 is 7"});
}
TEST(GgufMalformed, DuplicateKey) {
  Raw r;
  r.header(0, 2).kv_u32("llama.block_count", 2).kv_u32("llama.block_count", 3);
  expect_rejected(r.b, {"duplicate metadata key 'llama.block_count'", "offset 57"});
}
TEST(GgufMalformed, EmptyKey) {
  Raw r;
  r.header(0, 1).kv_u32("", 2);
  expect_rejected(r.b, {"metadata key 0 is empty", "offset 24"});
}
TEST(GgufMalformed, AlignmentNotPowerOfTwo) {
  Raw r;
  r.header(0, 1).kv_u32("general.alignment", 48);
  expect_rejected(r.b, {"general.alignment 48 is not a power of two", "offset 24"});
}
TEST(GgufMalformed, AlignmentBelowEight) {  // found by fuzz_gguf: a float tensor at an odd address
  Raw r;
  r.header(0, 1).kv_u32("general.alignment", 1);
  expect_rejected(r.b, {"general.alignment 1 is below 8", "offset 24"});
}
TEST(GgufMalformed, AlignmentZero) {
  Raw r;
  r.header(0, 1).kv_u32("general.alignment", 0);
  expect_rejected(r.b, {"general.alignment 0 is not a power of two"});
}
TEST(GgufMalformed, AlignmentWrongType) {
  Raw r;
  r.header(0, 1).str("general.alignment").type(GgufType::U64).u64(32);
  expect_rejected(r.b, {"general.alignment has type u64 (expected u32)", "offset 24"});
}

// --- tensor infos ----------------------------------------------------------------------------

// One tensor info (plus padding and `data` zero bytes), nothing else.
std::string one_tensor(const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset = 0, size_t data = 256) {
  Raw r;
  r.header(1, 0).tensor("w", ne, type, offset).pad(32).zeros(data);
  return r.b;
}

TEST(GgufMalformed, DuplicateTensorName) {
  Raw r;
  r.header(2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad(32).zeros(64);
  expect_rejected(r.b, {"duplicate tensor name 'w'"});
}
TEST(GgufMalformed, EmptyTensorName) {
  Raw r;
  r.header(1, 0).tensor("", {8}, kF32, 0).pad(32).zeros(32);
  expect_rejected(r.b, {"tensor 0 has an empty name", "offset 24"});
}
TEST(GgufMalformed, ZeroDims) { expect_rejected(one_tensor({}, kF32), {"tensor 'w' has 0 dimensions (1..4 allowed)", "offset 24"}); }
TEST(GgufMalformed, FiveDims) { expect_rejected(one_tensor({1, 1, 1, 1, 1}, kF32), {"tensor 'w' has 5 dimensions"}); }
TEST(GgufMalformed, ZeroDimension) { expect_rejected(one_tensor({8, 0}, kF32), {"tensor 'w' dimension 1 is 0"}); }
TEST(GgufMalformed, DimensionProductOverflow) {
  expect_rejected(one_tensor({1ull << 32, 1ull << 32}, kF32), {"tensor 'w' element count overflows"});
}
TEST(GgufMalformed, TensorBytesWrapAround) {
  // 2^62 f32 values: the element count is legal, but 2^64 bytes wrapped to 0 before the fix.
  expect_rejected(one_tensor({1ull << 31, 1ull << 31}, kF32), {"needs more bytes than the whole file"});
}
TEST(GgufMalformed, UnknownGgmlType) {
  for (uint32_t t : {4u, 31u, 1000u})
    expect_rejected(one_tensor({32}, t), {"tensor 'w' has unknown ggml type " + std::to_string(t), "offset 45"});
}
TEST(GgufMalformed, RowNotMultipleOfBlockSize) {
  expect_rejected(one_tensor({100, 2}, kQ4_K), {"tensor 'w' row length 100 is not a multiple of the q4_K block size 256"});
}
TEST(GgufMalformed, OffsetNotAligned) {
  expect_rejected(one_tensor({8}, kF32, 4), {"tensor 'w' data offset 4 is not a multiple of the alignment 32"});
}
TEST(GgufMalformed, OffsetNotAlignedToCustomAlignment) {
  Raw r;
  r.header(1, 1).kv_u32("general.alignment", 64).tensor("w", {8}, kF32, 32).pad(64).zeros(128);
  expect_rejected(r.b, {"data offset 32 is not a multiple of the alignment 64"});
}
TEST(GgufMalformed, TensorDataBeyondEnd) {
  expect_rejected(one_tensor({64}, kF32, 1ull << 40), {"tensor 'w' data", "beyond the end of the file"});
}
TEST(GgufMalformed, DataRegionPastEnd) {
  Raw r;
  r.header(1, 0).tensor("w", {8}, kF32, 0);  // no padding, no data
  expect_rejected(r.b, {"data region starts past the end of the file"});
}
TEST(GgufMalformed, OverlappingTensors) {
  Raw r;
  r.header(2, 0).tensor("a", {64}, kF32, 0).tensor("b", {8}, kF32, 128).pad(32).zeros(256);
  expect_rejected(r.b, {"tensor 'a' data", "overlaps tensor 'b'"});
}

// --- bounded cost ----------------------------------------------------------------------------

TEST(GgufMalformed, HugeCountsFailFast) {
  // Counts of 1e18 (array, string array, nested array, kv, tensors) must fail at once, before any
  // allocation or loop proportional to the count: the error is the up-front bound ("... exceeds
  // the file"), not a truncation met while reading elements (nor std::bad_alloc).
  const uint64_t huge = 1000000000000000000ull;
  std::vector<std::string> cases;
  for (GgufType et : {GgufType::U8, GgufType::F64, GgufType::STRING, GgufType::ARRAY, GgufType::BOOL}) {
    Raw r;
    r.header(0, 1).str("k").type(GgufType::ARRAY).type(et).u64(huge).zeros(64);
    cases.push_back(r.b);
  }
  cases.push_back(Raw().header(0, huge).zeros(64).b);
  cases.push_back(Raw().header(huge, 0).zeros(64).b);
  for (const auto& b : cases) {
    try {
      GgufFile::parse(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "huge.gguf");
      ADD_FAILURE() << "a count of 1e18 parsed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("exceeds the file"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("1000000000000000000"), std::string::npos) << e.what();
    }
  }
}

TEST(GgufMalformed, ManyEmptyNestedArraysStayLinear) {
  // 1M nested empty arrays in 12 MB: parses (each costs real bytes). Linear time is left to the
  // test's timeout: a quadratic parser would take hours here, not a slower machine's seconds.
  const uint64_t n = 1 << 20;
  Raw r;
  r.header(0, 1).str("k").type(GgufType::ARRAY).type(GgufType::ARRAY).u64(n);
  for (uint64_t k = 0; k < n; ++k) r.type(GgufType::U8).u64(0);
  auto f = GgufFile::parse(reinterpret_cast<const uint8_t*>(r.b.data()), r.b.size(), "nested.gguf");
  ASSERT_EQ(f->kv.at(0).second.items.size(), n);
  for (uint64_t k = 0; k < n; k += 4099) EXPECT_EQ(f->kv.at(0).second.items[k].count, 0u) << k;
}

// --- split models ----------------------------------------------------------------------------

// Writes base-0000K-of-0000N.gguf parts, each with one tensor; `tweak(k, w)` edits part k.
template <typename Tweak>
std::string write_split(const TempDir& dir, int n, Tweak tweak) {
  std::string first;
  for (int k = 0; k < n; ++k) {
    GgufWriter w;
    if (k == 0) w.set_string("general.architecture", "test");
    w.set_u16("split.no", static_cast<uint16_t>(k));
    w.set_u16("split.count", static_cast<uint16_t>(n));
    w.set_i32("split.tensors.count", n);
    std::vector<float> x(8, static_cast<float>(k));
    w.add_tensor("t" + std::to_string(k), GgmlType::F32, {8}, x.data(), 32);
    tweak(k, w);
    const std::string p = dir.path("model-" + fmt::format("{:05d}-of-{:05d}.gguf", k + 1, n));
    w.write(p);
    if (k == 0) first = p;
  }
  return first;
}

void expect_open_fails(const std::string& path, const std::vector<std::string>& what) {
  try {
    GgufModel::open(path);
    ADD_FAILURE() << "opened " << path;
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("offset"), std::string::npos) << m;
    for (const auto& w : what) EXPECT_NE(m.find(w), std::string::npos) << "expected '" << w << "' in: " << m;
  }
}

TEST(GgufMalformedSplit, SplitNoMismatch) {
  TempDir dir;
  auto first = write_split(dir, 3, [](int k, GgufWriter& w) {
    if (k == 2) w.set_u16("split.no", 1);
  });
  expect_open_fails(first, {"model-00003-of-00003.gguf", "split.no mismatch", "expected 2"});
}
TEST(GgufMalformedSplit, PartMissing) {
  TempDir dir;
  auto first = write_split(dir, 3, [](int, GgufWriter&) {});
  std::filesystem::remove(dir.path("model-00002-of-00003.gguf"));
  expect_open_fails(first, {first, "split part 2 of 3 is missing", "model-00002-of-00003.gguf"});
}
TEST(GgufMalformedSplit, TensorsCountMismatch) {
  TempDir dir;
  auto first = write_split(dir, 2, [](int k, GgufWriter& w) {
    if (k == 0) w.set_i32("split.tensors.count", 5);
  });
  expect_open_fails(first, {first, "split.tensors.count mismatch", "it is 5 but the parts hold 2 tensors"});
}
TEST(GgufMalformedSplit, OpeningNonFirstPart) {
  TempDir dir;
  write_split(dir, 3, [](int, GgufWriter&) {});
  const std::string second = dir.path("model-00002-of-00003.gguf");
  expect_open_fails(second, {second, "not the first part of a split model", "split.no = 1"});
}
TEST(GgufMalformedSplit, NameDisagreesWithCount) {
  TempDir dir;
  GgufWriter w;
  w.set_u16("split.no", 0);
  w.set_u16("split.count", 3);
  const std::string p = dir.path("model-00001-of-00002.gguf");
  w.write(p);
  expect_open_fails(p, {p, "file name says 00002 parts but split.count is 3"});
}
TEST(GgufMalformedSplit, NameWithoutSplitSuffix) {
  TempDir dir;
  GgufWriter w;
  w.set_u16("split.no", 0);
  w.set_u16("split.count", 2);
  const std::string p = dir.path("model.gguf");
  w.write(p);
  expect_open_fails(p, {p, "does not end in -00001-of-00002.gguf"});
}
TEST(GgufMalformedSplit, TensorInTwoParts) {
  TempDir dir;
  auto first = write_split(dir, 2, [](int k, GgufWriter& w) {
    if (k == 1) w.add_tensor("t0", GgmlType::F32, {8}, nullptr, 0);
  });
  expect_open_fails(first, {"model-00002-of-00002.gguf", "tensor 't0' appears in more than one split part"});
}

}  // namespace
}  // namespace strata::test
