// Slot files (runtime/slot_file.h): a slot saved by one engine and restored into a fresh one holds
// the same tokens and reuse record and continues with the same logits bit for bit, on every kind of
// per-sequence state (GQA rows in f16 and q8_0, MLA latents, DeepSeek-V3.2's indexer keys,
// Qwen3.5's DeltaNet state). Files of another model, cache type, context or architecture, and
// truncated or corrupt files, are refused with a SlotFileError; names stay inside the directory.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../fixture_sets.h"
#include "core/error.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/slot_file.h"

namespace strata::test {
namespace {

namespace fs = std::filesystem;

constexpr int kSlotCtx = 96;

std::string slot_fixture(const char* set) { return std::string(STRATA_FIXTURES_DIR) + "/" + set + "/model.gguf"; }

std::unique_ptr<Engine> slot_engine(const char* set, GgmlType kv = GgmlType::F16, int n_ctx = kSlotCtx, int n_seq = 2) {
  EngineOptions eo;
  eo.n_ctx = n_ctx;
  eo.n_seq = n_seq;
  eo.n_threads = 2;
  eo.n_batch = 16;  // prompts in several chunks
  eo.type_k = eo.type_v = kv;
  return std::make_unique<Engine>(Model::load(slot_fixture(set)), eo);
}

std::vector<int32_t> slot_tokens(int n, int seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 100 + (seed * 29 + i * 13) % 500;
  return t;
}

// A fresh directory under the test's temporary directory.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::path(::testing::TempDir()) / fmt::format("strata-slot-{}-{}", name, ::getpid())) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// A prompt in chunks, then `decode` tokens one per pass (greedy): the rows a request leaves.
void run_request(Engine& eng, int seq, const std::vector<int32_t>& prompt, int decode) {
  std::vector<float> logits;
  eng.eval(seq, prompt.data(), static_cast<int>(prompt.size()), 0, false, logits);
  const int nv = eng.config().n_vocab;
  for (int i = 0; i < decode; ++i) {
    const int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + nv) - logits.begin());
    const SeqInput in{seq, &t, 1, Logits::Last};
    eng.forward({&in, 1}, logits);
  }
}

// Logits of `more` appended to slot `seq` in one pass, then two single tokens.
std::vector<float> continue_slot(Engine& eng, int seq, const std::vector<int32_t>& more) {
  std::vector<float> all, logits;
  const SeqInput in{seq, more.data(), static_cast<int>(more.size()), Logits::All};
  eng.forward({&in, 1}, logits);
  all = logits;
  for (int32_t t : {int32_t{7}, int32_t{311}}) {
    const SeqInput one{seq, &t, 1, Logits::Last};
    eng.forward({&one, 1}, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

struct SlotCase {
  const char* set;
  GgmlType kv;
};
void PrintTo(const SlotCase& c, std::ostream* os) { *os << c.set << " with a " << ggml_type_name(c.kv) << " KV cache"; }

class SlotFileRoundTrip : public ::testing::TestWithParam<SlotCase> {};
INSTANTIATE_TEST_SUITE_P(Fixtures, SlotFileRoundTrip,
                         ::testing::Values(SlotCase{"qwen3moe-q8_0", GgmlType::F16}, SlotCase{"qwen3moe-q8_0", GgmlType::Q8_0},
                                           SlotCase{"deepseek2-q8_0", GgmlType::F16}, SlotCase{"deepseek32-q8_0", GgmlType::F16},
                                           SlotCase{"qwen35moe-q8_0", GgmlType::F32}),
                         [](const auto& i) {
                           std::string n = fmt::format("{}_{}", i.param.set, ggml_type_name(i.param.kv));
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

// Saved after a request (prompt + decoded tokens) from slot 1, restored into slot 0 of a fresh
// engine: the same record, and the same logits bit for bit as the saved engine continuing.
TEST_P(SlotFileRoundTrip, FreshEngineContinuesBitIdentical) {
  const SlotCase c = GetParam();
  if (!fs::exists(slot_fixture(c.set))) STRATA_MISSING_FIXTURE(slot_fixture(c.set) + " (slot file test)");
  static int round = 0;
  TempDir dir(fmt::format("rt{}", round++));
  auto saved = slot_engine(c.set, c.kv);
  const std::vector<int32_t> prompt = slot_tokens(37, 1);
  run_request(*saved, 1, prompt, 3);
  SlotDir sd(dir.path.string());
  const SlotFileCounts w = sd.save(*saved, 1, "slot.bin");
  EXPECT_EQ(w.n_tokens, 40);
  EXPECT_EQ(w.bytes, fs::file_size(dir.path / "slot.bin"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator{}), 1) << "a temporary file was left behind";

  auto fresh = slot_engine(c.set, c.kv);
  run_request(*fresh, 0, slot_tokens(20, 2), 1);  // something else in the slot before
  const SlotFileCounts r = sd.restore(*fresh, 0, "slot.bin");
  EXPECT_EQ(r.n_tokens, 40);
  EXPECT_EQ(r.bytes, w.bytes);
  const auto a = saved->seq_tokens(1), b = fresh->seq_tokens(0);
  ASSERT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  EXPECT_EQ(fresh->chunked_rows(0), saved->chunked_rows(1));
  EXPECT_EQ(fresh->reusable_rows(0), saved->reusable_rows(1));
  // A later prompt that starts with the saved prompt reuses what the saved slot would.
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), {5, 6, 7, 8});
  EXPECT_EQ(fresh->reusable_prefix(0, longer), saved->reusable_prefix(1, longer));
  if (fresh->model().rewindable()) { EXPECT_EQ(fresh->reusable_prefix(0, longer), 37); }

  const std::vector<int32_t> more = slot_tokens(5, 3);
  const std::vector<float> la = continue_slot(*saved, 1, more);
  const std::vector<float> lb = continue_slot(*fresh, 0, more);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float))) << c.set << ": restored logits differ";
}

TEST(SlotFile, EmptySlotRoundTrips) {
  if (!fs::exists(slot_fixture("qwen3moe-q8_0"))) STRATA_MISSING_FIXTURE(slot_fixture("qwen3moe-q8_0") + " (slot file test)");
  TempDir dir("empty");
  SlotDir sd(dir.path.string());
  auto a = slot_engine("qwen3moe-q8_0");
  EXPECT_EQ(sd.save(*a, 0, "empty").n_tokens, 0);
  run_request(*a, 1, slot_tokens(10, 4), 0);
  EXPECT_EQ(sd.restore(*a, 1, "empty").n_tokens, 0);
  EXPECT_EQ(a->seq_length(1), 0);
}

// The message of the SlotFileError that restoring `name` into `eng` throws ("" when none).
std::string restore_error(SlotDir& sd, Engine& eng, const std::string& name) {
  try {
    sd.restore(eng, 0, name);
  } catch (const SlotFileError& e) {
    return e.what();
  }
  return "";
}

TEST(SlotFile, RefusesAnotherModelCacheTypeOrContext) {
  for (const char* s : {"qwen3moe-q8_0", "qwen3moe-f32", "deepseek4-q8_0"})
    if (!fs::exists(slot_fixture(s))) STRATA_MISSING_FIXTURE(slot_fixture(s) + " (slot file test)");
  TempDir dir("foreign");
  SlotDir sd(dir.path.string());
  auto src = slot_engine("qwen3moe-q8_0");
  run_request(*src, 0, slot_tokens(12, 5), 0);
  sd.save(*src, 0, "q8.bin");
  auto other_model = slot_engine("qwen3moe-f32");
  EXPECT_NE(restore_error(sd, *other_model, "q8.bin").find("another model"), std::string::npos) << restore_error(sd, *other_model, "q8.bin");
  auto other_type = slot_engine("qwen3moe-q8_0", GgmlType::Q8_0);
  EXPECT_NE(restore_error(sd, *other_type, "q8.bin").find("KV cache"), std::string::npos);
  auto other_ctx = slot_engine("qwen3moe-q8_0", GgmlType::F16, kSlotCtx * 2);
  EXPECT_NE(restore_error(sd, *other_ctx, "q8.bin").find("context"), std::string::npos);
  auto dsv4 = slot_engine("deepseek4-q8_0");
  EXPECT_NE(restore_error(sd, *dsv4, "q8.bin").find("deepseek4"), std::string::npos);
  try {
    sd.save(*dsv4, 0, "v4.bin");
    ADD_FAILURE() << "deepseek4's per-sequence state was saved";
  } catch (const SlotFileError& e) {
    EXPECT_NE(std::string(e.what()).find("deepseek4"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.path / "v4.bin"));
  // The refused restores left the engines usable.
  EXPECT_EQ(other_model->seq_length(0), 0);
  run_request(*other_model, 0, slot_tokens(6, 6), 1);
}

// Truncated at many lengths, or one byte flipped at many offsets (every header byte, then a
// spread over the body, and the hash): always a SlotFileError, never a crash, and the engine
// still restores the intact file afterwards with the same logits.
TEST(SlotFile, TruncatedOrFlippedFilesAreRefused) {
  if (!fs::exists(slot_fixture("qwen3moe-q8_0"))) STRATA_MISSING_FIXTURE(slot_fixture("qwen3moe-q8_0") + " (slot file test)");
  TempDir dir("fuzz");
  SlotDir sd(dir.path.string());
  auto eng = slot_engine("qwen3moe-q8_0");
  run_request(*eng, 0, slot_tokens(24, 7), 2);
  sd.save(*eng, 0, "good");
  std::vector<char> good(fs::file_size(dir.path / "good"));
  std::ifstream(dir.path / "good", std::ios::binary).read(good.data(), static_cast<std::streamsize>(good.size()));
  auto write = [&](const std::vector<char>& bytes) { std::ofstream(dir.path / "bad", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size())); };
  std::vector<size_t> offsets;
  for (size_t i = 0; i < kSlotHeaderBytes + 16; ++i) offsets.push_back(i);
  for (size_t i = kSlotHeaderBytes + 16; i < good.size(); i += 61) offsets.push_back(i);
  for (size_t i = good.size() - 9; i < good.size(); ++i) offsets.push_back(i);
  int refused_trunc = 0, refused_flip = 0;
  for (size_t off : offsets) {
    write(std::vector<char>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(off)));
    refused_trunc += !restore_error(sd, *eng, "bad").empty();
    std::vector<char> flipped = good;
    flipped[off] = static_cast<char>(flipped[off] ^ (1 << (off % 8)));
    write(flipped);
    refused_flip += !restore_error(sd, *eng, "bad").empty();
  }
  EXPECT_EQ(refused_trunc, static_cast<int>(offsets.size()));
  EXPECT_EQ(refused_flip, static_cast<int>(offsets.size()));
  std::vector<char> longer = good;
  longer.push_back('x');
  write(longer);
  EXPECT_NE(restore_error(sd, *eng, "bad").find("trailing"), std::string::npos);

  auto ref = slot_engine("qwen3moe-q8_0");
  sd.restore(*ref, 1, "good");
  sd.restore(*eng, 0, "good");
  const std::vector<int32_t> more = slot_tokens(4, 8);
  const std::vector<float> la = continue_slot(*ref, 1, more), lb = continue_slot(*eng, 0, more);
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
}

TEST(SlotFile, NamesStayInsideTheDirectory) {
  for (const char* bad : {"", ".", "..", "../x", "a/b", "/etc/passwd", ".hidden", "a\\b", "tab\there"})
    EXPECT_THROW(SlotDir::check_name(bad), SlotFileError) << "'" << bad << "'";
  EXPECT_THROW(SlotDir::check_name(std::string(256, 'a')), SlotFileError);
  EXPECT_NO_THROW(SlotDir::check_name("agent-prompt_v2.bin"));
  EXPECT_NO_THROW(SlotDir::check_name("système.slot"));
}

TEST(SlotFile, LinksAndDirectoriesAreRefused) {
  if (!fs::exists(slot_fixture("qwen3moe-q8_0"))) STRATA_MISSING_FIXTURE(slot_fixture("qwen3moe-q8_0") + " (slot file test)");
  TempDir dir("links"), outside("outside");
  SlotDir sd(dir.path.string());
  auto eng = slot_engine("qwen3moe-q8_0");
  run_request(*eng, 0, slot_tokens(10, 9), 0);
  sd.save(*eng, 0, "real");
  fs::copy_file(dir.path / "real", outside.path / "target");
  const auto before = fs::file_size(outside.path / "target");
  fs::create_symlink(outside.path / "target", dir.path / "link");
  EXPECT_NE(restore_error(sd, *eng, "link").find("symbolic link"), std::string::npos);
  EXPECT_NE(restore_error(sd, *eng, "missing").find("no slot file"), std::string::npos);
  fs::create_directory(dir.path / "sub");
  EXPECT_NE(restore_error(sd, *eng, "sub").find("regular file"), std::string::npos);
  EXPECT_THROW(sd.save(*eng, 0, "sub"), SlotFileError);
  // Saving to a link's name replaces the link, never writes through it.
  run_request(*eng, 0, slot_tokens(30, 10), 0);
  sd.save(*eng, 0, "link");
  EXPECT_FALSE(fs::is_symlink(dir.path / "link"));
  EXPECT_EQ(fs::file_size(outside.path / "target"), before);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) files += e.path().filename().string().rfind(".strata-slot-", 0) == 0 ? 100 : 1;
  EXPECT_EQ(files, 3u) << "real, link, sub and no temporary file";
}

}  // namespace
}  // namespace strata::test
