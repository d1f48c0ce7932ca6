# Strata: the two quick-start commands are `./bootstrap demo` and `./bootstrap test` (they install
# make and every other dependency, then run `make demo` / `make test`).
BUILD     ?= build
BUILD_SAN ?= build-san
BUILD_FUZZ?= build-fuzz
FUZZ_SECONDS ?= 60
CMAKE_FLAGS ?=
# Left out of the sanitizer run (ctest -E): what the release run already checks over every set.
SAN_EXCLUDE ?= GoldenSuite|EveryFixture|OnEveryGoldenSet|CallGrammars.ForcedOutputParsesBackIntoValidCalls|Qwen3MaskAgreesWithAccept|Qwen3FastMasksEqualTheTrieWalk|VulkanDense
# Left out of `make test` (CI's time budget) and run by `make test-full`: the GPU path's golden sets
# beyond one per architecture and weight family (llama-dense-q8_0 and qwen3-dense-q4_k_m stay in).
FULL_ONLY ?= VulkanDense.GoldenSetWithinTheKQuantTolerances/(llama_dense_f32|qwen3_dense_f32|qwen3_dense_q8_0)

.PHONY: all deps configure build build-cli demo test test-release test-full test-sanitize fuzz bench clean npm-client

all: build

deps:
	@./scripts/install-deps.sh

# The test binary is a unity build here (tests/CMakeLists.txt): CI compiles it twice from scratch.
UNITY     ?= -DSTRATA_UNITY_TESTS=ON

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(UNITY) $(CMAKE_FLAGS) >/dev/null

build: configure
	@ninja -C $(BUILD)

# Only the strata binary (what the demo needs).
build-cli: configure
	@ninja -C $(BUILD) strata-cli

# Runs the main job on the small default model (generated on first use).
demo: build-cli
	@./scripts/demo.sh $(BUILD)/bin/strata

# Release tests, the same tests under ASan+UBSan, and a bounded fuzz run.
test: deps test-release test-sanitize fuzz

# The official openai npm client for the server's end-to-end test (from the npm registry);
# without it that one test skips loudly.
npm-client: deps
	@./scripts/setup-npm.sh >/dev/null || echo "strata: WARNING: npm install failed: the openai client e2e test will SKIP"

test-release: build npm-client
	@ctest --test-dir $(BUILD) --output-on-failure -j2 -E '$(FULL_ONLY)'

# Every release test, the FULL_ONLY ones included.
test-full: build npm-client
	@ctest --test-dir $(BUILD) --output-on-failure -j2

test-sanitize: deps
	@cmake -S . -B $(BUILD_SAN) -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DSTRATA_BUILD_BENCH=OFF $(UNITY) $(CMAKE_FLAGS) >/dev/null
	@ninja -C $(BUILD_SAN) strata-cli all
	@# The golden numeric suite and the tests that repeat one check over every golden set run in
	@# the release build; under the sanitizers the same code is exercised by the single-set tests
	@# (streaming, speculation, grammar masks) and the fuzzers.
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir $(BUILD_SAN) --output-on-failure -j2 -E '$(SAN_EXCLUDE)'

fuzz: deps
	@CC=clang CXX=clang++ cmake -S . -B $(BUILD_FUZZ) -G Ninja -DSTRATA_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@ninja -C $(BUILD_FUZZ)
	@./scripts/fuzz.sh $(BUILD_FUZZ) $(FUZZ_SECONDS)

bench: build
	@$(BUILD)/bin/bench_kernels

clean:
	rm -rf $(BUILD) $(BUILD_SAN) $(BUILD_FUZZ)
