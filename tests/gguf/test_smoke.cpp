#include <gtest/gtest.h>
#include "gguf/ggml_type.h"
TEST(GgmlType, Q4K) { EXPECT_EQ(strata::ggml_info(strata::GgmlType::Q4_K).type_size, 144); }
