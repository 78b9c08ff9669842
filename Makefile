# SpotTrain: the two commands of the quick start are `make demo` and `make test`.
# Both install missing Debian packages first (scripts/install-deps.sh).

BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
# The test programs of the libraries that run threads of their own: the
# checkpoint saver and replicator, rendezvous and elastic training, the
# controller and its API server, the HTTP guard and metrics server.
TSAN_TESTS ?= spot_core_test spot_ckpt_test spot_rdzv_test spot_dist_test spot_control_test spot_control_fault_test spot_monitor_test
CMAKE_ARGS ?=
JOBS       ?= $(shell nproc)
# ctest runs two test programs at a time; each keeps its own threads small.
TEST_JOBS  ?= 2

.PHONY: all deps build demo test fault bench asan tsan fuzz format clean

all: build

deps:
	@bash scripts/install-deps.sh
	@bash scripts/install-python-peers.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# `spot run` of the Fashion-MNIST CNN (2 epochs, 2 workers) on a spot fleet over a
# replayed real market (the synthetic one without ../shared/data): preemptions
# with notices, then the accuracy and the cost against on demand and SpotSim's
# prediction. About 2-3 minutes on 2 cores. Starts fresh each time.
demo: build
	rm -rf runs/fashion-mnist-spot
	$(BUILD)/bin/spot run examples/fashion-mnist-spot.yaml

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(TEST_JOBS)

# The fault campaigns: 24 SIGKILLs at random moments during checkpoint saves,
# each followed by a full verification of what is visible and a bitwise resume,
# and 6 elastic runs of 4 workers with 3 of them SIGKILLed one by one, each
# checked for every sample exactly once (`make test` runs them with 4 and 1);
# and the controller under scripted faults (provider errors and slowness, a
# full disk, clock steps, API floods, notices racing departures) over six
# week-long markets per scenario instead of one 3-day market.
fault: build
	SPOT_FAULT_TRIALS=24 ctest --test-dir $(BUILD) --output-on-failure -L fault

bench: build
	bash bench/run.sh $(BUILD)

# AddressSanitizer + UndefinedBehaviorSanitizer build, then every test.
asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSPOT_SANITIZE=ON -DSPOT_BUILD_BENCH=OFF $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(TEST_JOBS)

# ThreadSanitizer build of the threaded libraries' test programs, then those
# tests. LibTorch, Gloo and OpenMP are not instrumented: one OpenMP thread, and
# scripts/tsan.supp names what comes from inside them. Run with `make asan`
# before an issue is resolved (docs/architecture.md, "Sanitizers").
tsan: deps
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSPOT_TSAN=ON -DSPOT_BUILD_BENCH=OFF $(CMAKE_ARGS)
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TESTS)
	OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/scripts/tsan.supp" \
	  ctest --test-dir $(TSAN_BUILD) --output-on-failure -j $(TEST_JOBS) \
	  -R '^($(shell echo $(TSAN_TESTS) | tr ' ' '|'))\.'

# libFuzzer targets for the parsers (fuzz/, docs/fuzzing.md), built with clang 14
# (installed by scripts/install-fuzz-deps.sh): each runs FUZZ_SECONDS, then a
# table of executions, coverage and crashes. Crashes: build-fuzz/artifacts/.
FUZZ_SECONDS ?= 60
fuzz:
	@bash scripts/install-fuzz-deps.sh
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(JOBS) bash scripts/fuzz.sh

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
