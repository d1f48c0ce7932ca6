// llama_tensor_dump: evaluates one prompt (token ids) with the peer's libllama (v0.5.0, npm
// @node-llama-cpp/linux-x64@3.22.1) in one llama_decode, with the golden sets' settings (n_ctx =
// n_batch = n_ubatch = 256, 2 threads, no flash attention, F32 K/V, no mmap, no weight repacking,
// logits at every position), and writes the named intermediate tensors the graph's eval callback
// reports ("name-layer", e.g. l_out-1) whose name matches --filter: one raw float32 file each
// ([rows = tokens, cols] in row order) plus index.csv (name,layer,rows,cols,file), the format
// `strata run --dump-tensors` writes. --list prints every callback tensor instead.
//   llama_tensor_dump --model M.gguf --tokens 1,2,3 --out DIR [--filter REGEX] [--list]
// STRATA_PEER_CPU_VARIANT=haswell loads only that CPU variant (else ggml picks this CPU's best).
// Build: tools/llama_tensor_dump/build.sh (not part of the CMake build).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <dlfcn.h>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

namespace {

struct Dumper {
  std::regex filter{".*"};
  std::string out;
  bool list = false;
  FILE* index = nullptr;
  std::vector<float> buf;
};

void quiet_log(ggml_log_level lvl, const char* text, void*) {
  if (lvl >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

// "attn_norm-3" -> ("attn_norm", 3); names without a layer suffix get -1.
void split_name(const std::string& full, std::string& name, int& layer) {
  const size_t dash = full.rfind('-');
  if (dash != std::string::npos && dash + 1 < full.size() && full.find_first_not_of("0123456789", dash + 1) == std::string::npos) {
    name = full.substr(0, dash);
    layer = std::atoi(full.c_str() + dash + 1);
  } else {
    name = full;
    layer = -1;
  }
}

bool on_eval(ggml_tensor* t, bool ask, void* user) {
  auto& d = *static_cast<Dumper*>(user);
  const std::string full = ggml_get_name(t);
  if (ask) return d.list || std::regex_match(full, d.filter);
  if (d.list) {
    std::printf("%s %s [%lld, %lld, %lld, %lld]\n", full.c_str(), ggml_type_name(t->type), (long long)t->ne[0], (long long)t->ne[1],
                (long long)t->ne[2], (long long)t->ne[3]);
    return true;
  }
  if (t->type != GGML_TYPE_F32) {
    std::fprintf(stderr, "skipping %s: type %s\n", full.c_str(), ggml_type_name(t->type));
    return true;
  }
  // Gather element by element through the strides (views may not be contiguous); ne[0] = cols.
  const int64_t cols = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
  d.buf.resize(static_cast<size_t>(cols * rows));
  std::vector<char> raw(ggml_nbytes(t));
  ggml_backend_tensor_get(t, raw.data(), 0, raw.size());
  size_t k = 0;
  for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
          float v;
          std::memcpy(&v, raw.data() + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3], sizeof v);
          d.buf[k++] = v;
        }
  std::string name;
  int layer;
  split_name(full, name, layer);
  const std::string file = full + ".f32";
  FILE* f = std::fopen((d.out + "/" + file).c_str(), "wb");
  if (!f) {
    std::fprintf(stderr, "cannot write %s/%s\n", d.out.c_str(), file.c_str());
    std::exit(1);
  }
  std::fwrite(d.buf.data(), sizeof(float), d.buf.size(), f);
  std::fclose(f);
  std::fprintf(d.index, "%s,%d,%lld,%lld,%s\n", name.c_str(), layer, (long long)rows, (long long)cols, file.c_str());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, tokens_arg;
  Dumper d;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--model") model_path = val();
    else if (k == "--tokens") tokens_arg = val();
    else if (k == "--out") d.out = val();
    else if (k == "--filter") d.filter = std::regex(val());
    else if (k == "--list") d.list = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (model_path.empty() || tokens_arg.empty() || (d.out.empty() && !d.list)) {
    std::fprintf(stderr, "usage: llama_tensor_dump --model M.gguf --tokens 1,2,3 --out DIR [--filter REGEX] [--list]\n");
    return 2;
  }
  std::vector<llama_token> tokens;
  std::stringstream ss(tokens_arg);
  for (std::string tok; std::getline(ss, tok, ',');) tokens.push_back(static_cast<llama_token>(std::atoi(tok.c_str())));

  llama_log_set(quiet_log, nullptr);
  Dl_info di;  // the CPU backend variants live beside libllama
  dladdr(reinterpret_cast<void*>(llama_backend_init), &di);
  const std::string dir = std::filesystem::path(di.dli_fname).parent_path().string();
  // STRATA_PEER_CPU_VARIANT=haswell: that CPU variant only (the golden sets' AVX2 build); by
  // default ggml picks the best variant for this CPU (on an AVX-512 host not the haswell one,
  // whose dots and quantizers round differently).
  if (const char* v = std::getenv("STRATA_PEER_CPU_VARIANT")) {
    if (!ggml_backend_load((dir + "/libggml-cpu-" + v + ".so").c_str())) {
      std::fprintf(stderr, "cannot load CPU variant %s from %s\n", v, dir.c_str());
      return 1;
    }
  } else {
    ggml_backend_load_all_from_path(dir.c_str());
  }
  llama_backend_init();

  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.load_mode = LLAMA_LOAD_MODE_NONE;
  mp.lazy_mode = LLAMA_LAZY_MODE_OFF;
  mp.use_extra_bufts = false;
  llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
  if (!model) {
    std::fprintf(stderr, "cannot load %s\n", model_path.c_str());
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = 256;
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.cb_eval = on_eval;
  cp.cb_eval_user_data = &d;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "cannot create a context\n");
    return 1;
  }
  if (!d.list) {
    std::filesystem::create_directories(d.out);
    d.index = std::fopen((d.out + "/index.csv").c_str(), "w");
    std::fprintf(d.index, "name,layer,rows,cols,file\n");
  }
  llama_batch batch = llama_batch_init(static_cast<int32_t>(tokens.size()), 0, 1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.token[i] = tokens[i];
    batch.pos[i] = static_cast<llama_pos>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;  // every position, as the golden sets (the last layer keeps every row)
  }
  batch.n_tokens = static_cast<int32_t>(tokens.size());
  const int rc = llama_decode(ctx, batch);
  if (d.index) std::fclose(d.index);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  if (rc != 0) {
    std::fprintf(stderr, "llama_decode failed (%d)\n", rc);
    return 1;
  }
  return 0;
}
