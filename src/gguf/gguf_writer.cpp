#include "gguf/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_names.h"

namespace strata {
namespace {

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

// The bytes of a value of type t (no type id), as a GGUF reader reads them.
void encode_value(std::string& out, GgufType t, const GgufValue& v) {
  switch (t) {
    case GgufType::U8: case GgufType::BOOL: put<uint8_t>(out, static_cast<uint8_t>(v.u)); break;
    case GgufType::I8: put<int8_t>(out, static_cast<int8_t>(v.i)); break;
    case GgufType::U16: put<uint16_t>(out, static_cast<uint16_t>(v.u)); break;
    case GgufType::I16: put<int16_t>(out, static_cast<int16_t>(v.i)); break;
    case GgufType::U32: put<uint32_t>(out, static_cast<uint32_t>(v.u)); break;
    case GgufType::I32: put<int32_t>(out, static_cast<int32_t>(v.i)); break;
    case GgufType::U64: put<uint64_t>(out, v.u); break;
    case GgufType::I64: put<int64_t>(out, v.i); break;
    case GgufType::F32: put<float>(out, static_cast<float>(v.f)); break;
    case GgufType::F64: put<double>(out, v.f); break;
    case GgufType::STRING: out += GgufWriter::encode_string(v.str); break;
    case GgufType::ARRAY:
      put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
      put<uint64_t>(out, v.count);
      if (v.elem_type == GgufType::STRING) {
        for (std::string_view sv : v.strings) out += GgufWriter::encode_string(sv);
      } else if (v.elem_type == GgufType::ARRAY) {
        for (const GgufValue& item : v.items) encode_value(out, GgufType::ARRAY, item);
      } else {
        out.append(reinterpret_cast<const char*>(v.raw), v.count * gguf_scalar_size(v.elem_type));
      }
      break;
  }
}

}  // namespace

void GgufWriter::set_value(std::string_view key, const GgufValue& v) {
  std::string e;
  encode_value(e, v.type, v);
  add_kv(key, v.type, std::move(e));
}

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  STRATA_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment {} is not a power of two", alignment);
  if (alignment != kGgufDefaultAlignment) set_u32(key::kAlignment, alignment);
}

std::string GgufWriter::encode_string(std::string_view s) {
  std::string out;
  put<uint64_t>(out, s.size());
  out.append(s);
  return out;
}

void GgufWriter::add_kv(std::string_view key, GgufType type, std::string encoded) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v.clear();
      put<uint32_t>(v, static_cast<uint32_t>(type));
      v += encoded;
      return;
    }
  }
  std::string v;
  put<uint32_t>(v, static_cast<uint32_t>(type));
  v += encoded;
  kv_.emplace_back(std::string(key), std::move(v));
}

#define STRATA_SCALAR_SETTER(fn, T, gt)                 \
  void GgufWriter::fn(std::string_view key, T v) {      \
    std::string e;                                      \
    put<T>(e, v);                                       \
    add_kv(key, gt, std::move(e));                      \
  }
STRATA_SCALAR_SETTER(set_u8, uint8_t, GgufType::U8)
STRATA_SCALAR_SETTER(set_i8, int8_t, GgufType::I8)
STRATA_SCALAR_SETTER(set_u16, uint16_t, GgufType::U16)
STRATA_SCALAR_SETTER(set_i16, int16_t, GgufType::I16)
STRATA_SCALAR_SETTER(set_u32, uint32_t, GgufType::U32)
STRATA_SCALAR_SETTER(set_i32, int32_t, GgufType::I32)
STRATA_SCALAR_SETTER(set_u64, uint64_t, GgufType::U64)
STRATA_SCALAR_SETTER(set_i64, int64_t, GgufType::I64)
STRATA_SCALAR_SETTER(set_f32, float, GgufType::F32)
STRATA_SCALAR_SETTER(set_f64, double, GgufType::F64)
#undef STRATA_SCALAR_SETTER

void GgufWriter::set_bool(std::string_view key, bool v) {
  std::string e;
  put<uint8_t>(e, v ? 1 : 0);
  add_kv(key, GgufType::BOOL, std::move(e));
}

void GgufWriter::set_string(std::string_view key, std::string_view v) { add_kv(key, GgufType::STRING, encode_string(v)); }

template <typename T>
static std::string encode_array(GgufType et, const std::vector<T>& v) {
  std::string e;
  put<uint32_t>(e, static_cast<uint32_t>(et));
  put<uint64_t>(e, v.size());
  for (const auto& x : v) put<T>(e, x);
  return e;
}

void GgufWriter::set_array_i32(std::string_view key, const std::vector<int32_t>& v) { add_kv(key, GgufType::ARRAY, encode_array(GgufType::I32, v)); }
void GgufWriter::set_array_u32(std::string_view key, const std::vector<uint32_t>& v) { add_kv(key, GgufType::ARRAY, encode_array(GgufType::U32, v)); }
void GgufWriter::set_array_f32(std::string_view key, const std::vector<float>& v) { add_kv(key, GgufType::ARRAY, encode_array(GgufType::F32, v)); }
void GgufWriter::set_array_bool(std::string_view key, const std::vector<bool>& v) {
  std::vector<uint8_t> b(v.begin(), v.end());
  add_kv(key, GgufType::ARRAY, encode_array(GgufType::BOOL, b));
}
void GgufWriter::set_array_string(std::string_view key, const std::vector<std::string>& v) {
  std::string e;
  put<uint32_t>(e, static_cast<uint32_t>(GgufType::STRING));
  put<uint64_t>(e, v.size());
  for (const auto& s : v) e += encode_string(s);
  add_kv(key, GgufType::ARRAY, std::move(e));
}
void GgufWriter::set_raw(std::string_view key, GgufType type, std::string encoded_value) { add_kv(key, type, std::move(encoded_value)); }

void GgufWriter::add_tensor(std::string_view name, GgmlType type, const std::vector<uint64_t>& ne, const void* data, size_t nbytes) {
  Tensor t;
  t.name = name;
  t.type = type;
  t.ne = ne;
  STRATA_CHECK(!ne.empty() && ne.size() <= kGgmlMaxDims, "tensor '{}': {} dimensions", name, ne.size());
  uint64_t n = 1;
  for (auto d : ne) n *= d;
  const auto& info = ggml_info(type);
  STRATA_CHECK(ne[0] % static_cast<uint64_t>(info.block_size) == 0, "tensor '{}': row {} not a multiple of block {}", name, ne[0], info.block_size);
  t.nbytes = n / info.block_size * info.type_size;
  STRATA_CHECK(data == nullptr || nbytes == t.nbytes, "tensor '{}': {} bytes given, {} expected for {} {}", name, nbytes, t.nbytes, info.name,
               ne.size());
  if (data) t.data.assign(static_cast<const char*>(data), nbytes);
  tensors_.push_back(std::move(t));
}

void GgufWriter::add_tensor_lazy(std::string_view name, GgmlType type, const std::vector<uint64_t>& ne, Fill fill, void* ctx) {
  add_tensor(name, type, ne, nullptr, 0);
  tensors_.back().fill = fill;
  tensors_.back().ctx = ctx;
}

std::string GgufWriter::header() const {
  std::string h;
  put<uint32_t>(h, kGgufMagic);
  put<uint32_t>(h, 3);
  put<uint64_t>(h, tensors_.size());
  put<uint64_t>(h, kv_.size());
  for (const auto& [k, v] : kv_) {
    h += encode_string(k);
    h += v;
  }
  uint64_t off = 0;
  for (const auto& t : tensors_) {
    h += encode_string(t.name);
    put<uint32_t>(h, static_cast<uint32_t>(t.ne.size()));
    for (auto d : t.ne) put<uint64_t>(h, d);
    put<uint32_t>(h, static_cast<uint32_t>(t.type));
    put<uint64_t>(h, off);
    off += (t.nbytes + alignment_ - 1) / alignment_ * alignment_;
  }
  h.resize((h.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
  return h;
}

std::string GgufWriter::to_bytes() const {
  std::string out = header();
  for (const auto& t : tensors_) {
    if (t.fill) {
      size_t at = out.size();
      out.resize(at + t.nbytes);
      t.fill(t.ctx, reinterpret_cast<uint8_t*>(&out[at]), t.nbytes);
    } else {
      out += t.data.empty() ? std::string(t.nbytes, '\0') : t.data;
    }
    out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  STRATA_CHECK(f, "{}: cannot create: {}", tmp, std::strerror(errno));
  auto check = [&](bool ok) {
    if (!ok) {
      int e = errno;
      std::fclose(f);
      std::remove(tmp.c_str());
      fail("{}: write failed: {}", tmp, std::strerror(e));
    }
  };
  const std::string h = header();
  check(std::fwrite(h.data(), 1, h.size(), f) == h.size());
  std::vector<uint8_t> buf;
  const std::string pad(alignment_, '\0');
  for (const auto& t : tensors_) {
    if (t.fill) {
      // Fill in bounded chunks would need a chunked callback; tensors are filled whole.
      buf.resize(t.nbytes);
      t.fill(t.ctx, buf.data(), t.nbytes);
      check(std::fwrite(buf.data(), 1, buf.size(), f) == buf.size());
    } else if (t.data.empty()) {
      std::vector<char> z(t.nbytes, 0);
      check(std::fwrite(z.data(), 1, z.size(), f) == z.size());
    } else {
      check(std::fwrite(t.data.data(), 1, t.data.size(), f) == t.data.size());
    }
    const uint64_t p = (alignment_ - t.nbytes % alignment_) % alignment_;
    check(std::fwrite(pad.data(), 1, p, f) == p);
  }
  check(std::fflush(f) == 0);
  // fclose releases the stream even when it fails: it must not be closed a second time.
  if (std::fclose(f) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    fail("{}: close failed: {}", tmp, std::strerror(e));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    fail("{}: cannot rename to {}: {}", tmp, path, ec.message());
  }
}

}  // namespace strata
