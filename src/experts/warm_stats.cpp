#include "experts/warm_stats.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/error.h"
#include "gguf/gguf_file.h"

namespace strata {

namespace {
constexpr char kMagic[8] = {'S', 'T', 'R', 'W', 'A', 'R', 'M', '1'};
constexpr size_t kHeaderBytes = 8 + 4 * 4 + 8 + 8;

struct Fnv {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
  template <typename T>
  void add(const T& v) { add(&v, sizeof v); }
};

template <typename T>
void put(std::vector<uint8_t>& out, const T& v) {
  const auto* b = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), b, b + sizeof v);
}
template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace

std::vector<ExpertKey> WarmStats::ranked() const {
  std::vector<size_t> idx;
  for (size_t i = 0; i < weight.size(); ++i)
    if (weight[i] > 0) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return weight[a] > weight[b]; });
  std::vector<ExpertKey> out;
  out.reserve(idx.size());
  for (size_t i : idx) out.push_back(ExpertKey{static_cast<int32_t>(i / n_expert), static_cast<int32_t>(i % n_expert)});
  return out;
}

uint64_t model_identity(const GgufModel& model) {
  Fnv f;
  f.add(static_cast<uint64_t>(model.metadata().size()));
  for (const auto& part : model.parts()) f.add(part->size);
  for (const auto& t : model.tensors()) {
    f.add(t.name.data(), t.name.size());
    f.add(static_cast<uint32_t>(t.type));
    f.add(t.ne);
    f.add(t.part);
    f.add(t.offset);
  }
  return f.h;
}

std::string default_stats_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/strata";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/strata";
  return "";
}

std::string warm_stats_path(const std::string& dir, uint64_t model_key) { return fmt::format("{}/experts-{:016x}.warm", dir, model_key); }

std::vector<uint8_t> serialize_warm_stats(const WarmStats& s) {
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  put(out, kWarmStatsVersion);
  put(out, static_cast<uint32_t>(s.n_layer));
  put(out, static_cast<uint32_t>(s.n_expert));
  put(out, uint32_t{0});
  put(out, s.model_key);
  put(out, s.runs);
  for (double w : s.weight) put(out, w);
  Fnv f;
  f.add(out.data(), out.size());
  put(out, f.h);
  return out;
}

std::optional<WarmStats> parse_warm_stats(std::span<const uint8_t> b, uint64_t model_key, int n_layer, int n_expert, std::string* why) {
  auto bad = [&](std::string w) -> std::optional<WarmStats> {
    if (why) *why = std::move(w);
    return std::nullopt;
  };
  if (b.size() < kHeaderBytes + 8) return bad(fmt::format("truncated ({} bytes)", b.size()));
  if (std::memcmp(b.data(), kMagic, 8) != 0) return bad("not a warm-start statistics file (bad magic)");
  const uint8_t* p = b.data() + 8;
  if (get<uint32_t>(p) != kWarmStatsVersion) return bad(fmt::format("version {} (expected {})", get<uint32_t>(p), kWarmStatsVersion));
  WarmStats s;
  s.n_layer = static_cast<int>(get<uint32_t>(p + 4));
  s.n_expert = static_cast<int>(get<uint32_t>(p + 8));
  s.model_key = get<uint64_t>(p + 16);
  s.runs = get<uint64_t>(p + 24);
  if (s.model_key != model_key) return bad(fmt::format("written for another model (key {:016x}, this model {:016x})", s.model_key, model_key));
  if (s.n_layer != n_layer || s.n_expert != n_expert)
    return bad(fmt::format("shape {}x{} (the model has {}x{} experts)", s.n_layer, s.n_expert, n_layer, n_expert));
  const uint64_t cells = static_cast<uint64_t>(n_layer) * static_cast<uint64_t>(n_expert);
  if (b.size() != kHeaderBytes + 8 * cells + 8) return bad(fmt::format("{} bytes (expected {})", b.size(), kHeaderBytes + 8 * cells + 8));
  Fnv f;
  f.add(b.data(), b.size() - 8);
  if (f.h != get<uint64_t>(b.data() + b.size() - 8)) return bad("checksum mismatch (corrupt file)");
  s.weight.resize(cells);
  for (uint64_t i = 0; i < cells; ++i) {
    s.weight[i] = get<double>(b.data() + kHeaderBytes + 8 * i);
    if (!std::isfinite(s.weight[i]) || s.weight[i] < 0) return bad("invalid weight");
  }
  return s;
}

std::optional<WarmStats> load_warm_stats(const std::string& path, uint64_t model_key, int n_layer, int n_expert, std::string* why) {
  if (why) why->clear();
  std::error_code dir_ec;
  if (std::filesystem::is_directory(path, dir_ec)) {
    if (why) *why = "it is a directory, not a statistics file (remove it, or choose another --stats-dir)";
    return std::nullopt;
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    if (errno != ENOENT && why) *why = fmt::format("cannot open: {}", std::strerror(errno));
    return std::nullopt;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parse_warm_stats(bytes, model_key, n_layer, n_expert, why);
}

namespace {

// Temporaries "<name>.tmp.<pid>.<n>" of writers that died before their rename (a kill during a
// save): removed by the next writer. A live writer's temporary is left alone.
void remove_orphans(const std::filesystem::path& target) {
  std::error_code ec;
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  const std::string prefix = target.filename().string() + ".tmp.";
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) std::filesystem::remove(it->path(), ec);
  }
}

}  // namespace

void save_warm_stats(const std::string& path, uint64_t model_key, int n_layer, int n_expert, std::span<const double> counts) {
  const size_t cells = static_cast<size_t>(n_layer) * static_cast<size_t>(n_expert);
  STRATA_CHECK(counts.size() == cells, "warm-start statistics: {} counts for {} experts", counts.size(), cells);
  const std::filesystem::path target(path);
  std::error_code ec;
  STRATA_CHECK(!std::filesystem::is_directory(target, ec), "warm-start statistics: {} is a directory, not a statistics file (remove it, or choose another --stats-dir)",
               path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  // Writers take turns on the directory (flock), so none loses another's counts between its read
  // and its rename; readers need no lock (the rename is atomic). Best effort: without the lock
  // the file still stays whole.
  const int dir_fd = ::open(target.has_parent_path() ? target.parent_path().c_str() : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0)
    while (::flock(dir_fd, LOCK_EX) != 0 && errno == EINTR) {
    }
  struct Unlock {
    int fd;
    ~Unlock() {
      if (fd >= 0) ::close(fd);  // releases the lock
    }
  } unlock{dir_fd};
  remove_orphans(target);
  std::string why;
  WarmStats s;
  if (auto old = load_warm_stats(path, model_key, n_layer, n_expert, &why)) {
    s = std::move(*old);
    for (double& w : s.weight) w *= kWarmStatsDecay;
  } else {
    s.model_key = model_key;
    s.n_layer = n_layer;
    s.n_expert = n_expert;
    s.weight.assign(cells, 0.0);
  }
  for (size_t i = 0; i < cells; ++i) s.weight[i] += std::max(0.0, counts[i]);
  s.runs++;
  const std::vector<uint8_t> bytes = serialize_warm_stats(s);
  static std::atomic<uint64_t> serial{0};
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), serial++);  // one temporary per writer
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  STRATA_CHECK(fd >= 0, "warm-start statistics: cannot create {}: {}", tmp, std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const int err = done == bytes.size() ? (::fsync(fd) == 0 ? 0 : errno) : errno;
  ::close(fd);
  if (err != 0 || done != bytes.size() || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = err ? err : errno;
    ::unlink(tmp.c_str());
    fail("warm-start statistics: cannot write {}: {}", path, std::strerror(e ? e : EIO));
  }
  if (dir_fd >= 0) ::fsync(dir_fd);  // the rename itself survives a crash
}

}  // namespace strata
