// `strata inspect` figures checked against values computed independently of the GGUF reader:
// each fixture's README.md lists its metadata and a markdown tensor table; this test parses
// those, sizes every tensor with its own ggml type table, and compares with ModelSummary, the
// budget planner, and the JSON printed by the strata binary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "../fixture_sets.h"
#include "gguf/gguf_file.h"
#include "model/model_summary.h"

namespace strata::test {
namespace {

namespace fs = std::filesystem;

// ggml block size and bytes per block by the README's type spelling.
struct Size {
  uint64_t block, bytes;
};
const std::map<std::string, Size> kSizes = {
    {"F32", {1, 4}},      {"F16", {1, 2}},      {"BF16", {1, 2}},     {"I8", {1, 1}},       {"I16", {1, 2}},
    {"I32", {1, 4}},      {"F64", {1, 8}},      {"Q4_0", {32, 18}},   {"Q4_1", {32, 20}},   {"Q5_0", {32, 22}},
    {"Q5_1", {32, 24}},   {"Q8_0", {32, 34}},   {"Q2_K", {256, 84}},  {"Q3_K", {256, 110}}, {"Q4_K", {256, 144}},
    {"Q5_K", {256, 176}}, {"Q6_K", {256, 210}}, {"IQ4_XS", {256, 136}}, {"IQ4_NL", {32, 18}}, {"MXFP4", {32, 17}},
    // i-quants: f16 scale + packed grid indices / signs / scales per 256 weights.
    {"IQ1_S", {256, 50}}, {"IQ1_M", {256, 56}}, {"IQ2_XXS", {256, 66}}, {"IQ2_XS", {256, 74}}, {"IQ2_S", {256, 82}},
    {"IQ3_XXS", {256, 98}}, {"IQ3_S", {256, 110}},
};

struct ReadmeTensor {
  std::string name, type;
  std::vector<uint64_t> ne;
  uint64_t bytes = 0;
};

struct Readme {
  std::string dir;
  uint64_t file_bytes = 0;
  std::map<std::string, std::string> meta;  // key -> value as printed
  std::vector<ReadmeTensor> tensors;
};

std::string trim(std::string s) {
  const auto a = s.find_first_not_of(" \t");
  const auto b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<std::string> split_on(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, sep);) out.push_back(x);
  return out;
}

Readme parse_readme(const fs::path& dir) {
  Readme r;
  r.dir = dir.string();
  std::ifstream in(dir / "README.md");
  std::string line;
  enum { kNone, kMeta, kTable } state = kNone;
  bool meta_section = false;
  while (std::getline(in, line)) {
    if (line.rfind("- `model.gguf` (", 0) == 0) r.file_bytes = std::stoull(line.substr(16));
    if (line.rfind("## ", 0) == 0) meta_section = line.find("GGUF metadata") != std::string::npos;
    if (state == kNone && meta_section && line == "```") {
      state = kMeta;
      continue;
    }
    if (state == kMeta) {
      if (line == "```") {
        state = kNone;
        meta_section = false;
        continue;
      }
      const auto eq = line.find(" = ");
      if (eq != std::string::npos) r.meta[line.substr(0, eq)] = line.substr(eq + 3);
      continue;
    }
    if (state == kNone && trim(line) == "| name | type | ne |") {
      state = kTable;
      continue;
    }
    if (state == kTable) {
      if (line.rfind("|---", 0) == 0) continue;
      if (line.empty() || line[0] != '|') {
        state = kNone;
        continue;
      }
      auto cells = split_on(line, '|');  // "", name, type, ne
      if (cells.size() < 4) continue;
      ReadmeTensor t{trim(cells[1]), trim(cells[2]), {}, 0};
      for (const auto& d : split_on(trim(cells[3]), 'x')) t.ne.push_back(std::stoull(d));
      auto it = kSizes.find(t.type);
      if (it == kSizes.end()) throw std::runtime_error(r.dir + ": type " + t.type + " missing from the test's size table");
      uint64_t n = 1;
      for (auto d : t.ne) n *= d;
      EXPECT_EQ(t.ne[0] % it->second.block, 0u) << t.name;
      t.bytes = n / it->second.block * it->second.bytes;
      r.tensors.push_back(t);
    }
  }
  return r;
}

std::optional<int64_t> meta_int(const Readme& r, const std::string& key) {
  auto it = r.meta.find(key);
  if (it == r.meta.end()) return std::nullopt;
  return std::stoll(it->second);
}

std::optional<double> meta_float(const Readme& r, const std::string& key) {
  auto it = r.meta.find(key);
  if (it == r.meta.end()) return std::nullopt;
  return std::stod(it->second);
}

// Values a correct `inspect` must report, from the README alone.
struct InspectExpected {
  uint64_t dense = 0, routed = 0, touched = 0;
  int64_t routed_experts = 0;
  std::map<int, uint64_t> expert_bytes;  // per MoE layer: one expert
  std::map<int, uint64_t> routed_by_layer;
  std::map<std::string, std::pair<int64_t, uint64_t>> types;  // README type -> tensors, bytes
};

int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::stoi(name.substr(4));
}

InspectExpected expected_of(const Readme& r, const std::string& arch) {
  InspectExpected e;
  const int64_t n_expert = meta_int(r, arch + ".expert_count").value_or(0);
  const int64_t top_k = meta_int(r, arch + ".expert_used_count").value_or(0);
  uint64_t embd = 0, embd_row = 0;
  bool has_output = false;
  for (const auto& t : r.tensors) {
    auto& ty = e.types[t.type];
    ty.first++;
    ty.second += t.bytes;
    if (t.name.find("_exps.") != std::string::npos) {
      e.routed += t.bytes;
      e.routed_by_layer[layer_of(t.name)] += t.bytes;
    } else {
      e.dense += t.bytes;
    }
    if (t.name == "token_embd.weight") {
      embd = t.bytes;
      embd_row = t.bytes / t.ne[1];
    }
    if (t.name == "output.weight") has_output = true;
  }
  e.touched = e.dense;
  if (has_output) e.touched = e.touched - embd + embd_row;
  for (const auto& [l, bytes] : e.routed_by_layer) {
    EXPECT_GT(n_expert, 0);
    EXPECT_EQ(bytes % static_cast<uint64_t>(n_expert), 0u) << "layer " << l;
    e.expert_bytes[l] = bytes / static_cast<uint64_t>(n_expert);
    e.touched += static_cast<uint64_t>(top_k) * e.expert_bytes[l];
    e.routed_experts += n_expert;
  }
  return e;
}

// general.architecture without its quotes.
std::string readme_arch(const Readme& r) {
  const std::string& v = r.meta.at("general.architecture");
  return v.size() >= 2 ? v.substr(1, v.size() - 2) : v;
}

std::vector<fs::path> fixture_models() {
  std::vector<fs::path> out;
  const fs::path root = STRATA_FIXTURES_DIR;
  if (!fs::is_directory(root)) return out;
  for (const auto& d : fs::directory_iterator(root))
    if (fs::exists(d.path() / "model.gguf") && fs::exists(d.path() / "README.md")) out.push_back(d.path());
  std::sort(out.begin(), out.end());
  return out;
}

#define SKIP_WITHOUT_FIXTURES(models) \
  if ((models).empty()) STRATA_MISSING_FIXTURE("model sets under " STRATA_FIXTURES_DIR " (inspect tests)")

void expect_hparam(const std::optional<int64_t>& got, const Readme& r, const std::string& key) {
  EXPECT_EQ(got, meta_int(r, key)) << key;
}

TEST(Inspect, EveryFixtureMatchesItsReadme) {
  const auto models = fixture_models();
  SKIP_WITHOUT_FIXTURES(models);
  for (const auto& dir : models) {
    SCOPED_TRACE(dir.string());
    const Readme r = parse_readme(dir);
    ASSERT_FALSE(r.tensors.empty());
    ASSERT_TRUE(r.meta.count("general.architecture"));
    const std::string arch = readme_arch(r);
    const InspectExpected e = expected_of(r, arch);

    auto m = GgufModel::open((dir / "model.gguf").string());
    const ModelSummary s = ModelSummary::of(*m);
    EXPECT_EQ(s.file_bytes, r.file_bytes);
    EXPECT_EQ(s.n_tensors, static_cast<int64_t>(r.tensors.size()));
    // The reader sees the same tensors, types and shapes as the README.
    for (const auto& t : r.tensors) {
      const GgufTensor* gt = m->tensor(t.name);
      ASSERT_TRUE(gt) << t.name;
      std::string ty = ggml_type_name(gt->type);
      for (auto& c : ty) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      EXPECT_EQ(ty, t.type) << t.name;
      ASSERT_EQ(gt->n_dims, static_cast<int>(t.ne.size())) << t.name;
      for (size_t d = 0; d < t.ne.size(); ++d) EXPECT_EQ(gt->ne[d], t.ne[d]) << t.name;
      EXPECT_EQ(gt->nbytes, t.bytes) << t.name;
    }
    EXPECT_EQ(s.dense_bytes, e.dense);
    EXPECT_EQ(s.routed_bytes, e.routed);
    EXPECT_EQ(s.touched_per_token, e.touched);
    EXPECT_EQ(s.n_routed_experts, e.routed_experts);
    // MoE sets (their README lists <arch>.expert_count) have routed experts; dense sets (draft models)
    // have none, and inspect describes them just the same.
    if (meta_int(r, arch + ".expert_count")) {
      EXPECT_GT(e.routed, 0u) << "an MoE fixture without routed expert tensors";
    } else {
      EXPECT_EQ(e.routed, 0u) << "routed expert tensors in a fixture without expert_count";
      EXPECT_EQ(s.n_routed_experts, 0);
    }
    for (const auto& lb : s.layers) {
      auto it = e.expert_bytes.find(lb.layer);
      if (it == e.expert_bytes.end()) {
        EXPECT_EQ(lb.n_expert, 0) << "layer " << lb.layer;
        EXPECT_EQ(lb.routed_bytes, 0u);
      } else {
        EXPECT_EQ(lb.expert_bytes, it->second) << "layer " << lb.layer;
        EXPECT_EQ(lb.routed_bytes, e.routed_by_layer.at(lb.layer)) << "layer " << lb.layer;
      }
    }
    ASSERT_EQ(s.types.size(), e.types.size());
    for (const auto& [name, tu] : s.types) {
      std::string up = name;
      for (auto& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      ASSERT_TRUE(e.types.count(up)) << name;
      EXPECT_EQ(tu.tensors, e.types.at(up).first) << name;
      EXPECT_EQ(tu.bytes, e.types.at(up).second) << name;
    }

    const std::string a = arch + ".";
    EXPECT_EQ(s.hp.arch, arch);
    expect_hparam(s.hp.n_layer, r, a + "block_count");
    expect_hparam(s.hp.n_embd, r, a + "embedding_length");
    expect_hparam(s.hp.n_expert, r, a + "expert_count");
    expect_hparam(s.hp.n_expert_used, r, a + "expert_used_count");
    expect_hparam(s.hp.n_expert_shared, r, a + "expert_shared_count");
    expect_hparam(s.hp.n_leading_dense, r, a + "leading_dense_block_count");
    expect_hparam(s.hp.n_ff_exp, r, a + "expert_feed_forward_length");
    expect_hparam(s.hp.n_head, r, a + "attention.head_count");
    expect_hparam(s.hp.n_head_kv, r, a + "attention.head_count_kv");
    expect_hparam(s.hp.n_ctx_train, r, a + "context_length");
    const auto base = meta_float(r, a + "rope.freq_base");
    ASSERT_EQ(s.hp.rope_freq_base.has_value(), base.has_value());
    if (base) {
      EXPECT_NEAR(*s.hp.rope_freq_base, *base, *base * 1e-7);
    }
    // Layers before leading_dense_block_count have no routed experts.
    for (int64_t l = 0; l < meta_int(r, a + "leading_dense_block_count").value_or(0); ++l) EXPECT_EQ(e.expert_bytes.count(static_cast<int>(l)), 0u);
  }
  std::fprintf(stderr, "checked %zu fixture models\n", models.size());
}

// --- budget planning -------------------------------------------------------------------------

ModelSummary synthetic_summary() {
  ModelSummary s;
  s.dense_bytes = 1000;
  s.routed_bytes = 8000;
  s.n_routed_experts = 16;  // 500 bytes each
  return s;
}

TEST(InspectBudget, DenseExceedsBudget) {
  const BudgetFit b = BudgetFit::plan(synthetic_summary(), 999);
  EXPECT_FALSE(b.dense_fits);
  EXPECT_FALSE(b.all_fits);
  EXPECT_EQ(b.expert_cache_bytes, 0u);
  EXPECT_EQ(b.experts_fit, 0);
  EXPECT_EQ(b.experts_total, 16);
  EXPECT_EQ(b.routed_fraction, 0.0);
}

TEST(InspectBudget, AllFits) {
  for (uint64_t budget : {9000ull, 1ull << 40}) {
    const BudgetFit b = BudgetFit::plan(synthetic_summary(), budget);
    EXPECT_TRUE(b.dense_fits);
    EXPECT_TRUE(b.all_fits);
    EXPECT_EQ(b.expert_cache_bytes, budget - 1000);
    EXPECT_EQ(b.experts_fit, 16);
    EXPECT_EQ(b.routed_fraction, 1.0);
  }
}

TEST(InspectBudget, Partial) {
  const BudgetFit b = BudgetFit::plan(synthetic_summary(), 5250);
  EXPECT_TRUE(b.dense_fits);
  EXPECT_FALSE(b.all_fits);
  EXPECT_EQ(b.expert_cache_bytes, 4250u);
  EXPECT_EQ(b.experts_fit, 8);  // 4250 / 500
  EXPECT_DOUBLE_EQ(b.routed_fraction, 4250.0 / 8000.0);
  const BudgetFit exact = BudgetFit::plan(synthetic_summary(), 1000);
  EXPECT_TRUE(exact.dense_fits);
  EXPECT_EQ(exact.experts_fit, 0);
}

TEST(InspectBudget, DenseOnlyModelAlwaysRoutedFraction1) {
  ModelSummary s;
  s.dense_bytes = 100;
  const BudgetFit b = BudgetFit::plan(s, 100);
  EXPECT_TRUE(b.all_fits);
  EXPECT_EQ(b.routed_fraction, 1.0);
}

TEST(InspectBudget, OnAFixture) {
  const auto models = fixture_models();
  SKIP_WITHOUT_FIXTURES(models);
  // The first MoE fixture (a dense one has no experts to plan for).
  fs::path dir;
  for (const auto& d : models)
    if (const Readme rd = parse_readme(d); dir.empty() && meta_int(rd, readme_arch(rd) + ".expert_count")) dir = d;
  ASSERT_FALSE(dir.empty()) << "no MoE fixture";
  const Readme r = parse_readme(dir);
  const std::string arch = readme_arch(r);
  const InspectExpected e = expected_of(r, arch);
  const ModelSummary s = ModelSummary::of(*GgufModel::open((dir / "model.gguf").string()));
  const uint64_t avg = e.routed / static_cast<uint64_t>(e.routed_experts);
  const BudgetFit b = BudgetFit::plan(s, e.dense + 3 * avg + avg / 2);
  EXPECT_TRUE(b.dense_fits);
  EXPECT_FALSE(b.all_fits);
  EXPECT_EQ(b.experts_fit, 3);
  EXPECT_EQ(b.experts_total, e.routed_experts);
  EXPECT_FALSE(BudgetFit::plan(s, e.dense - 1).dense_fits);
  EXPECT_TRUE(BudgetFit::plan(s, e.dense + e.routed).all_fits);
}

// --- the strata binary -----------------------------------------------------------------------

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

RunResult run_strata(const std::string& args) {
  const fs::path err_path = fs::temp_directory_path() / ("strata-inspect-stderr-" + std::to_string(::getpid()));
  const std::string cmd = std::string("'") + STRATA_BINARY + "' " + args + " 2>'" + err_path.string() + "'";
  RunResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  fs::remove(err_path);
  return r;
}

TEST(InspectCli, JsonMatchesReadme) {
  const auto models = fixture_models();
  SKIP_WITHOUT_FIXTURES(models);
  // Prefer a model with leading dense layers and shared experts, when present.
  fs::path dir = models.front();
  for (const auto& d : models)
    if (d.filename().string().rfind("deepseek2", 0) == 0) dir = d;
  const Readme r = parse_readme(dir);
  const std::string arch = readme_arch(r);
  const InspectExpected e = expected_of(r, arch);
  const uint64_t budget = e.dense + e.routed / 2;
  const RunResult res = run_strata("inspect '" + (dir / "model.gguf").string() + "' --json --ram-budget " + std::to_string(budget));
  ASSERT_EQ(res.exit_code, 0) << res.err;
  const auto j = nlohmann::json::parse(res.out);
  EXPECT_EQ(j.at("file_bytes").get<uint64_t>(), r.file_bytes);
  EXPECT_EQ(j.at("tensor_count").get<int64_t>(), static_cast<int64_t>(r.tensors.size()));
  EXPECT_EQ(j.at("dense_bytes").get<uint64_t>(), e.dense);
  EXPECT_EQ(j.at("routed_expert_bytes").get<uint64_t>(), e.routed);
  EXPECT_EQ(j.at("routed_expert_count").get<int64_t>(), e.routed_experts);
  EXPECT_EQ(j.at("bytes_touched_per_token").get<uint64_t>(), e.touched);
  const auto& h = j.at("hparams");
  EXPECT_EQ(h.at("architecture").get<std::string>(), arch);
  EXPECT_EQ(h.at("block_count").get<int64_t>(), *meta_int(r, arch + ".block_count"));
  EXPECT_EQ(h.at("expert_count").get<int64_t>(), *meta_int(r, arch + ".expert_count"));
  EXPECT_EQ(h.at("expert_used_count").get<int64_t>(), *meta_int(r, arch + ".expert_used_count"));
  if (auto v = meta_int(r, arch + ".leading_dense_block_count")) {
    EXPECT_EQ(h.at("leading_dense_block_count").get<int64_t>(), *v);
  }
  for (const auto& l : j.at("layers")) {
    const int layer = l.at("layer").get<int>();
    const uint64_t want = e.expert_bytes.count(layer) ? e.expert_bytes.at(layer) : 0;
    EXPECT_EQ(l.at("expert_bytes").get<uint64_t>(), want) << "layer " << layer;
  }
  const auto& rb = j.at("ram_budget");
  EXPECT_EQ(rb.at("budget_bytes").get<uint64_t>(), budget);
  EXPECT_TRUE(rb.at("dense_fits").get<bool>());
  EXPECT_FALSE(rb.at("all_fits").get<bool>());
  EXPECT_EQ(rb.at("expert_cache_bytes").get<uint64_t>(), e.routed / 2);
  EXPECT_NEAR(rb.at("routed_fraction").get<double>(), 0.5, 1e-9);
}

TEST(InspectCli, CorruptFileIsAnErrorNotACrash) {
  const fs::path dir = fs::temp_directory_path() / ("strata-inspect-corrupt-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Case {
    std::string name, bytes, what;
  };
  std::string truncated = "GGUF";
  truncated += std::string("\x03\0\0\0", 4) + std::string("\x01\0\0\0\0\0\0\0", 8);  // tensor count, no kv count
  const std::vector<Case> cases = {
      {"garbage.gguf", "this is not a model at all, just some text", "bad magic"},
      {"truncated.gguf", truncated, "truncated"},
      {"empty.gguf", "", "truncated"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = (dir / c.name).string();
    std::ofstream(path, std::ios::binary) << c.bytes;
    const RunResult res = run_strata("inspect '" + path + "' --json");
    EXPECT_EQ(res.exit_code, 1) << res.err;
    EXPECT_EQ(res.err.rfind("error: ", 0), 0u) << res.err;
    EXPECT_NE(res.err.find(path), std::string::npos) << res.err;
    EXPECT_NE(res.err.find("offset"), std::string::npos) << res.err;
    EXPECT_NE(res.err.find(c.what), std::string::npos) << res.err;
    EXPECT_TRUE(res.out.empty()) << res.out;
  }
  const RunResult missing = run_strata("inspect '" + (dir / "absent.gguf").string() + "'");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("cannot open"), std::string::npos) << missing.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata::test
