# Shale's commands (see README.md):
#   make run    installs what is missing, builds, and serves ./var/export on 127.0.0.1
#   make test   installs what is missing, builds (sanitizer and release builds), runs every suite
#   make bench  installs what is missing, builds the release build, and measures Shale against
#               NFS-Ganesha (bench/run-bench.sh; BENCH_QUICK=1 for a short run; docs/performance.md)
# Meson does the building; this file only names the entry points.

BUILD_DEBUG   := build/debug
BUILD_RELEASE := build/release
BUILD_CLANG   := build/clang
SUITES        ?= unit proto malformed kclient
WERROR        ?= true
CURDIR_ABS    := $(abspath .)

.PHONY: all deps deps-test deps-bench bench build build-debug build-release build-clang run test clean

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

build-release: $(BUILD_RELEASE)/build.ninja
	ninja -C $(BUILD_RELEASE)

build-debug: $(BUILD_DEBUG)/build.ninja
	ninja -C $(BUILD_DEBUG)

build: deps build-release

# The first run creates ./var with an export directory, server state and an exports file made
# from etc/exports.default (edit var/exports afterwards to change what is served).
run: deps build-release
	@mkdir -p var/export var/state
	@test -f var/exports || sed 's|@EXPORT_DIR@|$(CURDIR_ABS)/var/export|' etc/exports.default > var/exports
	@echo "Serving $(CURDIR_ABS)/var/export over NFSv3 on 127.0.0.1. Mount it with:"
	@echo "    mount -t nfs -o vers=3 127.0.0.1:$(CURDIR_ABS)/var/export /mnt"
	$(BUILD_RELEASE)/tools/shale serve --exports var/exports --state var/state

test: deps-test build-debug build-release build-clang
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
		tests/run.py $(BUILD_DEBUG) $(SUITES)

# Not part of `make test`: it takes about half an hour (BENCH_QUICK=1: a few minutes) and needs
# the machine to itself. Reports go to bench/results/, the summary table to stdout.
bench: deps-bench build-release
	bench/run-bench.sh --shale $(BUILD_RELEASE)/tools/shale

clean:
	rm -rf build
