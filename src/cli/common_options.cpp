#include "cli/common_options.h"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "core/error.h"
#include "kernels/kernel_table.h"

namespace strata::cli {

void add_model_options(CLI::App* sub, ModelOptions& o) {
  sub->add_option("-m,--model", o.path, "GGUF model (first part of a split model)")->required();
  sub->add_option("-c,--ctx-size", o.n_ctx, "Context size in tokens (0: the model's)");
  sub->add_option("-t,--threads", o.n_threads, "Threads (0: all cores)");
  sub->add_option("-b,--batch-size", o.n_batch, "Prompt tokens per forward pass");
  sub->add_option("--cache-type-k", o.cache_type_k, "K cache type: f32, f16, q8_0");
  sub->add_option("--cache-type-v", o.cache_type_v, "V cache type: f32, f16, q8_0");
  sub->add_option("--isa", o.isa, "Kernel ISA: auto, scalar, avx2, avx512");
}

void add_sampling_options(CLI::App* sub, SamplerParams& p) {
  sub->add_option("--temp", p.temp, "Temperature (0: greedy, ties to the lowest id)");
  sub->add_option("--top-k", p.top_k, "Top-k (0: off)");
  sub->add_option("--top-p", p.top_p, "Top-p (1: off)");
  sub->add_option("--min-p", p.min_p, "Min-p (0: off)");
  sub->add_option("--repeat-penalty", p.repeat_penalty, "Repetition penalty (1: off)");
  sub->add_option("--repeat-last-n", p.repeat_last_n, "Tokens considered by the penalties (-1: all)");
  sub->add_option("--presence-penalty", p.presence_penalty, "Presence penalty");
  sub->add_option("--frequency-penalty", p.frequency_penalty, "Frequency penalty");
  sub->add_option("-s,--seed", p.seed, "Sampling seed");
}

static GgmlType cache_type(const std::string& s) {
  if (s == "f32") return GgmlType::F32;
  if (s == "f16") return GgmlType::F16;
  if (s == "q8_0") return GgmlType::Q8_0;
  fail("unsupported cache type '{}' (f32, f16, q8_0)", s);
}

Loaded load_engine(const ModelOptions& o) {
  if (o.isa != "auto") select_isa(parse_isa(o.isa.c_str()));
  install_interrupt_handler();
  Loaded l;
  auto model = Model::load(o.path);
  l.tokenizer = tok::Tokenizer::from_gguf(model->gguf());
  EngineOptions eo;
  eo.n_ctx = o.n_ctx;
  eo.n_threads = o.n_threads;
  eo.n_batch = o.n_batch;
  eo.type_k = cache_type(o.cache_type_k);
  eo.type_v = cache_type(o.cache_type_v);
  l.engine = std::make_unique<Engine>(std::move(model), eo);
  return l;
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  STRATA_CHECK(f.good(), "{}: cannot open", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

namespace {
std::atomic<int> g_interrupts{0};
void on_sigint(int) {
  if (g_interrupts.fetch_add(1) >= 1) _exit(130);
}
}  // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}
bool interrupted() { return g_interrupts.load() > 0; }
void clear_interrupt() { g_interrupts.store(0); }

}  // namespace strata::cli
