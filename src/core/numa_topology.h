#pragma once
// NUMA nodes of this machine and the calls that bind memory and threads to them (--numa;
// runtime/numa_shards.h). The topology comes from libnuma, or is injected as a string (tests fake
// two nodes on a one-node machine: --numa-topology / STRATA_NUMA_TOPOLOGY):
//   SPEC  = NODE ":" CPUS { ";" NODE ":" CPUS }     nodes 0, 1, ... in order
//   CPUS  = RANGE { "," RANGE },  RANGE = N | N "-" M
// e.g. "0:0-3;1:4-7". A faked node that does not exist physically binds its memory to the first
// node this process may allocate on, and its threads to the CPUs of its list that this process may
// run on (all of those when none is): the binding calls still run, and are checked for errors.
// Built without libnuma (CMake finds no libnuma-dev), every binding call throws a clear error.
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

inline constexpr int kMaxNumaNodes = 64;
inline constexpr int kMaxNumaCpu = 1024;  // CPU ids are below this (CPU_SETSIZE)

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;      // as the topology lists them
  int mem_node = 0;           // the physical node its memory binds to (== id when it exists)
  std::vector<int> pin_cpus;  // the CPUs its threads run on (its CPUs this process may use)
};

struct NumaTopology {
  std::vector<NumaNode> nodes;
  std::string source;  // "libnuma", "--numa-topology", "STRATA_NUMA_TOPOLOGY"
  int size() const { return static_cast<int>(nodes.size()); }
  // "2 NUMA nodes (STRATA_NUMA_TOPOLOGY): node 0 CPUs 0 (memory on node 0), node 1 CPUs 1 (memory on node 0)"
  std::string describe() const;
};

// Parses SPEC (above) into nodes (mem_node / pin_cpus unset). Throws naming `origin` (the option
// or variable it came from) and what is wrong.
NumaTopology parse_numa_topology(const std::string& spec, const std::string& origin);
// Whether this build has libnuma.
bool numa_built();
// The machine's nodes (libnuma; one node of every CPU this process may use when the kernel has no
// NUMA support). Throws when built without libnuma.
NumaTopology system_numa_topology();
// `spec` when not empty (origin "--numa-topology"), else $STRATA_NUMA_TOPOLOGY when set, else the
// machine's; mem_node and pin_cpus filled in. Throws when built without libnuma.
NumaTopology resolve_numa_topology(const std::string& spec);

// Binds [p, p + n) (widened to whole pages) to physical node mem_node (MPOL_BIND; pages already
// there are moved). Throws naming `what` and the error.
void numa_bind(const void* p, uint64_t n, int mem_node, const std::string& what);
// Interleaves [p, p + n)'s pages over the physical nodes (MPOL_INTERLEAVE). Throws as above.
void numa_interleave(const void* p, uint64_t n, const std::vector<int>& mem_nodes, const std::string& what);
// The policy recorded for the page at p (get_mempolicy MPOL_F_ADDR): its mode (MPOL_*) and nodes.
struct NumaPolicy {
  int mode = 0;
  std::vector<int> nodes;
};
NumaPolicy numa_policy_at(const void* p);
// MPOL_BIND / MPOL_INTERLEAVE, for callers without <numaif.h>.
int numa_mode_bind();
int numa_mode_interleave();
// Pins the calling thread to cpus (pthread_setaffinity_np). Throws naming the error.
void numa_pin_thread(const std::vector<int>& cpus);
// The CPUs the calling thread may run on now.
std::vector<int> numa_thread_cpus();

}  // namespace strata
