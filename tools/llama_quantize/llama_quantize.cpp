// llama_quantize: quantizes a GGUF with the peer's own quantizer (libllama's llama_model_quantize,
// as llama-quantize does), so quantized variants of Strata's trained model can be judged the way
// users judge them (`strata perplexity --kl-divergence`). A tool around the peer's library, not
// part of Strata. Usage: llama_quantize IN.gguf OUT.gguf TYPE [THREADS]
//   TYPE: F32 F16 Q8_0 Q6_K Q5_K_M Q4_K_M Q4_K_S Q4_0 Q3_K_M Q3_K_S Q2_K IQ4_XS IQ4_NL IQ3_XXS IQ3_S IQ3_M
#include <llama.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
struct Named { const char* name; llama_ftype type; };
const Named kTypes[] = {
    {"F32", LLAMA_FTYPE_ALL_F32}, {"F16", LLAMA_FTYPE_MOSTLY_F16}, {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
    {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K}, {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M}, {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M},
    {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S}, {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0}, {"Q3_K_M", LLAMA_FTYPE_MOSTLY_Q3_K_M},
    {"Q3_K_S", LLAMA_FTYPE_MOSTLY_Q3_K_S}, {"Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K}, {"IQ4_XS", LLAMA_FTYPE_MOSTLY_IQ4_XS},
    {"IQ4_NL", LLAMA_FTYPE_MOSTLY_IQ4_NL}, {"IQ3_XXS", LLAMA_FTYPE_MOSTLY_IQ3_XXS}, {"IQ3_S", LLAMA_FTYPE_MOSTLY_IQ3_S},
    {"IQ3_M", LLAMA_FTYPE_MOSTLY_IQ3_M},
};
}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: llama_quantize IN.gguf OUT.gguf TYPE [THREADS]\n");
    return 2;
  }
  const Named* t = nullptr;
  for (const auto& n : kTypes)
    if (std::strcmp(n.name, argv[3]) == 0) t = &n;
  if (!t) {
    std::fprintf(stderr, "llama_quantize: unknown type %s\n", argv[3]);
    return 2;
  }
  llama_backend_init();
  llama_model_quantize_params p = llama_model_quantize_default_params();
  p.ftype = t->type;
  p.allow_requantize = true;  // the trained model is committed as Q8_0: dequantized, then quantized
  p.nthread = argc > 4 ? std::atoi(argv[4]) : 2;
  const uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
  llama_backend_free();
  if (rc != 0) {
    std::fprintf(stderr, "llama_quantize: failed (%u)\n", rc);
    return 1;
  }
  return 0;
}
