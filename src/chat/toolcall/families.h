#pragma once
// One factory per model family (one file each in chat/toolcall/). Internal to chat/toolcall/.
#include <memory>

#include "chat/toolcall/toolcall.h"

namespace strata::toolcall::detail {

std::unique_ptr<StreamParser> make_generic(ParserOptions);
std::unique_ptr<StreamParser> make_hermes(ParserOptions);
std::unique_ptr<StreamParser> make_qwen3_coder(ParserOptions);
std::unique_ptr<StreamParser> make_llama3(ParserOptions);
std::unique_ptr<StreamParser> make_harmony(ParserOptions);
std::unique_ptr<StreamParser> make_deepseek_v31(ParserOptions);
std::unique_ptr<StreamParser> make_glm45(ParserOptions);
std::unique_ptr<StreamParser> make_kimi_k2(ParserOptions);
std::unique_ptr<StreamParser> make_minimax_m2(ParserOptions);

}  // namespace strata::toolcall::detail
