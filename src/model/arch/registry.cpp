// The architecture registry: adding an architecture = one file + one line here.
#include "model/model.h"

namespace strata {

extern const ArchDef kArchQwen3Moe;
extern const ArchDef kArchQwen3;
extern const ArchDef kArchLlama;
extern const ArchDef kArchDeepseek2;
extern const ArchDef kArchDeepseek32;
extern const ArchDef kArchGptOss;
extern const ArchDef kArchDeepseek4;
extern const ArchDef kArchGlm4Moe;
extern const ArchDef kArchMinimaxM2;
extern const ArchDef kArchQwen35Moe;

static const ArchDef* const kArchs[] = {&kArchQwen3Moe, &kArchLlama,     &kArchDeepseek2, &kArchDeepseek32, &kArchGptOss,
                                          &kArchDeepseek4, &kArchGlm4Moe, &kArchMinimaxM2, &kArchQwen35Moe, &kArchQwen3};

const ArchDef* find_arch(const std::string& name) {
  for (const ArchDef* a : kArchs)
    if (name == a->name) return a;
  return nullptr;
}

std::vector<std::string> supported_archs() {
  std::vector<std::string> v;
  for (const ArchDef* a : kArchs) v.emplace_back(a->name);
  return v;
}

}  // namespace strata
