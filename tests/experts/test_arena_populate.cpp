// The expert cache's arena is faulted in by a background thread (ExpertCache::start_populate), not
// at construction; reads may land while it runs.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "../model/golden_util.h"
#include "experts/expert_cache.h"
#include "experts/expert_store.h"
#include "experts/io_backend.h"
#include "model/expert_layout.h"
#include "model/model.h"

using namespace strata;
using namespace strata::test;

TEST(ArenaPopulate, EveryPageOfTheArenaIsResidentOncePopulated) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (arena populate test)");
  auto model = Model::load(fixtures_dir() + "/qwen3moe-q8_0/model.gguf");
  ExpertStore store(expert_layout(model->gguf(), model->config(), model->weights()));
  ExpertCacheOptions o;
  o.cache_bytes = 96ull << 20;
  ExpertCache cache(store, make_pread_backend(store.files(), IoOptions{}, false), o);
  int layer = 0;
  while (!store.is_moe(layer)) ++layer;
  cache.begin_batch(1);
  const int32_t e = 1;
  cache.request(layer, &e, 1);  // a read while the arena is being populated
  cache.acquire(layer, e);
  cache.release(layer, e);
  cache.wait_populated();
  const long page = ::sysconf(_SC_PAGESIZE);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(cache.arena()) % static_cast<uintptr_t>(page), 0u);
  std::vector<unsigned char> in((cache.arena_bytes() + page - 1) / page);
  ASSERT_EQ(::mincore(const_cast<uint8_t*>(cache.arena()), cache.arena_bytes(), in.data()), 0);
  size_t resident = 0;
  for (unsigned char c : in) resident += c & 1;
  EXPECT_EQ(resident, in.size());
}
