// The Vulkan executor (model/vulkan_executor.h) on the dense golden sets (vk_check_golden_set:
// llama.cpp's logits within the K-quant tolerances, the CPU path's, run to run bit for bit).
#include "vulkan_golden.h"

namespace strata::testing {
namespace {

class VulkanDense : public ::testing::TestWithParam<const char*> {};

TEST_P(VulkanDense, GoldenSetWithinTheKQuantTolerances) { vk_check_golden_set(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Sets, VulkanDense,
                         ::testing::Values("llama-dense-f32", "llama-dense-q8_0", "qwen3-dense-f32", "qwen3-dense-q4_k_m", "qwen3-dense-q8_0"),
                         [](const auto& i) { return vk_set_name(i.param); });

}  // namespace
}  // namespace strata::testing
