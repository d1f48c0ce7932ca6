#include "core/numa_topology.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/page_size.h"

#ifdef STRATA_HAVE_NUMA
#include <numa.h>
#include <numaif.h>
#endif

namespace strata {

namespace {

// A whole number of s[a, b) (digits only); -1 when it is not one or exceeds `max`.
int parse_count(const std::string& s, size_t a, size_t b, int max) {
  if (a >= b || b - a > 6) return -1;
  int v = 0;
  for (size_t i = a; i < b; ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v <= max ? v : -1;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += j > i ? fmt::format("{}-{}", cpus[i], cpus[j]) : fmt::format("{}", cpus[i]);
    i = j + 1;
  }
  return s;
}

}  // namespace

std::string NumaTopology::describe() const {
  std::string s = fmt::format("{} NUMA node{} ({})", nodes.size(), nodes.size() == 1 ? "" : "s", source);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NumaNode& n = nodes[i];
    s += fmt::format("{} node {} CPUs {} (threads on {}, memory on node {})", i ? ";" : ":", n.id, cpu_list(n.cpus), cpu_list(n.pin_cpus), n.mem_node);
  }
  return s;
}

NumaTopology parse_numa_topology(const std::string& spec, const std::string& origin) {
  NumaTopology t;
  t.source = origin;
  const auto bad = [&](const std::string& why) -> void { fail("{} '{}': {} (expected NODE:CPUS[;NODE:CPUS...], e.g. 0:0-3;1:4-7)", origin, spec, why); };
  if (spec.empty()) bad("empty");
  std::vector<uint8_t> seen(kMaxNumaCpu, 0);
  size_t a = 0;
  while (a <= spec.size()) {
    size_t end = spec.find(';', a);
    if (end == std::string::npos) end = spec.size();
    const size_t colon = spec.find(':', a);
    if (colon == std::string::npos || colon >= end) bad(fmt::format("node {} has no ':'", t.nodes.size()));
    const int id = parse_count(spec, a, colon, kMaxNumaNodes - 1);
    if (id < 0) bad(fmt::format("'{}' is not a node number below {}", spec.substr(a, colon - a), kMaxNumaNodes));
    if (id != static_cast<int>(t.nodes.size())) bad(fmt::format("node {} where node {} was expected (nodes are numbered 0, 1, ... in order)", id, t.nodes.size()));
    NumaNode n;
    n.id = id;
    for (size_t r = colon + 1; r <= end;) {
      size_t rend = spec.find(',', r);
      if (rend == std::string::npos || rend > end) rend = end;
      const size_t dash = spec.find('-', r);
      const bool range = dash != std::string::npos && dash < rend;
      const int lo = parse_count(spec, r, range ? dash : rend, kMaxNumaCpu - 1);
      const int hi = range ? parse_count(spec, dash + 1, rend, kMaxNumaCpu - 1) : lo;
      if (lo < 0 || hi < 0) bad(fmt::format("node {}: '{}' is not a CPU number or range below {}", id, spec.substr(r, rend - r), kMaxNumaCpu));
      if (hi < lo) bad(fmt::format("node {}: range {}-{} runs backwards", id, lo, hi));
      for (int c = lo; c <= hi; ++c) {
        if (seen[c]) bad(fmt::format("CPU {} is listed twice", c));
        seen[c] = 1;
        n.cpus.push_back(c);
      }
      r = rend + 1;
    }
    std::sort(n.cpus.begin(), n.cpus.end());
    t.nodes.push_back(std::move(n));
    if (end == spec.size()) break;
    a = end + 1;
  }
  return t;
}

std::vector<int> numa_thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

void numa_pin_thread(const std::vector<int>& cpus) {
  STRATA_CHECK(!cpus.empty(), "--numa: pinning a thread to no CPU");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    STRATA_CHECK(c >= 0 && c < CPU_SETSIZE, "--numa: CPU {} is outside the CPU set", c);
    CPU_SET(c, &set);
  }
  const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  STRATA_CHECK(rc == 0, "--numa: pinning a thread to CPUs {} failed: {}", cpu_list(cpus), std::strerror(rc));
}

#ifdef STRATA_HAVE_NUMA

namespace {
constexpr unsigned long kMaskBits = 1024;  // node masks passed to the kernel (its MAX_NUMNODES at most)
using NodeMask = unsigned long[kMaskBits / (8 * sizeof(unsigned long))];
constexpr unsigned long kWordBits = 8 * sizeof(unsigned long);

// The first physical node this process may allocate on, and whether `node` is one it may.
int allowed_node(int node) {
  struct bitmask* m = numa_get_mems_allowed();
  int first = -1;
  bool ok = false;
  for (int i = 0; m && i <= numa_max_node(); ++i)
    if (numa_bitmask_isbitset(m, static_cast<unsigned>(i))) {
      if (first < 0) first = i;
      if (i == node) ok = true;
    }
  if (m) numa_bitmask_free(m);
  return ok ? node : std::max(first, 0);
}

// [p, p + n) widened to whole pages.
std::pair<void*, unsigned long> page_span(const void* p, uint64_t n) {
  const uintptr_t page = page_size(), a = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + n + page - 1) / page * page;
  return {reinterpret_cast<void*>(a), static_cast<unsigned long>(b - a)};
}

void set_policy(const void* p, uint64_t n, int mode, const std::vector<int>& nodes, unsigned flags, const std::string& what) {
  if (n == 0) return;
  NodeMask mask = {};
  for (int x : nodes) {
    STRATA_CHECK(x >= 0 && static_cast<unsigned long>(x) < kMaskBits, "--numa: node {} is outside the node mask", x);
    mask[x / kWordBits] |= 1ul << (x % kWordBits);
  }
  const auto [a, len] = page_span(p, n);
  if (mbind(a, len, mode, mask, kMaskBits + 1, flags) != 0)
    fail("--numa: binding {} ({} bytes) to node{} {} failed: {}", what, len, nodes.size() == 1 ? "" : "s", cpu_list(nodes), std::strerror(errno));
}
}  // namespace

bool numa_built() { return true; }

NumaTopology system_numa_topology() {
  NumaTopology t;
  t.source = "libnuma";
  const std::vector<int> allowed = numa_thread_cpus();
  if (numa_available() < 0) {
    t.nodes.push_back(NumaNode{0, allowed, 0, {}});
    return t;
  }
  struct bitmask* cpus = numa_allocate_cpumask();
  for (int node = 0; node <= numa_max_node() && static_cast<int>(t.nodes.size()) < kMaxNumaNodes; ++node) {
    if (numa_node_to_cpus(node, cpus) != 0) continue;
    NumaNode n;
    n.id = static_cast<int>(t.nodes.size());
    n.mem_node = node;
    for (unsigned c = 0; c < cpus->size && c < static_cast<unsigned>(kMaxNumaCpu); ++c)
      if (numa_bitmask_isbitset(cpus, c)) n.cpus.push_back(static_cast<int>(c));
    if (!n.cpus.empty()) t.nodes.push_back(std::move(n));
  }
  numa_bitmask_free(cpus);
  if (t.nodes.empty()) t.nodes.push_back(NumaNode{0, allowed, 0, {}});
  return t;
}

NumaTopology resolve_numa_topology(const std::string& spec) {
  NumaTopology t;
  const char* env = std::getenv("STRATA_NUMA_TOPOLOGY");
  if (!spec.empty()) t = parse_numa_topology(spec, "--numa-topology");
  else if (env && *env) t = parse_numa_topology(env, "STRATA_NUMA_TOPOLOGY");
  else t = system_numa_topology();
  const std::vector<int> allowed = numa_thread_cpus();
  const bool injected = t.source != "libnuma";
  for (NumaNode& n : t.nodes) {
    if (injected) n.mem_node = numa_available() < 0 ? 0 : allowed_node(n.id);
    else if (numa_available() >= 0) n.mem_node = allowed_node(n.mem_node);
    for (int c : n.cpus)
      if (std::binary_search(allowed.begin(), allowed.end(), c)) n.pin_cpus.push_back(c);
    if (n.pin_cpus.empty()) n.pin_cpus = allowed;
  }
  return t;
}

void numa_bind(const void* p, uint64_t n, int mem_node, const std::string& what) {
  set_policy(p, n, MPOL_BIND, {mem_node}, MPOL_MF_MOVE, what);
}

void numa_interleave(const void* p, uint64_t n, const std::vector<int>& mem_nodes, const std::string& what) {
  set_policy(p, n, MPOL_INTERLEAVE, mem_nodes, 0, what);
}

NumaPolicy numa_policy_at(const void* p) {
  NumaPolicy pol;
  NodeMask mask = {};
  if (get_mempolicy(&pol.mode, mask, kMaskBits, const_cast<void*>(p), MPOL_F_ADDR) != 0)
    fail("--numa: reading the memory policy at {} failed: {}", p, std::strerror(errno));
  for (unsigned long x = 0; x < kMaskBits; ++x)
    if (mask[x / kWordBits] & (1ul << (x % kWordBits))) pol.nodes.push_back(static_cast<int>(x));
  return pol;
}

int numa_mode_bind() { return MPOL_BIND; }
int numa_mode_interleave() { return MPOL_INTERLEAVE; }

#else

namespace {
[[noreturn]] void no_numa() { fail("--numa: this strata was built without libnuma (install libnuma-dev and rebuild)"); }
}  // namespace

bool numa_built() { return false; }
NumaTopology system_numa_topology() { no_numa(); }
NumaTopology resolve_numa_topology(const std::string&) { no_numa(); }
void numa_bind(const void*, uint64_t, int, const std::string&) { no_numa(); }
void numa_interleave(const void*, uint64_t, const std::vector<int>&, const std::string&) { no_numa(); }
NumaPolicy numa_policy_at(const void*) { no_numa(); }
int numa_mode_bind() { return 2; }
int numa_mode_interleave() { return 3; }

#endif

}  // namespace strata
