#pragma once
// GGUF v2/v3 reader. The file is mapped read-only and fully validated at open; tensors are
// views (name, type, shape, offset, bytes) into the mapping. A split model
// (name-00001-of-0000N.gguf) opens all its parts; each tensor knows its part.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "gguf/ggml_type.h"
#include "gguf/gguf_value.h"

namespace strata {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr int kGgmlMaxDims = 4;
inline constexpr uint32_t kGgufDefaultAlignment = 32;

struct GgufTensor {
  std::string_view name;
  GgmlType type = GgmlType::F32;
  int n_dims = 0;
  std::array<uint64_t, kGgmlMaxDims> ne{1, 1, 1, 1};  // ggml order: ne[0] innermost
  uint32_t part = 0;      // index of the split file holding the data
  uint64_t offset = 0;    // absolute byte offset of the data inside that file
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // mapped bytes (valid while the GgufModel lives)

  uint64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  uint64_t row_bytes() const { return ggml_row_size(type, ne[0]); }
  std::string shape_string() const;  // "256x768x8"
};

// One GGUF file.
struct GgufFile {
  MappedFile map;            // empty when parsed from a caller's buffer
  std::string path;
  const uint8_t* base = nullptr;  // whole file bytes
  uint64_t size = 0;
  uint32_t version = 0;
  uint32_t alignment = kGgufDefaultAlignment;
  uint64_t data_offset = 0;  // start of the tensor data region
  std::vector<std::pair<std::string_view, GgufValue>> kv;  // in file order
  std::vector<uint64_t> kv_offsets;                         // file offset of each kv's key, parallel to kv
  std::vector<GgufTensor> tensors;                          // offsets absolute

  // Parses and validates `path`; throws strata::Error naming the file and offset.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Same over an in-memory buffer (used by the fuzzer); `name` is used in errors.
  static std::unique_ptr<GgufFile> parse(const uint8_t* data, size_t size, const std::string& name, size_t avail = SIZE_MAX);

  const GgufValue* find(std::string_view key) const;
  // File offset of the key of `key`'s entry (0 when absent), for error messages.
  uint64_t key_offset(std::string_view key) const;
};

// A model: one GGUF file or all parts of a split model.
class GgufModel {
 public:
  static std::unique_ptr<GgufModel> open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<std::unique_ptr<GgufFile>>& parts() const { return parts_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  uint64_t file_bytes() const;

  // Metadata (from the first part).
  const std::vector<std::pair<std::string_view, GgufValue>>& metadata() const { return parts_[0]->kv; }
  const GgufValue* find(std::string_view key) const { return parts_[0]->find(key); }
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;  // any integer type (bool too)
  std::optional<double> get_float(std::string_view key) const;  // any float or integer type
  std::optional<bool> get_bool(std::string_view key) const;
  std::string architecture() const;  // general.architecture, or error

  const GgufTensor* tensor(std::string_view name) const;

 private:
  std::string path_;
  std::vector<std::unique_ptr<GgufFile>> parts_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string_view, size_t, std::less<>> index_;
};

}  // namespace strata
