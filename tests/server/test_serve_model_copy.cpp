// strata serve --model-copy: the start-up disk probe measures each drive alone and all at once;
// /stats shows both (the limit is the all-at-once figure).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "serve_process.h"

using namespace strata::test;

TEST(ServeModelCopy, StatsShowEachDriveAndTheLimit) {
  if (!have_server_fixture()) STRATA_MISSING_FIXTURE(server_fixture() + " (serve --model-copy)");
  const std::string copy = "/tmp/strata_serve_copy_" + std::to_string(::getpid()) + ".gguf";
  std::filesystem::copy_file(server_fixture("mixtral-q4_k_m"), copy, std::filesystem::copy_options::overwrite_existing);
  struct Remove {
    std::string path;
    ~Remove() { std::remove(path.c_str()); }
  } remove_copy{copy};
  ServeProcess s("serve_model_copy", {"-m", server_fixture("mixtral-q4_k_m"), "--port", "0", "-c", "128", "-t", "1", "--cache-experts", "3",
                                      "--no-warm-start", "--disk-probe", "8M", "--model-copy", copy});
  ASSERT_TRUE(s.ready()) << s.log();
  httplib::Client c("127.0.0.1", s.port());
  auto r = c.Get("/stats");
  ASSERT_TRUE(r && r->status == 200) << s.log();
  const auto j = nlohmann::json::parse(r->body);
  ASSERT_TRUE(j["disk"].contains("drives_bw")) << j["disk"].dump();
  ASSERT_EQ(j["disk"]["drives_bw"].size(), 2u);
  for (const auto& bw : j["disk"]["drives_bw"]) EXPECT_GT(bw.get<double>(), 0);
  EXPECT_GT(j["disk"]["read_bw"].get<double>(), 0);
  s.stop();
}
