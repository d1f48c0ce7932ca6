// DeepSeek V3.1 (also V3 / R1):
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
// V3 / R1 write the header as `function<｜tool▁sep｜>NAME\n```json\n{json}\n```` instead.
#include "chat/toolcall/families.h"
#include "chat/toolcall/json_section.h"

namespace strata::toolcall::detail {
namespace {

constexpr SectionSyntax kSyntax{"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                                "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"};

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

class DeepSeekV31 final : public JsonSection {
 public:
  explicit DeepSeekV31(ParserOptions o) : JsonSection(std::move(o), kSyntax) {}

 private:
  std::string name_of(std::string_view header, Cur& c) const override {
    header = trim(header);
    if (header != "function") return std::string(header);
    std::string_view name;  // V3 / R1: the name follows the separator, then a ```json fence
    c.until("\n", name);
    c.ws();
    c.try_lit("```json");
    return c.ok() ? std::string(trim(name)) : std::string();
  }
};

}  // namespace

std::unique_ptr<StreamParser> make_deepseek_v31(ParserOptions o) { return std::make_unique<DeepSeekV31>(std::move(o)); }

}  // namespace strata::toolcall::detail
