// Write with GgufWriter, read back with GgufFile / GgufModel, compare everything: every metadata
// value type, strings with NUL and UTF-8, arrays of every scalar type, string and nested arrays,
// alignments, tensors of every ggml type with exact byte sizes, lazy tensors and split models.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_util.h"

namespace strata::test {
namespace {

using namespace std::string_literals;

// A parsed buffer: the file's views point into `bytes`, so both live together.
struct Parsed {
  std::string bytes;
  std::unique_ptr<GgufFile> file;
  const GgufFile* operator->() const { return file.get(); }
};

Parsed parse(std::string b) {
  Parsed p{std::move(b), nullptr};
  p.file = GgufFile::parse(reinterpret_cast<const uint8_t*>(p.bytes.data()), p.bytes.size(), "roundtrip.gguf");
  return p;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

template <typename T>
std::string encode_array(GgufType et, const std::vector<T>& v) {
  Raw r;
  r.type(et).u64(v.size());
  for (T x : v) r.bytes(std::string_view(reinterpret_cast<const char*>(&x), sizeof(T)));
  return r.b;
}

TEST(GgufRoundTrip, EveryScalarType) {
  GgufWriter w;
  w.set_u8("u8", 255);
  w.set_i8("i8", -128);
  w.set_u16("u16", 65535);
  w.set_i16("i16", -32768);
  w.set_u32("u32", 4294967295u);
  w.set_i32("i32", std::numeric_limits<int32_t>::min());
  w.set_u64("u64", std::numeric_limits<uint64_t>::max());
  w.set_i64("i64", std::numeric_limits<int64_t>::min());
  w.set_f32("f32", 3.25f);
  w.set_f64("f64", -1e300);
  w.set_bool("t", true);
  w.set_bool("f", false);
  w.set_string("s", "text");
  auto f = parse(w.to_bytes());
  ASSERT_EQ(f->kv.size(), 13u);
  const char* order[] = {"u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f32", "f64", "t", "f", "s"};
  for (size_t k = 0; k < 13; ++k) EXPECT_EQ(f->kv[k].first, order[k]);  // file order kept
  auto v = [&](const char* k) { return *f->find(k); };
  EXPECT_EQ(v("u8").type, GgufType::U8);
  EXPECT_EQ(v("u8").u, 255u);
  EXPECT_EQ(v("i8").type, GgufType::I8);
  EXPECT_EQ(v("i8").i, -128);
  EXPECT_EQ(v("u16").type, GgufType::U16);
  EXPECT_EQ(v("u16").u, 65535u);
  EXPECT_EQ(v("i16").type, GgufType::I16);
  EXPECT_EQ(v("i16").i, -32768);
  EXPECT_EQ(v("u32").type, GgufType::U32);
  EXPECT_EQ(v("u32").u, 4294967295u);
  EXPECT_EQ(v("i32").type, GgufType::I32);
  EXPECT_EQ(v("i32").i, std::numeric_limits<int32_t>::min());
  EXPECT_EQ(v("u64").type, GgufType::U64);
  EXPECT_EQ(v("u64").u, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(v("i64").type, GgufType::I64);
  EXPECT_EQ(v("i64").i, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(v("f32").type, GgufType::F32);
  EXPECT_EQ(v("f32").f, 3.25);
  EXPECT_EQ(v("f64").type, GgufType::F64);
  EXPECT_EQ(v("f64").f, -1e300);
  EXPECT_EQ(v("t").type, GgufType::BOOL);
  EXPECT_EQ(v("t").u, 1u);
  EXPECT_EQ(v("f").u, 0u);
  EXPECT_EQ(v("s").type, GgufType::STRING);
  EXPECT_EQ(v("s").str, "text");
  EXPECT_EQ(v("u64").to_string(), "18446744073709551615");
  EXPECT_EQ(v("t").to_string(), "true");
}

TEST(GgufRoundTrip, SetterReplacesExistingKey) {
  GgufWriter w;
  w.set_u32("k", 1);
  w.set_string("other", "x");
  w.set_string("k", "now a string");
  auto f = parse(w.to_bytes());
  ASSERT_EQ(f->kv.size(), 2u);
  EXPECT_EQ(f->kv[0].first, "k");
  EXPECT_EQ(f->find("k")->str, "now a string");
}

TEST(GgufRoundTrip, StringsWithNulAndUtf8) {
  const std::string nul = "a\0b\0"s;
  const std::string utf8 = "h\xc3\xa9llo \xe2\x98\x83 \xf0\x9f\xa6\x80";  // héllo ☃ 🦀
  const std::string big(100000, 'z');
  GgufWriter w;
  w.set_string("nul", nul);
  w.set_string("utf8", utf8);
  w.set_string("empty", "");
  w.set_string("big", big);
  w.set_string("key.with.\xc3\xbc", "utf-8 key");
  auto f = parse(w.to_bytes());
  EXPECT_EQ(f->find("nul")->str, nul);
  EXPECT_EQ(f->find("nul")->str.size(), 4u);
  EXPECT_EQ(f->find("utf8")->str, utf8);
  EXPECT_EQ(f->find("empty")->str, "");
  EXPECT_EQ(f->find("big")->str, big);
  EXPECT_EQ(f->find("key.with.\xc3\xbc")->str, "utf-8 key");
  EXPECT_EQ(f->find("nul")->to_string(), "'a\\x00b\\x00'");
}

TEST(GgufRoundTrip, ArraysOfEveryScalarType) {
  GgufWriter w;
  w.set_raw("u8", GgufType::ARRAY, encode_array<uint8_t>(GgufType::U8, {0, 1, 255}));
  w.set_raw("i8", GgufType::ARRAY, encode_array<int8_t>(GgufType::I8, {-128, 0, 127}));
  w.set_raw("u16", GgufType::ARRAY, encode_array<uint16_t>(GgufType::U16, {0, 65535}));
  w.set_raw("i16", GgufType::ARRAY, encode_array<int16_t>(GgufType::I16, {-32768, 32767}));
  w.set_array_u32("u32", {0, 4294967295u, 7});
  w.set_array_i32("i32", {std::numeric_limits<int32_t>::min(), -1, 5});
  w.set_raw("u64", GgufType::ARRAY, encode_array<uint64_t>(GgufType::U64, {1ull << 63, 3}));
  w.set_raw("i64", GgufType::ARRAY, encode_array<int64_t>(GgufType::I64, {std::numeric_limits<int64_t>::min(), 9}));
  w.set_array_f32("f32", {0.5f, -2.0f, 1e30f});
  w.set_raw("f64", GgufType::ARRAY, encode_array<double>(GgufType::F64, {1e-300, -0.25}));
  w.set_array_bool("bool", {true, false, true, true});
  w.set_array_i32("empty", {});
  auto f = parse(w.to_bytes());
  auto arr = [&](const char* k, GgufType et, uint64_t n) -> const GgufValue& {
    const GgufValue* v = f->find(k);
    EXPECT_TRUE(v && v->is_array()) << k;
    EXPECT_EQ(v->elem_type, et) << k;
    EXPECT_EQ(v->count, n) << k;
    return *v;
  };
  EXPECT_EQ(arr("u8", GgufType::U8, 3).array_int(2), 255);
  EXPECT_EQ(arr("i8", GgufType::I8, 3).array_int(0), -128);
  EXPECT_EQ(arr("u16", GgufType::U16, 2).array_int(1), 65535);
  EXPECT_EQ(arr("i16", GgufType::I16, 2).array_int(0), -32768);
  EXPECT_EQ(arr("u32", GgufType::U32, 3).array_int(1), 4294967295ll);
  EXPECT_EQ(arr("i32", GgufType::I32, 3).array_int(0), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(static_cast<uint64_t>(arr("u64", GgufType::U64, 2).array_int(0)), 1ull << 63);
  EXPECT_EQ(arr("i64", GgufType::I64, 2).array_int(0), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(arr("f32", GgufType::F32, 3).array_float(2), static_cast<double>(1e30f));
  EXPECT_EQ(arr("f64", GgufType::F64, 2).array_float(0), 1e-300);
  EXPECT_EQ(arr("f64", GgufType::F64, 2).array_float(1), -0.25);
  const auto& b = arr("bool", GgufType::BOOL, 4);
  EXPECT_EQ(b.array_int(0), 1);
  EXPECT_EQ(b.array_int(1), 0);
  EXPECT_EQ(arr("empty", GgufType::I32, 0).count, 0u);
  EXPECT_THROW(arr("u8", GgufType::U8, 3).array_int(3), Error);  // checked index
  EXPECT_THROW(arr("f32", GgufType::F32, 3).array_int(0), Error);  // checked type
  EXPECT_EQ(arr("i32", GgufType::I32, 3).to_string(), "[-2147483648, -1, 5]");
}

TEST(GgufRoundTrip, StringArrays) {
  const std::vector<std::string> s = {"", "a\0b"s, "\xe4\xb8\xad\xe6\x96\x87", std::string(3000, 'q'), "end"};
  GgufWriter w;
  w.set_array_string("s", s);
  w.set_array_string("none", {});
  auto f = parse(w.to_bytes());
  const GgufValue* v = f->find("s");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->elem_type, GgufType::STRING);
  ASSERT_EQ(v->count, s.size());
  for (size_t k = 0; k < s.size(); ++k) EXPECT_EQ(v->array_string(k), s[k]);
  EXPECT_THROW(v->array_string(5), Error);
  EXPECT_EQ(f->find("none")->count, 0u);
}

TEST(GgufRoundTrip, NestedArrays) {
  // [[1, 2, 3], [], [-4]] of i32, [["x"], ["y", "z"]] of strings, and [[[7]]] three deep.
  Raw ints;
  ints.type(GgufType::ARRAY).u64(3);
  ints.b += encode_array<int32_t>(GgufType::I32, {1, 2, 3});
  ints.b += encode_array<int32_t>(GgufType::I32, {});
  ints.b += encode_array<int32_t>(GgufType::I32, {-4});
  Raw strs;
  strs.type(GgufType::ARRAY).u64(2).type(GgufType::STRING).u64(1).str("x").type(GgufType::STRING).u64(2).str("y").str("z");
  Raw deep;
  deep.type(GgufType::ARRAY).u64(1).type(GgufType::ARRAY).u64(1);
  deep.b += encode_array<uint8_t>(GgufType::U8, {7});
  GgufWriter w;
  w.set_raw("ints", GgufType::ARRAY, ints.b);
  w.set_raw("strs", GgufType::ARRAY, strs.b);
  w.set_raw("deep", GgufType::ARRAY, deep.b);
  w.set_u32("after", 42);  // parsing resumes at the right place after nested arrays
  auto f = parse(w.to_bytes());
  const GgufValue& a = *f->find("ints");
  ASSERT_EQ(a.elem_type, GgufType::ARRAY);
  ASSERT_EQ(a.items.size(), 3u);
  EXPECT_EQ(a.items[0].count, 3u);
  EXPECT_EQ(a.items[0].array_int(2), 3);
  EXPECT_EQ(a.items[1].count, 0u);
  EXPECT_EQ(a.items[2].array_int(0), -4);
  const GgufValue& s = *f->find("strs");
  ASSERT_EQ(s.items.size(), 2u);
  EXPECT_EQ(s.items[0].array_string(0), "x");
  EXPECT_EQ(s.items[1].array_string(1), "z");
  const GgufValue& d = *f->find("deep");
  ASSERT_EQ(d.items.size(), 1u);
  ASSERT_EQ(d.items[0].items.size(), 1u);
  EXPECT_EQ(d.items[0].items[0].array_int(0), 7);
  EXPECT_EQ(f->find("after")->u, 42u);
  EXPECT_EQ(a.to_string(), "[array of 3 array]");
}

// Independent table of ggml block sizes and bytes per block (from the ggml sources' block structs).
struct TypeSize {
  uint32_t id;
  uint64_t block, bytes;
};
const TypeSize kTypeSizes[] = {
    {0, 1, 4},      {1, 1, 2},      {2, 32, 18},    {3, 32, 20},    {6, 32, 22},    {7, 32, 24},    {8, 32, 34},
    {9, 32, 36},    {10, 256, 84},  {11, 256, 110}, {12, 256, 144}, {13, 256, 176}, {14, 256, 210}, {15, 256, 292},
    {16, 256, 66},  {17, 256, 74},  {18, 256, 98},  {19, 256, 50},  {20, 32, 18},   {21, 256, 110}, {22, 256, 82},
    {23, 256, 136}, {24, 1, 1},     {25, 1, 2},     {26, 1, 4},     {27, 1, 8},     {28, 1, 8},     {29, 256, 56},
    {30, 1, 2},     {34, 256, 54},  {35, 256, 66},  {39, 32, 17},
};

std::string pattern(uint64_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (auto& c : s) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

class GgufAlignment : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufAlignment, TensorsOfEveryTypeWithExactBytes) {
  const uint32_t align = GetParam();
  GgufWriter w(align);
  w.set_string("general.architecture", "test");
  std::vector<std::string> data;
  std::vector<std::vector<uint64_t>> shapes;
  for (const auto& ts : kTypeSizes) {
    std::vector<uint64_t> ne = {ts.block * 2, 3};
    if (ts.id % 3 == 0) ne.push_back(2);
    if (ts.id % 5 == 0) ne = {ts.block, 1, 2, 3};
    uint64_t n = 1;
    for (auto d : ne) n *= d;
    data.push_back(pattern(n / ts.block * ts.bytes, ts.id));
    shapes.push_back(ne);
    w.add_tensor("tensor." + std::to_string(ts.id), static_cast<GgmlType>(ts.id), ne, data.back().data(), data.back().size());
  }
  TempDir dir;
  const std::string path = dir.path("m.gguf");
  w.write(path);
  EXPECT_EQ(read_file(path), w.to_bytes());  // file and in-memory encodings agree
  auto m = GgufModel::open(path);
  const GgufFile& f = *m->parts()[0];
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.alignment, align);
  EXPECT_EQ(f.data_offset % align, 0u);
  EXPECT_EQ(f.find("general.alignment") != nullptr, align != 32);
  ASSERT_EQ(m->tensors().size(), std::size(kTypeSizes));
  for (size_t k = 0; k < std::size(kTypeSizes); ++k) {
    const auto& ts = kTypeSizes[k];
    const GgufTensor* t = m->tensor("tensor." + std::to_string(ts.id));
    ASSERT_TRUE(t);
    EXPECT_EQ(static_cast<uint32_t>(t->type), ts.id);
    ASSERT_EQ(t->n_dims, static_cast<int>(shapes[k].size()));
    for (int d = 0; d < kGgmlMaxDims; ++d) EXPECT_EQ(t->ne[d], d < t->n_dims ? shapes[k][d] : 1u);
    EXPECT_EQ(t->nbytes, data[k].size()) << ggml_type_name(t->type);
    EXPECT_EQ(t->row_bytes(), ts.bytes * shapes[k][0] / ts.block);
    EXPECT_EQ(t->offset % align, 0u);
    EXPECT_EQ(t->part, 0u);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(t->data), t->nbytes), data[k]);
    EXPECT_EQ(t->data, f.base + t->offset);
  }
  EXPECT_EQ(m->file_bytes(), read_file(path).size());
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufAlignment, ::testing::Values(32u, 64u, 4096u));

TEST(GgufRoundTrip, LazyTensors) {
  struct Ctx {
    int calls = 0;
  } ctx;
  auto fill = [](void* c, uint8_t* dst, uint64_t n) {
    static_cast<Ctx*>(c)->calls++;
    for (uint64_t k = 0; k < n; ++k) dst[k] = static_cast<uint8_t>(k * 13 + 5);
  };
  GgufWriter w(64);
  w.add_tensor_lazy("lazy.q8", GgmlType::Q8_0, {64, 5}, fill, &ctx);
  std::vector<float> eager(3, 2.0f);
  w.add_tensor("eager", GgmlType::F32, {3}, eager.data(), 12);
  w.add_tensor("zeros", GgmlType::F16, {7}, nullptr, 0);  // no data: written as zeros
  w.add_tensor_lazy("lazy.f32", GgmlType::F32, {5}, fill, &ctx);
  TempDir dir;
  const std::string path = dir.path("lazy.gguf");
  w.write(path);
  EXPECT_EQ(ctx.calls, 2);
  EXPECT_EQ(read_file(path), w.to_bytes());
  auto m = GgufModel::open(path);
  const GgufTensor* q = m->tensor("lazy.q8");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->nbytes, 2u * 5 * 34);
  for (uint64_t k = 0; k < q->nbytes; ++k) ASSERT_EQ(q->data[k], static_cast<uint8_t>(k * 13 + 5)) << k;
  EXPECT_EQ(m->tensor("lazy.f32")->nbytes, 20u);
  EXPECT_EQ(m->tensor("lazy.f32")->data[19], static_cast<uint8_t>(19 * 13 + 5));
  EXPECT_EQ(std::memcmp(m->tensor("eager")->data, eager.data(), 12), 0);
  const GgufTensor* z = m->tensor("zeros");
  EXPECT_EQ(z->nbytes, 14u);
  for (uint64_t k = 0; k < z->nbytes; ++k) EXPECT_EQ(z->data[k], 0);
  EXPECT_EQ(m->tensor("missing"), nullptr);
}

TEST(GgufRoundTrip, TypedAccessors) {
  GgufWriter w;
  w.set_string("general.architecture", "qwen3moe");
  w.set_u32("qwen3moe.block_count", 48);
  w.set_f32("qwen3moe.rope.freq_base", 1e6f);
  w.set_bool("qwen3moe.expert_weights_norm", true);
  TempDir dir;
  const std::string path = dir.path("acc.gguf");
  w.write(path);
  auto m = GgufModel::open(path);
  EXPECT_EQ(m->architecture(), "qwen3moe");
  EXPECT_EQ(m->get_int("qwen3moe.block_count"), 48);
  EXPECT_EQ(m->get_float("qwen3moe.block_count"), 48.0);
  EXPECT_EQ(m->get_float("qwen3moe.rope.freq_base"), 1e6);
  EXPECT_EQ(m->get_bool("qwen3moe.expert_weights_norm"), true);
  EXPECT_FALSE(m->get_int("absent").has_value());
  EXPECT_THROW(m->get_int("general.architecture"), Error);
  EXPECT_THROW(m->get_string("qwen3moe.block_count"), Error);
  EXPECT_EQ(m->parts()[0]->key_offset("general.architecture"), 24u);
}

TEST(GgufRoundTrip, WriterReportsUnwritablePath) {
  GgufWriter w;
  try {
    w.write("/nonexistent-dir/x.gguf");
    FAIL() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.gguf.tmp: cannot create"), std::string::npos) << e.what();
  }
}

TEST(GgufRoundTrip, WriterReportsFullDisk) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  // Writing into /dev/full fails at flush/close; the writer must throw once, not crash.
  TempDir dir;
  const std::string link = dir.path("full.gguf.tmp");
  std::filesystem::create_symlink("/dev/full", link);
  GgufWriter w;
  w.set_string("k", std::string(1 << 16, 'x'));
  EXPECT_THROW(w.write(dir.path("full.gguf")), Error);
}

// --- split models --------------------------------------------------------------------------

TEST(GgufRoundTrip, ThreePartSplitModel) {
  TempDir dir;
  const int n = 3;
  // Part k holds tensors "p<k>.a" and "p<k>.b" with distinct contents.
  std::vector<std::string> bytes;
  for (int k = 0; k < n; ++k) {
    GgufWriter w;
    if (k == 0) {
      w.set_string("general.architecture", "test");
      w.set_u32("test.block_count", 7);
    }
    w.set_u16("split.no", static_cast<uint16_t>(k));
    w.set_u16("split.count", n);
    w.set_i32("split.tensors.count", 2 * n);
    for (const char* s : {"a", "b"}) {
      bytes.push_back(pattern(34 * 4, static_cast<uint32_t>(bytes.size() + 1)));
      w.add_tensor(fmt::format("p{}.{}", k, s), GgmlType::Q8_0, {32, 4}, bytes.back().data(), bytes.back().size());
    }
    w.write(dir.path(fmt::format("model-{:05d}-of-{:05d}.gguf", k + 1, n)));
  }
  auto m = GgufModel::open(dir.path("model-00001-of-00003.gguf"));
  ASSERT_EQ(m->parts().size(), 3u);
  ASSERT_EQ(m->tensors().size(), 6u);
  EXPECT_EQ(m->get_int("test.block_count"), 7);  // metadata from the first part
  uint64_t total = 0;
  for (int k = 0; k < n; ++k) total += std::filesystem::file_size(dir.path(fmt::format("model-{:05d}-of-{:05d}.gguf", k + 1, n)));
  EXPECT_EQ(m->file_bytes(), total);
  int idx = 0;
  for (int k = 0; k < n; ++k) {
    const GgufFile& part = *m->parts()[k];
    EXPECT_EQ(part.path, dir.path(fmt::format("model-{:05d}-of-{:05d}.gguf", k + 1, n)));
    for (const char* s : {"a", "b"}) {
      const GgufTensor* t = m->tensor(fmt::format("p{}.{}", k, s));
      ASSERT_TRUE(t);
      EXPECT_EQ(t->part, static_cast<uint32_t>(k));
      // Offsets are absolute within the part: data region start + the writer's aligned layout.
      EXPECT_EQ(t->offset, part.data_offset + (s[0] == 'a' ? 0u : 160u));
      EXPECT_EQ(t->data, part.base + t->offset);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(t->data), t->nbytes), bytes[idx]);
      ++idx;
    }
  }
}

TEST(GgufRoundTrip, SingleFileWithSplitCountOne) {
  TempDir dir;
  GgufWriter w;
  w.set_u16("split.no", 0);
  w.set_u16("split.count", 1);
  w.set_i32("split.tensors.count", 1);
  w.add_tensor("x", GgmlType::F32, {4}, nullptr, 0);
  w.write(dir.path("plain.gguf"));
  auto m = GgufModel::open(dir.path("plain.gguf"));
  EXPECT_EQ(m->parts().size(), 1u);
  EXPECT_EQ(m->tensors().size(), 1u);
}

}  // namespace
}  // namespace strata::test
