#pragma once
// The compute shaders of gpu/shaders/*.comp, compiled to SPIR-V by glslc at build time and
// embedded in the binary (src/gpu/shaders.cmake writes the table).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace strata::gpu {

struct ShaderBlob {
  const char* name;  // "matvec_q4_K", "rmsnorm", ...
  const uint32_t* words;
  size_t n_words;
};
extern const ShaderBlob kShaders[];
extern const size_t kShaderCount;

// The SPIR-V of a shader; throws strata::Error naming it when the build has none.
std::span<const uint32_t> shader_spirv(std::string_view name);

}  // namespace strata::gpu
