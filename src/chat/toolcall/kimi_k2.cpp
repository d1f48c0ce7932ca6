// Kimi K2: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>
// {json}<|tool_call_end|>...<|tool_calls_section_end|>. The name is the id without `functions.` and `:IDX`.
#include "chat/toolcall/families.h"
#include "chat/toolcall/json_section.h"

namespace strata::toolcall::detail {
namespace {

constexpr SectionSyntax kSyntax{"<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                                "<|tool_call_end|>", "<|tool_calls_section_end|>"};

class KimiK2 final : public JsonSection {
 public:
  explicit KimiK2(ParserOptions o) : JsonSection(std::move(o), kSyntax) {}

 private:
  std::string name_of(std::string_view id, Cur&) const override {
    while (!id.empty() && is_ws(id.front())) id.remove_prefix(1);
    while (!id.empty() && is_ws(id.back())) id.remove_suffix(1);
    if (id.substr(0, 10) == "functions.") id.remove_prefix(10);
    const size_t colon = id.rfind(':');
    if (colon != std::string_view::npos &&
        id.find_first_not_of("0123456789", colon + 1) == std::string_view::npos) {
      id = id.substr(0, colon);
    }
    return std::string(id);
  }
};

}  // namespace

std::unique_ptr<StreamParser> make_kimi_k2(ParserOptions o) { return std::make_unique<KimiK2>(std::move(o)); }

}  // namespace strata::toolcall::detail
