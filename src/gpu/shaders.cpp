#include "gpu/shaders.h"

#include "core/error.h"

namespace strata::gpu {

std::span<const uint32_t> shader_spirv(std::string_view name) {
  for (size_t i = 0; i < kShaderCount; ++i)
    if (name == kShaders[i].name) return {kShaders[i].words, kShaders[i].n_words};
  fail("GPU: no shader '{}' in this build", name);
}

}  // namespace strata::gpu
