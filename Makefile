# Shale's commands (see README.md):
#   make run    installs what is missing, builds, and serves the pool file system tank/home
#               (a pool on a file under ./var/pool, made on the first run) on 127.0.0.1
#   make test   installs what is missing, builds (sanitizer and release builds), runs every suite
#   make bench  installs what is missing, builds the release build, and measures Shale against
#               NFS-Ganesha (bench/run-bench.sh; BENCH_QUICK=1 for a short run; docs/performance.md)
#   make soak   installs what is missing, builds the release build, and serves a pool under sfs2008
#               at 70% of its peak for an hour with a scrub and a reload every ten minutes
#               (bench/soak.sh; SOAK_SECONDS, SOAK_INTERVAL shorten it; docs/performance.md, "Soak")
#   make fuzz   builds the libFuzzer targets (tests/fuzz) and runs each for FUZZ_SECONDS (600),
#               or only FUZZ_TARGET; FUZZ_MERGE=1 adds what they find to the corpora
# Meson does the building; this file only names the entry points.

BUILD_DEBUG   := build/debug
BUILD_RELEASE := build/release
BUILD_CLANG   := build/clang
BUILD_FUZZ    := build/fuzz
SUITES        ?= unit proto malformed kclient fuzz hostile
WERROR        ?= true
CURDIR_ABS    := $(abspath .)

.PHONY: all deps deps-test deps-bench bench build build-debug build-release build-clang build-fuzz fuzz run \
	test clean

all: build

deps:
	@scripts/install-deps.sh build

deps-test:
	@scripts/install-deps.sh test

deps-bench:
	@scripts/install-deps.sh bench

$(BUILD_RELEASE)/build.ninja:
	meson setup $(BUILD_RELEASE) --buildtype=release -Dwerror=$(WERROR)

$(BUILD_DEBUG)/build.ninja:
	meson setup $(BUILD_DEBUG) --buildtype=debug -Db_sanitize=address,undefined \
		-Db_lundef=false -Dwerror=$(WERROR)

# A clang build, compiled but not run, keeps the code free of what only one compiler warns about.
$(BUILD_CLANG)/build.ninja:
	CC=clang meson setup $(BUILD_CLANG) --buildtype=debugoptimized -Dwerror=$(WERROR)

build-clang: $(BUILD_CLANG)/build.ninja
	ninja -C $(BUILD_CLANG)

# The libFuzzer targets (tests/fuzz) with ASan and UBSan; this build holds only the libraries and
# the targets. Its tests are the suite `fuzz`, which tests/run.py finds here.
$(BUILD_FUZZ)/build.ninja:
	CC=clang meson setup $(BUILD_FUZZ) --buildtype=debugoptimized -Db_sanitize=address,undefined \
		-Db_lundef=false -Dfuzz=true -Dwerror=$(WERROR)

build-fuzz: $(BUILD_FUZZ)/build.ninja
	ninja -C $(BUILD_FUZZ)

build-release: $(BUILD_RELEASE)/build.ninja
	ninja -C $(BUILD_RELEASE)

build-debug: $(BUILD_DEBUG)/build.ninja
	ninja -C $(BUILD_DEBUG)

build: deps build-release

# The first run creates ./var: a pool "tank" on a 1 GiB file (var/pool/tank0.img) with one file
# system, tank/home, server state, and an exports file made from etc/exports.default (edit
# var/exports afterwards to change what is served). BACKEND=posix serves the host directory
# ./var/export through the posix back end instead.
SHALE_BIN := $(BUILD_RELEASE)/tools/shale
BACKEND   ?= pool
run: deps build-release
	@mkdir -p var/state
ifeq ($(BACKEND),posix)
	@mkdir -p var/export
	@test -f var/exports.posix || sed 's|@EXPORT@|$(CURDIR_ABS)/var/export|' etc/exports.default > var/exports.posix
	@echo "Serving $(CURDIR_ABS)/var/export over NFSv3 on 127.0.0.1. Mount it with:"
	@echo "    mount -t nfs -o vers=3,nolock 127.0.0.1:$(CURDIR_ABS)/var/export /mnt"
	$(SHALE_BIN) serve --exports var/exports.posix --state var/state
else
	@mkdir -p var/pool
	@test -n "$$(ls var/pool)" || { $(SHALE_BIN) pool create tank var/pool/tank0.img --size 1G && \
		$(SHALE_BIN) fs create tank/home -d var/pool; }
	@test -f var/exports || sed 's|@EXPORT@|tank/home|' etc/exports.default > var/exports
	@echo "Serving the pool file system tank/home over NFSv3 on 127.0.0.1. Mount it with:"
	@echo "    mount -t nfs -o vers=3,nolock 127.0.0.1:/tank/home /mnt"
	$(SHALE_BIN) serve --exports var/exports --state var/state --pool-dir var/pool
endif

test: deps-test build-debug build-release build-clang build-fuzz
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
		tests/run.py $(BUILD_DEBUG) $(SUITES)

# Not part of `make test`: it takes about half an hour (BENCH_QUICK=1: a few minutes) and needs
# the machine to itself. Reports go to bench/results/, the summary table to stdout.
bench: deps-bench build-release
	bench/run-bench.sh --shale $(BUILD_RELEASE)/tools/shale

# Not part of `make test`: an hour (SOAK_SECONDS=600 SOAK_INTERVAL=120: ten minutes) that ends
# with PASS or FAIL lines; reports go to bench/results/soak*.
.PHONY: soak
soak: deps-test build-release
	bench/soak.sh --shale $(BUILD_RELEASE)/tools/shale

# A long fuzzing run, not part of `make test` (which fuzzes each target for 10 s): each target
# (or FUZZ_TARGET alone, e.g. nfs3_args) for FUZZ_SECONDS, niced. New inputs stay in
# build/fuzz/tests/fuzz/work/NAME/new unless FUZZ_MERGE=1; a crash stops the run and names its
# input.
FUZZ_SECONDS ?= 600
FUZZ_TARGET  ?= $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
fuzz: deps-test build-fuzz
	@for t in $(FUZZ_TARGET); do \
		nice -n 10 tests/fuzz/run-fuzz.sh $(BUILD_FUZZ)/tests/fuzz/fuzz_$$t tests/fuzz/corpus/$$t \
			$(FUZZ_SECONDS) $(BUILD_FUZZ)/tests/fuzz/work/$$t || exit 1; \
	done

clean:
	rm -rf build
