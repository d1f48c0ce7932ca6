#include "runtime/slot_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <span>
#include <vector>

#include "experts/warm_stats.h"
#include "runtime/engine.h"

namespace strata {

namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'S', 'L', 'O', 'T', '1'};
constexpr size_t kNameBytes = 32;

// A streaming 64-bit hash over 8-byte words (a multiply-rotate mix; fast enough not to slow a
// restore that reads the file at disk speed). Bytes are buffered across calls, so the value does
// not depend on how the data is cut.
class Hash64 {
 public:
  void add(const uint8_t* p, size_t n) {
    total_ += n;
    while (n > 0 && nbuf_ > 0) {
      buf_[nbuf_++] = *p++, --n;
      if (nbuf_ == 8) mix_buf();
    }
    for (; n >= 8; p += 8, n -= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      mix(w);
    }
    while (n > 0 && nbuf_ < 8) buf_[nbuf_++] = *p++, --n;  // n < 8 and nbuf_ == 0 here
  }
  uint64_t value() const {
    Hash64 h = *this;
    if (h.nbuf_ > 0) {
      std::memset(h.buf_ + h.nbuf_, 0, 8 - h.nbuf_);
      h.mix_buf();
    }
    h.mix(h.total_);
    uint64_t x = h.h_;
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
    return x;
  }

 private:
  void mix(uint64_t w) {
    h_ ^= w * 0x9e3779b97f4a7c15ull;
    h_ = ((h_ << 31) | (h_ >> 33)) * 0xbf58476d1ce4e5b9ull;
  }
  void mix_buf() {
    uint64_t w;
    std::memcpy(&w, buf_, 8);
    mix(w);
    nbuf_ = 0;
  }
  uint64_t h_ = 0x2545f4914f6cdd1dull, total_ = 0;
  uint8_t buf_[8] = {};
  size_t nbuf_ = 0;
};

struct Header {
  uint64_t model_key = 0;
  uint32_t type_k = 0, type_v = 0, n_ctx = 0, n_layer = 0, n_vocab = 0, n_tokens = 0, n_chunked = 0;
  uint64_t row_bytes = 0, state_bytes = 0;
  std::string arch, kind;
};

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const auto* b = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), b, b + sizeof v);
}
void put_name(std::vector<uint8_t>& out, const std::string& s) {
  std::string n = s.substr(0, kNameBytes - 1);
  n.resize(kNameBytes, '\0');
  out.insert(out.end(), n.begin(), n.end());
}
template <typename T>
T get(const uint8_t*& p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}

std::vector<uint8_t> encode(const Header& h) {
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  put(out, kSlotFileVersion);
  put(out, static_cast<uint32_t>(kSlotHeaderBytes));
  put(out, h.model_key);
  for (uint32_t v : {h.type_k, h.type_v, h.n_ctx, h.n_layer, h.n_vocab, h.n_tokens, h.n_chunked, 0u}) put(out, v);
  put(out, h.row_bytes);
  put(out, h.state_bytes);
  put_name(out, h.arch);
  put_name(out, h.kind);
  Hash64 hash;
  hash.add(out.data(), out.size());
  put(out, hash.value());
  STRATA_CHECK(out.size() == kSlotHeaderBytes, "slot file header of {} bytes (expected {})", out.size(), kSlotHeaderBytes);
  return out;
}

Header decode(const uint8_t* b) {
  if (std::memcmp(b, kMagic, 8) != 0) throw SlotFileError("not a slot file (bad magic)");
  Hash64 hash;
  hash.add(b, kSlotHeaderBytes - 8);
  const uint8_t* p = b + kSlotHeaderBytes - 8;
  if (get<uint64_t>(p) != hash.value()) throw SlotFileError("the slot file's header is corrupt (hash mismatch)");
  p = b + 8;
  const auto version = get<uint32_t>(p);
  if (version != kSlotFileVersion) throw SlotFileError(fmt::format("slot file version {} (this build reads {})", version, kSlotFileVersion));
  if (get<uint32_t>(p) != kSlotHeaderBytes) throw SlotFileError("the slot file's header size is wrong");
  Header h;
  h.model_key = get<uint64_t>(p);
  for (uint32_t* v : {&h.type_k, &h.type_v, &h.n_ctx, &h.n_layer, &h.n_vocab, &h.n_tokens, &h.n_chunked}) *v = get<uint32_t>(p);
  p += 4;
  h.row_bytes = get<uint64_t>(p);
  h.state_bytes = get<uint64_t>(p);
  h.arch.assign(reinterpret_cast<const char*>(p), strnlen(reinterpret_cast<const char*>(p), kNameBytes));
  p += kNameBytes;
  h.kind.assign(reinterpret_cast<const char*>(p), strnlen(reinterpret_cast<const char*>(p), kNameBytes));
  return h;
}

// Every region that holds slot `seq`'s n positions, in file order: K then V rows per layer, then
// the architecture's state.
void regions(Engine& eng, int seq, int n, std::vector<std::span<uint8_t>>& kv, std::vector<std::span<uint8_t>>& state) {
  KvCache& c = eng.kv();
  for (int l = 0; l < c.n_layer(); ++l) {
    if (auto k = c.k_bytes(l, seq, n); !k.empty()) kv.push_back(k);
    if (auto v = c.v_bytes(l, seq, n); !v.empty()) kv.push_back(v);
  }
  if (c.ext()) c.ext()->seq_regions(seq, n, state);
}

uint64_t total(const std::vector<std::span<uint8_t>>& r) {
  uint64_t t = 0;
  for (const auto& s : r) t += s.size();
  return t;
}

// What this engine's slot files say about it (n_tokens, n_chunked and state_bytes per slot).
Header engine_header(Engine& eng) {
  Header h;
  h.model_key = model_identity(eng.model().gguf());
  h.type_k = static_cast<uint32_t>(eng.kv().type_k());
  h.type_v = static_cast<uint32_t>(eng.kv().type_v());
  h.n_ctx = static_cast<uint32_t>(eng.kv().n_ctx());
  h.n_layer = static_cast<uint32_t>(eng.kv().n_layer());
  h.n_vocab = static_cast<uint32_t>(eng.config().n_vocab);
  std::vector<std::span<uint8_t>> kv, state;
  regions(eng, 0, 1, kv, state);
  h.row_bytes = total(kv);
  h.arch = eng.config().arch;
  h.kind = eng.kv().ext() ? eng.kv().ext()->slot_kind() : "";
  return h;
}

void write_all(int fd, const uint8_t* p, size_t n, Hash64& hash) {
  hash.add(p, n);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("cannot write the slot file: {}", std::strerror(w < 0 ? errno : EIO));
    p += w, n -= static_cast<size_t>(w);
  }
}

void read_all(int fd, uint8_t* p, size_t n, Hash64* hash) {
  uint8_t* start = p;
  const size_t want = n;
  while (n > 0) {
    const ssize_t r = ::read(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("cannot read the slot file: {}", std::strerror(errno));
    if (r == 0) throw SlotFileError("the slot file is truncated (it changed while being read)");
    p += r, n -= static_cast<size_t>(r);
  }
  if (hash) hash->add(start, want);
}

std::string type_name(uint32_t t) { return t < kGgmlTypeCount ? ggml_type_name(static_cast<GgmlType>(t)) : fmt::format("type {}", t); }

// The header's claims against the engine's, the first difference named.
void check_matches(const Header& f, const Header& e) {
  if (f.arch != e.arch) throw SlotFileError(fmt::format("the slot file was saved by a {} model (this server runs {})", f.arch, e.arch));
  if (f.model_key != e.model_key)
    throw SlotFileError(fmt::format("the slot file was saved by another model (model key {:016x}, this model {:016x})", f.model_key, e.model_key));
  if (f.type_k != e.type_k || f.type_v != e.type_v)
    throw SlotFileError(fmt::format("the slot file holds a {}/{} KV cache (this server's is {}/{}: --cache-type-k/--cache-type-v)", type_name(f.type_k),
                                    type_name(f.type_v), type_name(e.type_k), type_name(e.type_v)));
  if (f.n_ctx != e.n_ctx) throw SlotFileError(fmt::format("the slot file was saved with a context of {} (this server's is {}: -c)", f.n_ctx, e.n_ctx));
  if (f.n_layer != e.n_layer || f.n_vocab != e.n_vocab || f.row_bytes != e.row_bytes)
    throw SlotFileError(fmt::format("the slot file's layout ({} layers, {} vocabulary, {} row bytes) is not this model's ({}, {}, {})", f.n_layer, f.n_vocab,
                                    f.row_bytes, e.n_layer, e.n_vocab, e.row_bytes));
  if (f.kind != e.kind)
    throw SlotFileError(fmt::format("the slot file holds per-sequence state '{}' (this model keeps '{}')", f.kind, e.kind));
  if (f.n_tokens > f.n_ctx) throw SlotFileError(fmt::format("the slot file claims {} tokens in a context of {}", f.n_tokens, f.n_ctx));
  if (f.n_chunked > f.n_tokens) throw SlotFileError(fmt::format("the slot file claims {} reusable rows of {} tokens", f.n_chunked, f.n_tokens));
}

}  // namespace

std::string slot_file_unsupported(Engine& eng) {
  if (eng.model().executor() != nullptr) return "slot files need the KV rows in host memory: not supported with --gpu vulkan yet";
  const auto& ext = eng.kv().ext();
  if (ext && *ext->slot_kind() == '\0')
    return fmt::format("architecture {} keeps per-sequence state that slot files cannot hold yet", eng.config().arch);
  return "";
}

SlotFileCounts write_slot_file(Engine& eng, int seq, int fd) {
  if (const std::string why = slot_file_unsupported(eng); !why.empty()) throw SlotFileError(why);
  Header h = engine_header(eng);
  const std::span<const int32_t> tokens = eng.seq_tokens(seq);
  const int n = static_cast<int>(tokens.size());
  h.n_tokens = static_cast<uint32_t>(n);
  h.n_chunked = static_cast<uint32_t>(eng.chunked_rows(seq));
  std::vector<std::span<uint8_t>> kv, state;
  regions(eng, seq, n, kv, state);
  h.state_bytes = total(state);
  Hash64 hash;
  const std::vector<uint8_t> head = encode(h);
  write_all(fd, head.data(), head.size(), hash);
  write_all(fd, reinterpret_cast<const uint8_t*>(tokens.data()), tokens.size_bytes(), hash);
  for (const auto* rs : {&kv, &state})
    for (const auto& r : *rs) write_all(fd, r.data(), r.size(), hash);
  const uint64_t sum = hash.value();
  Hash64 unused;
  write_all(fd, reinterpret_cast<const uint8_t*>(&sum), 8, unused);
  return {n, head.size() + tokens.size_bytes() + total(kv) + total(state) + 8};
}

SlotFileCounts read_slot_file(Engine& eng, int seq, int fd) {
  if (const std::string why = slot_file_unsupported(eng); !why.empty()) throw SlotFileError(why);
  STRATA_CHECK(seq >= 0 && seq < eng.n_seq(), "slot {} out of range ({} slots)", seq, eng.n_seq());
  struct stat st{};
  STRATA_CHECK(::fstat(fd, &st) == 0, "cannot stat the slot file: {}", std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kSlotHeaderBytes) throw SlotFileError(fmt::format("the slot file is truncated ({} bytes, less than its header)", size));
  uint8_t head[kSlotHeaderBytes];
  Hash64 hash;
  read_all(fd, head, kSlotHeaderBytes, &hash);
  const Header f = decode(head);
  const Header e = engine_header(eng);
  check_matches(f, e);
  // The size the header implies, before anything is allocated or written.
  const int n = static_cast<int>(f.n_tokens);
  std::vector<std::span<uint8_t>> kv, state;
  regions(eng, seq, n, kv, state);
  if (f.state_bytes != total(state))
    throw SlotFileError(fmt::format("the slot file holds {} bytes of per-sequence state ({} expected)", f.state_bytes, total(state)));
  const uint64_t expect = kSlotHeaderBytes + 4 * static_cast<uint64_t>(n) + total(kv) + total(state) + 8;
  if (size != expect)
    throw SlotFileError(fmt::format("the slot file has {} bytes where its header implies {} ({})", size, expect, size < expect ? "truncated" : "trailing bytes"));
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  read_all(fd, reinterpret_cast<uint8_t*>(tokens.data()), tokens.size() * 4, &hash);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= eng.config().n_vocab)
      throw SlotFileError(fmt::format("the slot file's token {} is {}, not a token id of this vocabulary", i, tokens[i]));
  // From here the slot's rows are overwritten: it is empty until the body checks out.
  eng.reset(seq);
  for (const auto* rs : {&kv, &state})
    for (const auto& r : *rs) read_all(fd, r.data(), r.size(), &hash);
  uint64_t sum = 0;
  read_all(fd, reinterpret_cast<uint8_t*>(&sum), 8, nullptr);
  if (sum != hash.value()) throw SlotFileError("the slot file is corrupt (hash mismatch); the slot is left empty");
  eng.adopt_rows(seq, tokens, static_cast<int>(f.n_chunked));
  return {n, size};
}

// ---------------------------------------------------------------- SlotDir

SlotDir::SlotDir(const std::string& path) : path_(path) {
  STRATA_CHECK(!path.empty(), "--slot-save-path needs a directory");
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  STRATA_CHECK(fd_ >= 0, "cannot open the slot directory {}: {}", path, std::strerror(errno));
}

SlotDir::~SlotDir() {
  if (fd_ >= 0) ::close(fd_);
}

void SlotDir::check_name(const std::string& name) {
  if (name.empty()) throw SlotFileError("the slot file name is empty");
  if (name.size() > 255) throw SlotFileError("the slot file name is longer than 255 bytes");
  if (name[0] == '.') throw SlotFileError("a slot file name may not start with '.' (no '..', no hidden files)");
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '/' || c == '\\') throw SlotFileError("a slot file name is a plain name inside the slot directory (no '/' or '\\')");
    if (u < 0x20 || u == 0x7f) throw SlotFileError("a slot file name may not hold control characters");
  }
}

namespace {
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

SlotFileCounts SlotDir::save(Engine& eng, int seq, const std::string& name) {
  check_name(name);
  if (const std::string why = slot_file_unsupported(eng); !why.empty()) throw SlotFileError(why);
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = fmt::format(".strata-slot-{}-{}.tmp", ::getpid(), counter.fetch_add(1));
  Fd f;
  f.fd = ::openat(fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  STRATA_CHECK(f.fd >= 0, "cannot create a file in the slot directory {}: {}", path_, std::strerror(errno));
  try {
    const SlotFileCounts c = write_slot_file(eng, seq, f.fd);
    STRATA_CHECK(::fsync(f.fd) == 0, "cannot sync the slot file: {}", std::strerror(errno));
    if (::renameat(fd_, tmp.c_str(), fd_, name.c_str()) != 0) {
      const int err = errno;
      if (err == EISDIR || err == ENOTEMPTY || err == EEXIST) throw SlotFileError(fmt::format("'{}' is a directory in the slot directory", name));
      fail("cannot rename the slot file to {}: {}", name, std::strerror(err));
    }
    ::fsync(fd_);  // the rename itself on disk (best effort: some file systems refuse a directory fsync)
    return c;
  } catch (...) {
    ::unlinkat(fd_, tmp.c_str(), 0);
    throw;
  }
}

SlotFileCounts SlotDir::restore(Engine& eng, int seq, const std::string& name) {
  check_name(name);
  Fd f;
  f.fd = ::openat(fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (f.fd < 0) {
    const int err = errno;
    if (err == ENOENT) throw SlotFileError(fmt::format("no slot file '{}' in the slot directory", name));
    if (err == ELOOP) throw SlotFileError(fmt::format("'{}' is a symbolic link: slot files are regular files inside the slot directory", name));
    fail("cannot open the slot file {}: {}", name, std::strerror(err));
  }
  struct stat st{};
  STRATA_CHECK(::fstat(f.fd, &st) == 0, "cannot stat the slot file {}: {}", name, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw SlotFileError(fmt::format("'{}' is not a regular file", name));
  const int flags = ::fcntl(f.fd, F_GETFL);
  if (flags >= 0) ::fcntl(f.fd, F_SETFL, flags & ~O_NONBLOCK);
  return read_slot_file(eng, seq, f.fd);
}

}  // namespace strata
