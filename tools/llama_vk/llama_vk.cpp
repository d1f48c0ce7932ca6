// llama_vk: llama.cpp v0.5.0's Vulkan build (npm @node-llama-cpp/linux-x64-vulkan@3.22.1) driven directly,
// as the second reference for Strata's GPU tier (issue 35). Built by scripts/peer-vulkan.sh. Two modes:
//
//   llama_vk logits --model F.gguf --golden DIR [--out DIR] [--prompts p0,p1] [--ngl -1] [--threads 2] [--op-offload 1]
//     [--cpu-variant haswell]  (the golden sets' CPU variant; "" = ggml's pick for this machine)
//     Loads F with n_gpu_layers layers on the Vulkan device (-1: all), evaluates each golden prompt
//     (DIR/pN.json "prompt_tokens") in one llama_decode with the settings of the golden harness
//     (n_ctx = n_batch = n_ubatch = 256, F32 K/V, no flash attention, no mmap, no repacking) and
//     compares its last-position logits with DIR/pN.last_logits.f32 (llama.cpp's CPU build):
//     one line per prompt "pN n_tokens=.. cosine=.. max_abs=.. ref_std=.." and a "worst" line.
//     --out DIR writes DIR/pN.last_logits.f32.
//
//   llama_vk bench --model F.gguf [--ngl -1] [--cpu-moe 1] [--threads 2] [--pp 128] [--tg 32] [--mmap 1] [--warmup 1] [--fa auto|on|off]
//     pp random ordinary tokens in one batch, then tg tokens (random input, as llama-bench), like
//     ../shared/peer/llbench; --cpu-moe 1 keeps the routed experts on the CPU (llama.cpp's
//     `-ot exps=CPU`: tensor buffer override "\\.ffn_(up|down|gate|gate_up)_(ch|)exps" (LLM_FFN_EXPS_REGEX) -> the CPU device's buffer type).
//     --warmup 1 (default): one untimed pp batch and one tg token first (llama-bench's warm-up; GGML Vulkan
//     compiles each pipeline on first use). One JSON line on stdout.
//
// The device: GGML's Vulkan backend skips CPU-type devices (lavapipe) unless GGML_VK_VISIBLE_DEVICES
// names them; set it (e.g. GGML_VK_VISIBLE_DEVICES=0) and VK_ICD_FILENAMES as the machine needs.
#include "ggml-backend.h"
#include "llama.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
static bool g_verbose = false;
static void log_cb(ggml_log_level lvl, const char* text, void*) {
  if (g_verbose || lvl >= GGML_LOG_LEVEL_WARN || strstr(text, "ggml_vulkan") || strstr(text, "buffer size") ||
      strstr(text, "offloaded") || strstr(text, "llama_perf"))
    fputs(text, stderr);
}

static std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// "prompt_tokens":[1,2,3] from a golden json (no JSON library: the field is a flat int array).
static std::vector<llama_token> prompt_tokens(const std::string& json) {
  std::vector<llama_token> v;
  size_t p = json.find("\"prompt_tokens\"");
  if (p == std::string::npos) return v;
  p = json.find('[', p);
  size_t e = json.find(']', p);
  std::string s = json.substr(p + 1, e - p - 1);
  for (char& c : s)
    if (c == ',') c = ' ';
  std::istringstream is(s);
  long t;
  while (is >> t) v.push_back((llama_token)t);
  return v;
}

// cpu_variant "": the best CPU variant for this machine (ggml's default); else libggml-cpu-<variant>.so only
// (the golden sets were made with the haswell variant; others differ in a few kernels).
static void init_backends(const std::string& cpu_variant) {
  llama_log_set(log_cb, nullptr);
  Dl_info di;
  dladdr((void*)llama_backend_init, &di);
  std::string dir = di.dli_fname;
  dir = dir.substr(0, dir.rfind('/'));
  if (cpu_variant.empty()) {
    ggml_backend_load_all_from_path(dir.c_str());
  } else {
    if (!ggml_backend_load((dir + "/libggml-vulkan.so").c_str()) ||
        !ggml_backend_load((dir + "/libggml-cpu-" + cpu_variant + ".so").c_str()))
      fprintf(stderr, "warning: could not load libggml-vulkan.so or libggml-cpu-%s.so from %s\n", cpu_variant.c_str(),
              dir.c_str());
  }
  llama_backend_init();
  for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
    ggml_backend_dev_t d = ggml_backend_dev_get(i);
    size_t fr = 0, tot = 0;
    ggml_backend_dev_memory(d, &fr, &tot);
    fprintf(stderr, "device %zu: %s (%s) type %d, %.0f MiB total\n", i, ggml_backend_dev_name(d),
            ggml_backend_dev_description(d), (int)ggml_backend_dev_type(d), tot / 1048576.0);
  }
}

static bool have_gpu_device() {
  for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
    auto t = ggml_backend_dev_type(ggml_backend_dev_get(i));
    if (t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU) return true;
  }
  return false;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: llama_vk logits|bench --model F ... (see the header of tools/llama_vk/llama_vk.cpp)\n");
    return 2;
  }
  const std::string mode = argv[1];
  std::map<std::string, std::string> a;
  for (int i = 2; i + 1 < argc; i += 2) a[argv[i]] = argv[i + 1];
  auto get = [&](const char* k, const std::string& d) { return a.count(k) ? a[k] : d; };
  const std::string model_path = get("--model", "");
  const int ngl = std::stoi(get("--ngl", "-1"));
  const int threads = std::stoi(get("--threads", "2"));
  g_verbose = get("--verbose", "0") != "0";
  if (model_path.empty() || (mode != "logits" && mode != "bench")) {
    fprintf(stderr, "usage: llama_vk logits|bench --model F ...\n");
    return 2;
  }
  init_backends(get("--cpu-variant", mode == "logits" ? "haswell" : ""));
  if (ngl != 0 && !have_gpu_device()) {
    fprintf(stderr, "error: no GPU-type ggml device (lavapipe needs GGML_VK_VISIBLE_DEVICES=N)\n");
    return 1;
  }

  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = ngl < 0 ? 9999 : ngl;
  mp.lazy_mode = LLAMA_LAZY_MODE_OFF;
  mp.use_extra_bufts = false;  // as the golden harness (no CPU repacking)
  std::vector<llama_model_tensor_buft_override> ov;
  const bool cpu_moe = get("--cpu-moe", "0") != "0";
  if (cpu_moe) {
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu) {
      fprintf(stderr, "error: no CPU device\n");
      return 1;
    }
    ov.push_back({"\\.ffn_(up|down|gate|gate_up)_(ch|)exps", ggml_backend_dev_buffer_type(cpu)});
    ov.push_back({nullptr, nullptr});
    mp.tensor_buft_overrides = ov.data();
  }

  if (mode == "logits") {
    const std::string gdir = get("--golden", "");
    const std::string out = get("--out", "");
    mp.load_mode = LLAMA_LOAD_MODE_NONE;  // no mmap, as the golden harness
    llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) {
      fprintf(stderr, "error: load failed\n");
      return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = std::stoi(get("--ctx", "256"));
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.op_offload = get("--op-offload", "1") != "0";  // 0 with --ngl 0: the Vulkan build's CPU path alone
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) {
      fprintf(stderr, "error: context failed\n");
      return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::vector<std::string> prompts;
    {
      std::string pl = get("--prompts", "p0,p1,p2,p3");
      std::istringstream is(pl);
      std::string p;
      while (std::getline(is, p, ',')) prompts.push_back(p);
    }
    double worst_cos = 2, worst_abs = 0;
    int done = 0;
    for (const auto& p : prompts) {
      const std::string js = slurp(gdir + "/" + p + ".json");
      auto toks = prompt_tokens(js);
      if (toks.empty()) {
        fprintf(stderr, "%s: no golden json, skipped\n", p.c_str());
        continue;
      }
      llama_memory_clear(llama_get_memory(ctx), true);
      llama_batch b = llama_batch_init((int)toks.size(), 0, 1);
      for (size_t i = 0; i < toks.size(); i++) {
        b.token[i] = toks[i];
        b.pos[i] = (llama_pos)i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = i + 1 == toks.size();
      }
      b.n_tokens = (int)toks.size();
      double t = now();
      if (llama_decode(ctx, b)) {
        fprintf(stderr, "error: decode failed for %s\n", p.c_str());
        return 1;
      }
      const double dt = now() - t;
      const float* lg = llama_get_logits_ith(ctx, -1);
      llama_batch_free(b);
      if (!out.empty()) {
        std::ofstream f(out + "/" + p + ".last_logits.f32", std::ios::binary);
        f.write((const char*)lg, (std::streamsize)n_vocab * 4);
      }
      const std::string ref = slurp(gdir + "/" + p + ".last_logits.f32");
      if (ref.size() != (size_t)n_vocab * 4) {
        fprintf(stderr, "%s: golden logits have %zu bytes, want %d\n", p.c_str(), ref.size(), n_vocab * 4);
        return 1;
      }
      const float* r = (const float*)ref.data();
      int top = 0, rtop = 0;
      for (int i = 1; i < n_vocab; i++) {
        if (lg[i] > lg[top]) top = i;
        if (r[i] > r[rtop]) rtop = i;
      }
      double dot = 0, na = 0, nr = 0, mx = 0, mean = 0, var = 0;
      for (int i = 0; i < n_vocab; i++) {
        dot += double(lg[i]) * r[i];
        na += double(lg[i]) * lg[i];
        nr += double(r[i]) * r[i];
        mx = std::max(mx, std::abs(double(lg[i]) - r[i]));
        mean += r[i];
      }
      mean /= n_vocab;
      for (int i = 0; i < n_vocab; i++) var += (r[i] - mean) * (r[i] - mean);
      const double cs = dot / std::sqrt(na * nr + 1e-300);
      worst_cos = std::min(worst_cos, cs);
      worst_abs = std::max(worst_abs, mx);
      done++;
      printf("%s n_tokens=%zu cosine=%.6f max_abs=%.4g ref_std=%.4g top1=%d/%d (%.2f s)\n", p.c_str(), toks.size(), cs,
             mx, std::sqrt(var / n_vocab), top, rtop, dt);
      fflush(stdout);
    }
    printf("worst: prompts=%d cosine=%.6f max_abs=%.4g\n", done, worst_cos, worst_abs);
    llama_free(ctx);
    llama_model_free(model);
    return done ? 0 : 1;
  }

  // bench
  const int pp = std::stoi(get("--pp", "128")), tg = std::stoi(get("--tg", "32"));
  mp.load_mode = get("--mmap", "1") != "0" ? LLAMA_LOAD_MODE_MMAP : LLAMA_LOAD_MODE_NONE;
  double t = now();
  llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
  if (!model) {
    fprintf(stderr, "error: load failed\n");
    return 1;
  }
  const double load_s = now() - t;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = std::max(256, pp + tg + 16);
  cp.n_batch = cp.n_ubatch = std::min(512, std::max(pp, 1));
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = threads;
  cp.no_perf = false;
  {
    const std::string fa = get("--fa", "auto");  // llama.cpp's -fa: auto (default), on, off
    cp.flash_attn_type = fa == "on"    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                         : fa == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                       : LLAMA_FLASH_ATTN_TYPE_AUTO;
  }
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    fprintf(stderr, "error: context failed\n");
    return 1;
  }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const int limit = std::min(n_vocab, 32000);
  unsigned s = (unsigned)std::stoul(get("--seed", "1"));
  auto rnd = [&] {
    s = s * 1664525u + 1013904223u;
    return (llama_token)(100 + (int)(s % (unsigned)std::max(1, limit - 200)));
  };
  std::vector<llama_token> prompt(std::max(pp, 1));
  for (auto& x : prompt) x = rnd();
  // Warm-up (as llama-bench): one prompt-sized batch and one single-token decode, then a cleared cache, so
  // the timed runs do not include GGML Vulkan's pipeline compilation (done on first use of each shader).
  if (get("--warmup", "1") != "0") {
    const int n = std::max(1, std::min((int)cp.n_batch, pp));
    if (llama_decode(ctx, llama_batch_get_one(prompt.data(), n)) ||
        llama_decode(ctx, llama_batch_get_one(&prompt.back(), 1))) {
      fprintf(stderr, "error: warm-up decode failed\n");
      return 1;
    }
    llama_memory_clear(llama_get_memory(ctx), true);
  }
  double pp_s = 0;
  if (pp > 0) {
    t = now();
    for (int i = 0; i < pp; i += (int)cp.n_batch) {
      const int n = std::min((int)cp.n_batch, pp - i);
      if (llama_decode(ctx, llama_batch_get_one(prompt.data() + i, n))) {
        fprintf(stderr, "error: pp decode failed\n");
        return 1;
      }
    }
    pp_s = now() - t;
  }
  llama_token cur = prompt.back();
  t = now();
  int nonfinite = 0;
  for (int i = 0; i < tg; i++) {
    if (llama_decode(ctx, llama_batch_get_one(&cur, 1))) {
      fprintf(stderr, "error: tg decode failed\n");
      return 1;
    }
    const float* lg = llama_get_logits_ith(ctx, -1);
    for (int v = 0; v < n_vocab; v++) nonfinite += !std::isfinite(lg[v]);
    cur = rnd();
  }
  const double tg_s = now() - t;
  printf("{\"engine\":\"llama.cpp v0.5.0 vulkan (llama_vk)\",\"ngl\":%d,\"cpu_moe\":%d,\"threads\":%d,\"load_s\":%.3f,"
         "\"pp_tokens\":%d,\"pp_tps\":%.3f,\"tg_tokens\":%d,\"tg_tps\":%.3f,\"nonfinite_logits\":%d}\n",
         ngl, cpu_moe ? 1 : 0, threads, load_s, pp, pp > 0 ? pp / pp_s : 0.0, tg, tg > 0 ? tg / tg_s : 0.0, nonfinite);
  fflush(stdout);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
