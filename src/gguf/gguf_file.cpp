#include "gguf/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>

#include "core/error.h"
#include "gguf/gguf_names.h"

namespace strata {
namespace {

constexpr int kMaxArrayDepth = 8;
constexpr uint64_t kMaxStringLen = 1ull << 30;  // 1 GiB: longer strings are corrupt
// Counts read from the file are bounded by the bytes left, but reserving that much up front
// would still cost a multiple of the file size on a corrupt count: vectors grow as parsed.
constexpr uint64_t kMaxReserve = 4096;
// GgufFile::open reads this much of the header first, then 4x more until it parses.
constexpr uint64_t kHeaderFirstRead = 1ull << 20;
uint64_t capped(uint64_t n) { return n < kMaxReserve ? n : kMaxReserve; }

// Thrown when parsing reaches past the bytes made available (GgufFile::open reads the header in
// growing steps) but not past the file: open() reads more and parses again.
struct NeedMoreHeader {};

// Bounds-checked little-endian reader over the file bytes; every failure names file + offset.
// Only [0, avail) may be read; bounds that describe the file (counts, lengths) use its full size.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t avail, uint64_t size, const std::string& name) : d_(data), avail_(avail), n_(size), name_(name) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return n_ - pos_; }
  const uint8_t* ptr() const { return d_ + pos_; }

  void need(uint64_t bytes, const char* what) const {
    if (bytes > remaining())
      fail("{}: offset {}: truncated file while reading {} (need {} bytes, {} left)", name_, pos_, what, bytes, remaining());
    if (bytes > avail_ - pos_) throw NeedMoreHeader{};
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, d_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view read_string(const char* what) {
    const uint64_t at = pos_;
    const uint64_t len = read<uint64_t>(what);
    if (len > remaining() || len > kMaxStringLen)
      fail("{}: offset {}: {} length {} exceeds the file ({} bytes left)", name_, at, what, len, remaining());
    need(len, what);
    std::string_view s(reinterpret_cast<const char*>(d_ + pos_), len);
    pos_ += len;
    return s;
  }
  void skip(uint64_t bytes, const char* what) {
    need(bytes, what);
    pos_ += bytes;
  }
  [[noreturn]] void error_at(uint64_t at, const std::string& msg) const { fail("{}: offset {}: {}", name_, at, msg); }

 private:
  const uint8_t* d_;
  uint64_t avail_;
  uint64_t n_;
  uint64_t pos_ = 0;
  const std::string& name_;
};

GgufType read_type(Cursor& c, const char* what) {
  const uint64_t at = c.pos();
  const uint32_t t = c.read<uint32_t>(what);
  if (t >= kGgufTypeCount) c.error_at(at, fmt::format("unknown metadata value type {} in {}", t, what));
  return static_cast<GgufType>(t);
}

void read_scalar(Cursor& c, GgufType t, GgufValue& v) {
  v.type = t;
  switch (t) {
    case GgufType::U8: v.u = c.read<uint8_t>("u8"); v.i = static_cast<int64_t>(v.u); break;
    case GgufType::I8: v.i = c.read<int8_t>("i8"); v.u = static_cast<uint64_t>(v.i); break;
    case GgufType::U16: v.u = c.read<uint16_t>("u16"); v.i = static_cast<int64_t>(v.u); break;
    case GgufType::I16: v.i = c.read<int16_t>("i16"); v.u = static_cast<uint64_t>(v.i); break;
    case GgufType::U32: v.u = c.read<uint32_t>("u32"); v.i = static_cast<int64_t>(v.u); break;
    case GgufType::I32: v.i = c.read<int32_t>("i32"); v.u = static_cast<uint64_t>(v.i); break;
    case GgufType::U64: v.u = c.read<uint64_t>("u64"); v.i = static_cast<int64_t>(v.u); break;
    case GgufType::I64: v.i = c.read<int64_t>("i64"); v.u = static_cast<uint64_t>(v.i); break;
    case GgufType::F32: v.f = c.read<float>("f32"); break;
    case GgufType::F64: v.f = c.read<double>("f64"); break;
    case GgufType::BOOL: {
      const uint64_t at = c.pos();
      uint8_t b = c.read<uint8_t>("bool");
      if (b > 1) c.error_at(at, fmt::format("bool value {} is neither 0 nor 1", b));
      v.u = b;
      v.i = b;
      break;
    }
    default: break;
  }
}

void read_value(Cursor& c, GgufType t, GgufValue& v, int depth) {
  v.type = t;
  if (t == GgufType::STRING) {
    v.str = c.read_string("string value");
    return;
  }
  if (t != GgufType::ARRAY) {
    read_scalar(c, t, v);
    return;
  }
  const uint64_t at = c.pos();
  if (depth >= kMaxArrayDepth) c.error_at(at, fmt::format("arrays nested deeper than {}", kMaxArrayDepth));
  v.elem_type = read_type(c, "array element type");
  v.count = c.read<uint64_t>("array length");
  // Every element takes at least this many bytes: bounds the count before any allocation.
  const uint64_t min_elem = v.elem_type == GgufType::STRING ? 8 : v.elem_type == GgufType::ARRAY ? 12 : gguf_scalar_size(v.elem_type);
  if (v.count > c.remaining() / min_elem)
    c.error_at(at, fmt::format("array of {} {} exceeds the file ({} bytes left)", v.count, gguf_type_name(v.elem_type), c.remaining()));
  if (v.elem_type == GgufType::STRING) {
    v.strings.reserve(capped(v.count));
    for (uint64_t k = 0; k < v.count; ++k) v.strings.push_back(c.read_string("string array element"));
  } else if (v.elem_type == GgufType::ARRAY) {
    v.items.reserve(capped(v.count));
    for (uint64_t k = 0; k < v.count; ++k) {
      v.items.emplace_back();
      read_value(c, GgufType::ARRAY, v.items.back(), depth + 1);
    }
  } else {
    v.raw = c.ptr();
    if (v.elem_type == GgufType::BOOL) {
      for (uint64_t k = 0; k < v.count; ++k)
        if (v.raw[k] > 1) c.error_at(c.pos() + k, fmt::format("bool array element {} is {}", k, v.raw[k]));
    }
    c.skip(v.count * min_elem, "array data");
  }
}

}  // namespace

std::string GgufTensor::shape_string() const {
  std::string s;
  for (int d = 0; d < n_dims; ++d) s += (d ? "x" : "") + std::to_string(ne[d]);
  return s;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& [k, v] : kv)
    if (k == key) return &v;
  return nullptr;
}

uint64_t GgufFile::key_offset(std::string_view key) const {
  for (size_t k = 0; k < kv.size() && k < kv_offsets.size(); ++k)
    if (kv[k].first == key) return kv_offsets[k];
  return 0;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  MappedFile map(path);
  // The header (metadata, tokenizer, tensor infos) is parsed and kept as views into its bytes:
  // they are copied into memory with pread first, so an I/O error there is an error naming the
  // offset, not a SIGBUS on a mapped page. A longer header than read so far: read more, parse again.
  uint64_t avail = 0, want = std::min<uint64_t>(map.size(), kHeaderFirstRead);
  for (;;) {
    map.make_anonymous(avail, want - avail);
    avail = want;
    try {
      auto f = parse(map.data(), map.size(), path, avail);
      f->map = std::move(map);
      return f;
    } catch (const NeedMoreHeader&) {
      want = std::min<uint64_t>(map.size(), avail * 4);
    }
  }
}

std::unique_ptr<GgufFile> GgufFile::parse(const uint8_t* data, size_t size, const std::string& name, size_t avail) {
  auto f = std::make_unique<GgufFile>();
  f->path = name;
  f->base = data;
  f->size = size;
  Cursor c(data, std::min(avail, size), size, f->path);

  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kGgufMagic) {
    if (size >= 4)
      fail("{}: offset 0: bad magic {:02x} {:02x} {:02x} {:02x} (expected 'GGUF'): not a GGUF file", name, data[0], data[1], data[2], data[3]);
    fail("{}: offset 0: bad magic: not a GGUF file", name);
  }
  f->version = c.read<uint32_t>("version");
  if (f->version == 1) c.error_at(4, "GGUF version 1 is not supported (re-convert the model; v2 and v3 are)");
  if (f->version != 2 && f->version != 3) {
    if ((f->version & 0xFFFF) == 0) c.error_at(4, fmt::format("version {:#x} looks byte-swapped: big-endian GGUF is not supported", f->version));
    c.error_at(4, fmt::format("unsupported GGUF version {} (supported: 2, 3)", f->version));
  }
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Minimal on-disk sizes: kv = key len 8 + type 4 + 1 byte value; tensor info = 8 + 4 + 8 + 4 + 8.
  if (n_kv > c.remaining() / 13) c.error_at(16, fmt::format("metadata count {} exceeds the file", n_kv));
  if (n_tensors > c.remaining() / 32) c.error_at(8, fmt::format("tensor count {} exceeds the file", n_tensors));

  f->kv.reserve(capped(n_kv));
  f->kv_offsets.reserve(capped(n_kv));
  std::set<std::string_view> keys;
  for (uint64_t k = 0; k < n_kv; ++k) {
    const uint64_t at = c.pos();
    std::string_view key = c.read_string("metadata key");
    if (key.empty()) c.error_at(at, fmt::format("metadata key {} is empty", k));
    if (!keys.insert(key).second) c.error_at(at, fmt::format("duplicate metadata key '{}'", key));
    GgufValue v;
    read_value(c, read_type(c, "metadata value type"), v, 0);
    f->kv.emplace_back(key, std::move(v));
    f->kv_offsets.push_back(at);
  }

  if (const GgufValue* a = f->find(key::kAlignment)) {
    const uint64_t at = f->key_offset(key::kAlignment);
    if (a->type != GgufType::U32) c.error_at(at, fmt::format("general.alignment has type {} (expected u32)", gguf_type_name(a->type)));
    if (a->u == 0 || (a->u & (a->u - 1)) != 0) c.error_at(at, fmt::format("general.alignment {} is not a power of two", a->u));
    // Kernels read weights as floats and blocks in place: data must be at least 8-byte aligned
    // (every writer, llama.cpp's and Strata's, uses 32).
    if (a->u < 8) c.error_at(at, fmt::format("general.alignment {} is below 8: tensor data would be misaligned for the kernels", a->u));
    f->alignment = static_cast<uint32_t>(a->u);
  }

  f->tensors.reserve(capped(n_tensors));
  std::vector<uint64_t> info_at;  // file offset of each tensor info, for errors
  info_at.reserve(capped(n_tensors));
  std::set<std::string_view> names;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    const uint64_t at = c.pos();
    GgufTensor t;
    t.name = c.read_string("tensor name");
    if (t.name.empty()) c.error_at(at, fmt::format("tensor {} has an empty name", k));
    if (!names.insert(t.name).second) c.error_at(at, fmt::format("duplicate tensor name '{}'", t.name));
    const uint32_t nd = c.read<uint32_t>("tensor n_dims");
    if (nd < 1 || nd > kGgmlMaxDims) c.error_at(at, fmt::format("tensor '{}' has {} dimensions (1..{} allowed)", t.name, nd, kGgmlMaxDims));
    t.n_dims = static_cast<int>(nd);
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t dim = c.read<uint64_t>("tensor dimension");
      if (dim == 0 || dim > (1ull << 62)) c.error_at(at, fmt::format("tensor '{}' dimension {} is {}", t.name, d, dim));
      if (n_el > (1ull << 62) / dim) c.error_at(at, fmt::format("tensor '{}' element count overflows", t.name));
      n_el *= dim;
      t.ne[d] = dim;
    }
    const uint64_t type_at = c.pos();
    const uint32_t type_id = c.read<uint32_t>("tensor type");
    const auto info = ggml_type_info(type_id);
    if (!info) c.error_at(type_at, fmt::format("tensor '{}' has unknown ggml type {}", t.name, type_id));
    t.type = info->type;
    if (t.ne[0] % static_cast<uint64_t>(info->block_size) != 0)
      c.error_at(at, fmt::format("tensor '{}' row length {} is not a multiple of the {} block size {}", t.name, t.ne[0], info->name, info->block_size));
    // n_el <= 2^62 but n_blocks * type_size can still wrap (2^62 f32 values = 2^64 bytes):
    // a tensor larger than the file cannot be valid, so bound it by the file size first.
    const uint64_t n_blocks = n_el / static_cast<uint64_t>(info->block_size);
    if (n_blocks > size / static_cast<uint64_t>(info->type_size))
      c.error_at(at, fmt::format("tensor '{}' ({} {}) needs more bytes than the whole file ({} bytes)", t.name, info->name, t.shape_string(), size));
    t.nbytes = n_blocks * static_cast<uint64_t>(info->type_size);
    t.offset = c.read<uint64_t>("tensor data offset");
    if (t.offset % f->alignment != 0)
      c.error_at(at, fmt::format("tensor '{}' data offset {} is not a multiple of the alignment {}", t.name, t.offset, f->alignment));
    f->tensors.push_back(t);
    info_at.push_back(at);
  }

  const uint64_t header_end = c.pos();
  f->data_offset = (header_end + f->alignment - 1) / f->alignment * f->alignment;
  if (f->data_offset > size && !f->tensors.empty())
    fail("{}: offset {}: data region starts past the end of the file ({} bytes): truncated file", name, f->data_offset, size);
  const uint64_t data_size = size >= f->data_offset ? size - f->data_offset : 0;
  for (size_t k = 0; k < f->tensors.size(); ++k) {
    auto& t = f->tensors[k];
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      fail("{}: offset {}: tensor '{}' data [{}, {}) lies beyond the end of the file (data region: {} bytes at offset {}): truncated file?", name,
           info_at[k], t.name, f->data_offset + t.offset, f->data_offset + t.offset + t.nbytes, data_size, f->data_offset);
    t.offset += f->data_offset;
    t.data = data + t.offset;
  }
  // Overlap check on sorted extents.
  std::vector<const GgufTensor*> by_off;
  for (const auto& t : f->tensors) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_off.size(); ++k) {
    const auto* p = by_off[k - 1];
    const auto* q = by_off[k];
    if (p->offset + p->nbytes > q->offset)
      fail("{}: offset {}: tensor '{}' data [{}, {}) overlaps tensor '{}' data starting at offset {}", name, p->offset, p->name, p->offset,
           p->offset + p->nbytes, q->name, q->offset);
  }
  return f;
}

// ---------------------------------------------------------------------------- GgufModel

std::unique_ptr<GgufModel> GgufModel::open(const std::string& path) {
  auto m = std::unique_ptr<GgufModel>(new GgufModel());
  m->path_ = path;
  m->parts_.push_back(GgufFile::open(path));
  const GgufFile& first = *m->parts_[0];
  uint64_t split_count = 1;
  if (const GgufValue* sc = first.find(key::kSplitCount)) {
    const uint64_t at = first.key_offset(key::kSplitCount);
    STRATA_CHECK(sc->is_integer(), "{}: offset {}: split.count has type {} (expected an integer)", path, at, gguf_type_name(sc->type));
    split_count = sc->u;
    STRATA_CHECK(split_count >= 1 && split_count <= 9999, "{}: offset {}: split.count {} out of range (1..9999)", path, at, sc->to_string());
    const GgufValue* no = first.find(key::kSplitNo);
    STRATA_CHECK(no && no->is_integer() && no->u == 0,
                 "{}: offset {}: this is not the first part of a split model (split.no = {}); open the -00001-of- file", path,
                 first.key_offset(key::kSplitNo), no ? no->to_string() : "missing");
  }
  if (split_count > 1) {
    static const std::regex re(R"((.*)-(\d{5})-of-(\d{5})\.gguf$)");
    std::smatch mt;
    const uint64_t at = first.key_offset(key::kSplitCount);
    STRATA_CHECK(std::regex_match(path, mt, re), "{}: offset {}: split model (split.count = {}) but the file name does not end in -00001-of-{:05d}.gguf",
                 path, at, split_count, split_count);
    STRATA_CHECK(std::stoull(mt[3].str()) == split_count, "{}: offset {}: file name says {} parts but split.count is {}", path, at, mt[3].str(),
                 split_count);
    for (uint64_t k = 1; k < split_count; ++k) {
      const std::string part = fmt::format("{}-{:05d}-of-{:05d}.gguf", mt[1].str(), k + 1, split_count);
      if (!std::filesystem::exists(part))
        fail("{}: offset {}: split part {} of {} is missing: {} does not exist", path, at, k + 1, split_count, part);
      m->parts_.push_back(GgufFile::open(part));
      const GgufFile& pf = *m->parts_.back();
      const GgufValue* no = pf.find(key::kSplitNo);
      STRATA_CHECK(no && no->is_integer() && no->u == k, "{}: offset {}: split.no mismatch: it is {} (expected {} for part {} of {})", part,
                   pf.key_offset(key::kSplitNo), no ? no->to_string() : "missing", k, k + 1, split_count);
    }
  }
  for (uint32_t p = 0; p < m->parts_.size(); ++p) {
    for (GgufTensor t : m->parts_[p]->tensors) {
      t.part = p;
      auto [it, fresh] = m->index_.emplace(t.name, m->tensors_.size());
      STRATA_CHECK(fresh, "{}: offset {}: tensor '{}' appears in more than one split part", m->parts_[p]->path, t.offset, t.name);
      m->tensors_.push_back(t);
    }
  }
  if (const GgufValue* tc = first.find("split.tensors.count")) {
    STRATA_CHECK(tc->is_integer() && tc->u == m->tensors_.size(), "{}: offset {}: split.tensors.count mismatch: it is {} but the parts hold {} tensors",
                 path, first.key_offset("split.tensors.count"), tc->to_string(), m->tensors_.size());
  }
  return m;
}

uint64_t GgufModel::file_bytes() const {
  uint64_t n = 0;
  for (const auto& p : parts_) n += p->size;
  return n;
}

std::optional<std::string> GgufModel::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  STRATA_CHECK(v->type == GgufType::STRING, "{}: metadata '{}' has type {} (expected string)", path_, key, gguf_type_name(v->type));
  return std::string(v->str);
}

std::optional<int64_t> GgufModel::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  STRATA_CHECK(v->is_integer(), "{}: metadata '{}' has type {} (expected an integer)", path_, key, gguf_type_name(v->type));
  return v->i;
}

std::optional<double> GgufModel::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  STRATA_CHECK(v->is_integer(), "{}: metadata '{}' has type {} (expected a number)", path_, key, gguf_type_name(v->type));
  return static_cast<double>(v->i);
}

std::optional<bool> GgufModel::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  STRATA_CHECK(v->is_integer(), "{}: metadata '{}' has type {} (expected bool)", path_, key, gguf_type_name(v->type));
  return v->i != 0;
}

std::string GgufModel::architecture() const {
  auto a = get_string(key::kArchitecture);
  STRATA_CHECK(a.has_value(), "{}: missing general.architecture", path_);
  return *a;
}

const GgufTensor* GgufModel::tensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace strata
