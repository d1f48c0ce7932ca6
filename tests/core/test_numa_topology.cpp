// NUMA topology specs (core/numa_topology.h): the injected layout's parser, and, where libnuma is
// built in, the binding calls checked through the policy the kernel records.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/numa_topology.h"

using namespace strata;

namespace {

std::string numa_spec_error(const std::string& spec) {
  try {
    parse_numa_topology(spec, "--numa-topology");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(NumaTopology, ParsesNodesAndCpuRanges) {
  const NumaTopology t = parse_numa_topology("0:0-3,8;1:4-7,9", "--numa-topology");
  ASSERT_EQ(t.size(), 2);
  EXPECT_EQ(t.nodes[0].id, 0);
  EXPECT_EQ(t.nodes[0].cpus, (std::vector<int>{0, 1, 2, 3, 8}));
  EXPECT_EQ(t.nodes[1].cpus, (std::vector<int>{4, 5, 6, 7, 9}));
  EXPECT_EQ(t.source, "--numa-topology");
  const NumaTopology one = parse_numa_topology("0:5", "STRATA_NUMA_TOPOLOGY");
  ASSERT_EQ(one.size(), 1);
  EXPECT_EQ(one.nodes[0].cpus, std::vector<int>{5});
}

TEST(NumaTopology, MalformedSpecsAreRefusedNamingTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {"0", "has no ':'"},
      {"0:0;", "node 1 has no ':'"},
      {"1:0", "node 1 where node 0 was expected"},
      {"0:0;0:1", "node 0 where node 1 was expected"},
      {"0:", "is not a CPU number"},
      {"0:a", "'a' is not a CPU number"},
      {"0:1-", "is not a CPU number"},
      {"0:3-1", "runs backwards"},
      {"0:0-1;1:1", "CPU 1 is listed twice"},
      {"0:99999", "is not a CPU number or range below 1024"},
      {"x:0", "'x' is not a node number"},
      {"0:0,,1", "is not a CPU number"},
      {"64:0", "is not a node number below 64"},
  };
  for (const auto& [spec, want] : cases) {
    const std::string err = numa_spec_error(spec);
    EXPECT_NE(err.find(want), std::string::npos) << "'" << spec << "': " << err;
    EXPECT_NE(err.find("--numa-topology '" + spec + "'"), std::string::npos) << err;  // names the option and the spec
  }
}

#ifdef STRATA_HAVE_NUMA
TEST(NumaTopology, FakedNodesMapOntoRealMemoryAndCpus) {
  const NumaTopology t = resolve_numa_topology("0:0;1:1");
  ASSERT_EQ(t.size(), 2);
  EXPECT_EQ(t.source, "--numa-topology");
  const NumaTopology sys = system_numa_topology();
  ASSERT_GE(sys.size(), 1);
  for (const NumaNode& n : t.nodes) {
    EXPECT_FALSE(n.pin_cpus.empty());
    EXPECT_GE(n.mem_node, 0);
    bool real = false;  // a physical node of this machine
    for (const NumaNode& s : sys.nodes) real |= s.mem_node == n.mem_node;
    EXPECT_TRUE(real) << "node " << n.id << " -> memory node " << n.mem_node;
  }
}

TEST(NumaTopology, BindAndInterleaveAreRecordedByTheKernel) {
  const size_t len = 64 << 10;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const int node = system_numa_topology().nodes[0].mem_node;
  static_cast<char*>(p)[0] = 1;  // a page already there is moved
  numa_bind(static_cast<char*>(p) + 100, 8192, node, "a test range");  // widened to whole pages
  NumaPolicy pol = numa_policy_at(p);
  EXPECT_EQ(pol.mode, numa_mode_bind());
  EXPECT_EQ(pol.nodes, std::vector<int>{node});
  numa_interleave(p, len, {node}, "a test range");
  pol = numa_policy_at(static_cast<char*>(p) + len - 1);
  EXPECT_EQ(pol.mode, numa_mode_interleave());
  EXPECT_EQ(pol.nodes, std::vector<int>{node});
  // A node outside the mask is refused with the range named.
  try {
    numa_bind(p, len, 5000, "a test range");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 5000"), std::string::npos) << e.what();
  }
  ::munmap(p, len);
}

TEST(NumaTopology, PinsTheCallingThread) {
  const std::vector<int> before = numa_thread_cpus();
  ASSERT_FALSE(before.empty());
  numa_pin_thread({before.back()});
  EXPECT_EQ(numa_thread_cpus(), std::vector<int>{before.back()});
  numa_pin_thread(before);
  EXPECT_EQ(numa_thread_cpus(), before);
  EXPECT_THROW(numa_pin_thread({}), Error);
}
#else
TEST(NumaTopology, WithoutLibnumaTheOptionIsRefused) {
  EXPECT_FALSE(numa_built());
  try {
    resolve_numa_topology("0:0;1:1");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built without libnuma"), std::string::npos) << e.what();
  }
}
#endif
