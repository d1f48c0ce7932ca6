# Strata: the two quick-start commands are `./bootstrap demo` and `./bootstrap test` (they install
# make and every other dependency, then run `make demo` / `make test`).
BUILD     ?= build
BUILD_SAN ?= build-san
BUILD_FUZZ?= build-fuzz
BUILD_ARM64 ?= build-arm64
FUZZ_SECONDS ?= 36
CMAKE_FLAGS ?=
# Left out of the sanitizer run (ctest -E): what the release run already checks over every set, and
# the RSS and cgroup bounds (VocabBudget, RequestMemory), which AddressSanitizer's shadow and quarantine break,
# and for CI's time the longest CLI runs whose code in-process tests cover here (GpuCli's MoE demo and KV types:
# the Vulkan* suites; route-cache and calibrate pricing: RouteCache.*, Calibration.*, StandInExperts.*).
SAN_EXCLUDE ?= ExpertParallelCli|ServeExpertParallel|VocabBudget|RequestMemory|GoldenSuite|EveryFixture|OnEveryGoldenSet|CallGrammars.ForcedOutputParsesBackIntoValidCalls|Qwen3MaskAgreesWithAccept|Qwen3FastMasksEqualTheTrieWalk|VulkanDense|VulkanMoe.Golden|VulkanHybrid.Golden|VramExpertsGolden|VulkanF16Kv|VulkanQ8Kv|VulkanVram.HalfTheLayers|GpuCli.MoeDemoModelRunsOnTheDeviceWithTheCpusText|GpuCli.KvCacheTypesOnTheDevice|PerplexityCli.RouteCacheIsPricedInKlAndMissesLess|CalibrateCli
# Left out of `make test` (CI's time budget: lavapipe is slow) and run by `make test-full`: the GPU
# path's golden sets beyond one dense and one MoE family (llama-dense-q8_0, qwen3-dense-q4_k_m and
# qwen3moe-q4_k_m stay in, and of the architectures whose MLA or DeltaNet attention runs on the CPU
# deepseek2-q4_k_m and qwen35moe-q8_0; the ops behind the others, biases, sinks and windows, are tested alone;
# with an f16 or q8_0 KV cache, llama-dense-q8_0 stays in, and qwen3moe-q4_k_m with half its layers on the CPU).
FULL_ONLY ?= VulkanDense.GoldenSetWithinTheKQuantTolerances/(llama_dense_f32|qwen3_dense_f32|qwen3_dense_q8_0)|VulkanMoe.GoldenSetWithinTheKQuantTolerances/(qwen3moe_(q8_0|f32|q4_0|q6_k|iq4_xs)|mixtral_|glm4moe_|minimax_m2_|gpt_oss_)|VulkanF16Kv.GoldenSetWithinTheKQuantTolerances/(qwen3_dense_q4_k_m|qwen3moe_q8_0|mixtral_q8_0|glm4moe_q8_0|gpt_oss_q8_0)|VulkanQ8Kv.GoldenSetWithinTheKQuantTolerances/(qwen3moe_q8_0|gpt_oss_q8_0|mixtral_q8_0)|VulkanHybrid.GoldenSetWithinTheKQuantTolerances/(deepseek2_(q8_0|kvb_q8_0|f32)|deepseek32_|kimi_k2_|qwen35moe_q4_k_m)|VramExpertsGolden.GoldenSetWithinTheGpuPathsTolerances/(qwen3moe_q4_k_m_(1 |6|all)|mixtral_|qwen35moe_|glm4moe_)

.PHONY: all deps configure build build-cli demo test test-release test-full test-sanitize fuzz bench clean npm-client \
        configure-arm64 build-arm64 build-arm64-ci test-arm64

all: build

deps:
	@./scripts/install-deps.sh

# The test binary is a unity build here (tests/CMakeLists.txt): CI compiles it twice from scratch.
UNITY     ?= -DSTRATA_UNITY_TESTS=ON

# ARM64 (on by default, so in `make test` and CI): the native build's ctest also runs the ARM64
# cross build's engine tests under qemu as a CPU without dotprod and one with dotprod and i8mm
# (Emulated.Arm64, Emulated.Arm64Dotprod: the kernel tests, a golden set per architecture and weight
# family, the trained model; scripts/test-emulated-arm64.sh). For CI's time only strata-engine and
# its tests are cross-built (build-arm64-ci), not the front ends, the CLI or the whole suite
# (make test-arm64 runs those). `make ARM64= test` leaves ARM64 out (no cross toolchain needed).
ARM64 ?= 1
configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(UNITY) -DSTRATA_ARM64_BUILD=$(if $(ARM64),$(abspath $(BUILD_ARM64)),) $(CMAKE_FLAGS) >/dev/null

build: configure
	@ninja -C $(BUILD)

# Only the strata binary (what the demo needs).
build-cli: configure
	@ninja -C $(BUILD) strata-cli

# Runs the main job on the small default model (generated on first use).
demo: build-cli
	@./scripts/demo.sh $(BUILD)/bin/strata

# Release tests (with the ARM64 cross build's engine tests under qemu, unless ARM64=), the same tests
# under ASan+UBSan, and a bounded fuzz run.
test: deps test-release test-sanitize fuzz

# The official openai npm client for the server's end-to-end test (from the npm registry);
# without it that one test skips loudly.
npm-client: deps
	@./scripts/setup-npm.sh >/dev/null || echo "strata: WARNING: npm install failed: the openai client e2e test will SKIP"

# ARM64, cross-built from x86-64 (cmake/aarch64-linux-gnu.cmake): the library, the CLI and the tests
# (build-arm64), or only what `make test` runs (build-arm64-ci).
configure-arm64:
	@./scripts/install-deps.sh --arm64
	@cmake -S . -B $(BUILD_ARM64) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
	  -DSTRATA_BUILD_BENCH=OFF $(UNITY) $(CMAKE_FLAGS) >/dev/null

build-arm64: configure-arm64
	@ninja -C $(BUILD_ARM64) strata-cli strata-tests

# What `make test` runs under qemu: the library's lower layers and their tests (strata-engine-tests).
build-arm64-ci: configure-arm64
	@ninja -C $(BUILD_ARM64) strata-engine-tests

# The whole test suite and the CLI on ARM64 under qemu, as a CPU without dotprod and as one with every
# extension (`make test` runs a subset: ctest's Emulated.Arm64 and Emulated.Arm64Dotprod).
test-arm64: build-arm64 build-cli
	@./scripts/test-emulated-arm64.sh cortex-a53 neon $(BUILD_ARM64)/tests/strata-tests $(BUILD_ARM64)/bin/strata $(BUILD)/bin/strata --all
	@./scripts/test-emulated-arm64.sh max neon-dotprod $(BUILD_ARM64)/tests/strata-tests $(BUILD_ARM64)/bin/strata $(BUILD)/bin/strata --all

test-release: build npm-client $(if $(ARM64),build-arm64-ci,)
	@ctest --test-dir $(BUILD) --output-on-failure -j2 -E '$(FULL_ONLY)'

# Every release test, the FULL_ONLY ones included.
test-full: build npm-client $(if $(ARM64),build-arm64-ci,)
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
	rm -rf $(BUILD) $(BUILD_SAN) $(BUILD_FUZZ) $(BUILD_ARM64)
