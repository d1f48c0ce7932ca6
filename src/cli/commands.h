#pragma once
// Each subcommand registers its options on the CLI11 app and returns the function to run.
#include <CLI/CLI.hpp>

#include <functional>

namespace strata::cli {

using Action = std::function<int()>;
struct Command {
  CLI::App* sub;
  Action run;
};

Command add_inspect(CLI::App& app);
Command add_tokenize(CLI::App& app);
Command add_run(CLI::App& app);
Command add_cachesim(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_chat(CLI::App& app);
Command add_synth(CLI::App& app);
Command add_serve(CLI::App& app);
Command add_perplexity(CLI::App& app);
Command add_calibrate(CLI::App& app);
Command add_gpu(CLI::App& app);
Command add_quantize(CLI::App& app);

}  // namespace strata::cli
