// llama_quantize: quantizes a GGUF with the peer's own quantizer (libllama's llama_model_quantize,
// as llama-quantize does), so quantized variants of Strata's trained model can be judged the way
// users judge them (`strata perplexity --kl-divergence`). A tool around the peer's library, not
// part of Strata. Usage: llama_quantize IN.gguf OUT.gguf TYPE [THREADS] [--imatrix synthetic]
//   TYPE: F32 F16 Q8_0 Q6_K Q5_K_M Q4_K_M Q4_K_S Q4_0 Q3_K_M Q3_K_S Q2_K IQ4_XS IQ4_NL IQ3_XXS IQ3_S IQ3_M
//         IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ1_S IQ1_M (these need an importance matrix: --imatrix synthetic)
//   --imatrix synthetic: the golden sets' synthetic importance matrix (shared/fixtures/*-iq*/README.md):
//     one entry per 'blk.' tensor of >= 2 dims, ne[0]*ne[2] values exp(z), z ~ N(0,1) by Box-Muller
//     from splitmix64 seeded with the FNV-1a 64 hash of the tensor name; also written to the file's
//     metadata as quantize.imatrix.file = 'synthetic' and quantize.imatrix.entries_count.
#include <gguf.h>
#include <llama.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {
struct Named { const char* name; llama_ftype type; };
const Named kTypes[] = {
    {"F32", LLAMA_FTYPE_ALL_F32}, {"F16", LLAMA_FTYPE_MOSTLY_F16}, {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
    {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K}, {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M}, {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M},
    {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S}, {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0}, {"Q3_K_M", LLAMA_FTYPE_MOSTLY_Q3_K_M},
    {"Q3_K_S", LLAMA_FTYPE_MOSTLY_Q3_K_S}, {"Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K}, {"IQ4_XS", LLAMA_FTYPE_MOSTLY_IQ4_XS},
    {"IQ4_NL", LLAMA_FTYPE_MOSTLY_IQ4_NL}, {"IQ3_XXS", LLAMA_FTYPE_MOSTLY_IQ3_XXS}, {"IQ3_S", LLAMA_FTYPE_MOSTLY_IQ3_S},
    {"IQ3_M", LLAMA_FTYPE_MOSTLY_IQ3_M}, {"IQ2_XXS", LLAMA_FTYPE_MOSTLY_IQ2_XXS}, {"IQ2_XS", LLAMA_FTYPE_MOSTLY_IQ2_XS},
    {"IQ2_S", LLAMA_FTYPE_MOSTLY_IQ2_S}, {"IQ2_M", LLAMA_FTYPE_MOSTLY_IQ2_M}, {"IQ1_S", LLAMA_FTYPE_MOSTLY_IQ1_S},
    {"IQ1_M", LLAMA_FTYPE_MOSTLY_IQ1_M},
};

struct SplitMix64 {
  uint64_t x;
  uint64_t next() {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) / 9007199254740992.0; }
};

uint64_t fnv1a64(const char* s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (; *s; ++s) h = (h ^ static_cast<uint8_t>(*s)) * 0x100000001b3ULL;
  return h;
}

// The synthetic importance matrix of the golden sets, for the matrices of IN.
struct Imatrix {
  std::vector<std::string> names;
  std::vector<std::vector<float>> values;
  std::vector<llama_model_imatrix_data> entries;
  bool build(const char* path) {
    ggml_context* ctx = nullptr;
    gguf_init_params ip{true, &ctx};
    gguf_context* g = gguf_init_from_file(path, ip);
    if (!g) return false;
    for (ggml_tensor* t = ggml_get_first_tensor(ctx); t; t = ggml_get_next_tensor(ctx, t)) {
      if (std::strncmp(t->name, "blk.", 4) != 0 || ggml_n_dims(t) < 2) continue;
      SplitMix64 rng{fnv1a64(t->name)};
      std::vector<float> v(static_cast<size_t>(t->ne[0] * t->ne[2]));
      for (float& x : v) {
        const double u1 = rng.uniform(), u2 = rng.uniform();
        x = static_cast<float>(std::exp(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2)));
      }
      names.emplace_back(t->name);
      values.push_back(std::move(v));
    }
    gguf_free(g);
    ggml_free(ctx);
    for (size_t i = 0; i < names.size(); ++i) entries.push_back({names[i].c_str(), values[i].data(), values[i].size()});
    entries.push_back({nullptr, nullptr, 0});
    return true;
  }
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
  p.nthread = argc > 4 && argv[4][0] != '-' ? std::atoi(argv[4]) : 2;
  Imatrix im;
  llama_model_kv_override kv[3] = {};
  for (int i = 4; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--imatrix") != 0) continue;
    if (std::strcmp(argv[i + 1], "synthetic") != 0 || !im.build(argv[1])) {
      std::fprintf(stderr, "llama_quantize: --imatrix synthetic only (and a readable IN)\n");
      return 2;
    }
    p.imatrix = im.entries.data();
    kv[0].tag = LLAMA_KV_OVERRIDE_TYPE_STR;
    std::snprintf(kv[0].key, sizeof kv[0].key, "quantize.imatrix.file");
    std::snprintf(kv[0].val_str, sizeof kv[0].val_str, "synthetic");
    kv[1].tag = LLAMA_KV_OVERRIDE_TYPE_INT;
    std::snprintf(kv[1].key, sizeof kv[1].key, "quantize.imatrix.entries_count");
    kv[1].val_i64 = static_cast<int64_t>(im.names.size());
    p.kv_overrides = kv;
  }
  const uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
  llama_backend_free();
  if (rc != 0) {
    std::fprintf(stderr, "llama_quantize: failed (%u)\n", rc);
    return 1;
  }
  return 0;
}
