// strata quantize --experts-only --type T IN OUT [-t N]
//
// Requantizes the routed expert tensors of IN into type T and writes OUT, every other tensor and
// the metadata copied (model/requantize.h): the low-bit stand-in of issue 37, from the file a user
// has. Only --experts-only is offered (a whole-model quantizer is llama-quantize's job).
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/requantize.h"

namespace strata::cli {
namespace {

struct QuantizeOptions {
  std::string in, out, type;
  bool experts_only = false;
  int threads = 0;
};

int run(const QuantizeOptions& o) {
  if (!o.experts_only) fail("strata quantize requantizes routed experts only: give --experts-only");
  const auto type = ggml_type_from_name(o.type);
  if (!type) fail("--type '{}': not a ggml type name (e.g. q4_0, q4_K, q2_K, iq4_xs)", o.type);
  const int nt = o.threads > 0 ? o.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  ThreadPool pool(nt);
  const RequantizeReport r = requantize_experts(o.in, o.out, *type, &pool);
  std::printf("%s: %d routed expert tensors as %s (%.2f MiB -> %.2f MiB), %d other tensors copied\n", o.out.c_str(), r.expert_tensors,
              ggml_type_name(*type), double(r.expert_bytes_in) / (1 << 20), double(r.expert_bytes_out) / (1 << 20), r.other_tensors);
  return 0;
}

}  // namespace

Command add_quantize(CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  auto* sub = app.add_subcommand("quantize", "Write a copy of a GGUF file with its routed experts requantized (a low-bit stand-in)");
  sub->add_flag("--experts-only", o->experts_only, "Requantize the routed expert tensors only; dense tensors and metadata are copied (required)");
  sub->add_option("--type", o->type, "Weight type of the experts (q8_0, q6_K, q5_K, q4_K, q4_0, iq4_xs, q3_K, q2_K, ...)")->required();
  sub->add_option("-t,--threads", o->threads, "Threads (default: all cores)")->check(CLI::Range(0, 1024));
  sub->add_option("input", o->in, "Input GGUF file")->required();
  sub->add_option("output", o->out, "Output GGUF file")->required();
  return {sub, [o] { return run(*o); }};
}

}  // namespace strata::cli
