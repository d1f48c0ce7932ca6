#pragma once
// GGUF v3 writer: metadata + tensors with alignment. Used by tests, `strata synth` and tools.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/ggml_type.h"
#include "gguf/gguf_value.h"

namespace strata {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32);

  void set_u8(std::string_view key, uint8_t v);
  void set_i8(std::string_view key, int8_t v);
  void set_u16(std::string_view key, uint16_t v);
  void set_i16(std::string_view key, int16_t v);
  void set_u32(std::string_view key, uint32_t v);
  void set_i32(std::string_view key, int32_t v);
  void set_u64(std::string_view key, uint64_t v);
  void set_i64(std::string_view key, int64_t v);
  void set_f32(std::string_view key, float v);
  void set_f64(std::string_view key, double v);
  void set_bool(std::string_view key, bool v);
  void set_string(std::string_view key, std::string_view v);
  void set_array_i32(std::string_view key, const std::vector<int32_t>& v);
  void set_array_u32(std::string_view key, const std::vector<uint32_t>& v);
  void set_array_f32(std::string_view key, const std::vector<float>& v);
  void set_array_bool(std::string_view key, const std::vector<bool>& v);
  void set_array_string(std::string_view key, const std::vector<std::string>& v);
  // A value read from another file (GgufFile::kv), encoded as it was: copies metadata.
  void set_value(std::string_view key, const GgufValue& v);
  // Raw: key + type id + already-encoded value bytes (for nested arrays and odd cases).
  void set_raw(std::string_view key, GgufType type, std::string encoded_value);

  // ne in ggml order (innermost first); data must hold exactly the tensor's byte size.
  void add_tensor(std::string_view name, GgmlType type, const std::vector<uint64_t>& ne, const void* data, size_t nbytes);
  // Tensor whose bytes are produced later by a callback at write time (for large synthetic models).
  using Fill = void (*)(void* ctx, uint8_t* dst, uint64_t nbytes);
  void add_tensor_lazy(std::string_view name, GgmlType type, const std::vector<uint64_t>& ne, Fill fill, void* ctx);

  // Writes the file (atomically: to a temporary name, then renamed). Throws on I/O errors.
  void write(const std::string& path) const;
  // Encodes the whole file in memory.
  std::string to_bytes() const;

  static std::string encode_string(std::string_view s);

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> ne;
    std::string data;
    Fill fill = nullptr;
    void* ctx = nullptr;
    uint64_t nbytes = 0;
    uint64_t offset = 0;
  };
  std::string header() const;
  void add_kv(std::string_view key, GgufType type, std::string encoded);

  uint32_t alignment_;
  std::vector<std::pair<std::string, std::string>> kv_;  // key -> type + value bytes
  std::vector<Tensor> tensors_;
};

}  // namespace strata
