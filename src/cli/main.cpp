// strata: one executable, one subcommand per job.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/version.h"
#include "kernels/kernel_table.h"
#include "model/model.h"

int main(int argc, char** argv) {
  CLI::App app{"Strata: runs Mixture-of-Experts models larger than RAM by streaming experts from SSD"};
  app.require_subcommand(1);
  std::string archs;
  for (const auto& a : strata::supported_archs()) archs += (archs.empty() ? "" : ", ") + a;
  app.footer("Architectures (GGUF general.architecture): " + archs);
  app.set_version_flag(
      "--version",
      [] {
        return fmt::format("strata {} ({})\nkernels: {}\ncpu: {}", strata::strata_version(), strata::compiler_version(),
                           strata::kernel_choice(), strata::cpu_features().describe());
      },
      "Print the version, the kernel table this CPU gets and why, and exit");
  std::vector<strata::cli::Command> cmds;
  cmds.push_back(strata::cli::add_inspect(app));
  cmds.push_back(strata::cli::add_tokenize(app));
  cmds.push_back(strata::cli::add_run(app));
  cmds.push_back(strata::cli::add_cachesim(app));
  cmds.push_back(strata::cli::add_bench(app));
  cmds.push_back(strata::cli::add_chat(app));
  cmds.push_back(strata::cli::add_synth(app));
  cmds.push_back(strata::cli::add_serve(app));
  cmds.push_back(strata::cli::add_perplexity(app));
  cmds.push_back(strata::cli::add_calibrate(app));
  cmds.push_back(strata::cli::add_gpu(app));
  cmds.push_back(strata::cli::add_quantize(app));
  // llama.cpp's two-letter short option -md (draft model): CLI11 takes one-letter short names only.
  static char kModelDraft[] = "--model-draft";
  std::vector<char*> args(argv, argv + argc);
  for (char*& a : args)
    if (std::string(a) == "-md") a = kModelDraft;
  try {
    app.parse(argc, args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& c : cmds)
      if (c.sub->parsed()) return c.run();
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
