// strata serve --numa shard on a faked two-node layout: the same completions as one node, with 1
// and 4 slots and four requests at once.
#include <gtest/gtest.h>

#include <thread>

#include "serve_process.h"

#ifdef STRATA_HAVE_NUMA
using namespace strata::test;


TEST(ServeNuma, SameCompletionsAsOneNode) {
  if (!have_server_fixture()) STRATA_MISSING_FIXTURE(server_fixture() + " (serve --numa shard)");
  for (const char* slots : {"1", "4"}) {
    const std::vector<std::string> args = {"-m", server_fixture("qwen3moe-q4_k_m"), "--port", "0", "--parallel", slots, "-c", "128", "-t", "1"};
    std::vector<std::string> numa_args = args;
    numa_args.insert(numa_args.end(), {"--numa", "shard", "--numa-topology", "0:0;1:1"});
    ServeProcess one("serve_numa_one", args);
    ASSERT_TRUE(one.ready()) << one.log();
    const auto a = four_completion_texts(one);
    one.stop();
    ServeProcess two("serve_numa_two", numa_args);
    ASSERT_TRUE(two.ready()) << two.log();
    const auto b = four_completion_texts(two);
    two.stop();
    for (int i = 0; i < 4; ++i) {
      EXPECT_NE(a[i], "(failed)");
      EXPECT_FALSE(a[i].empty());
      EXPECT_EQ(a[i], b[i]) << "slots " << slots << ", request " << i;
    }
    EXPECT_NE(two.log().find("numa shard: 2 NUMA nodes (--numa-topology)"), std::string::npos) << two.log();
    EXPECT_NE(two.log().find("numa shard: 2 nodes"), std::string::npos) << two.log();  // the end-of-run figures
  }
}
#endif
