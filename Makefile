# The commands a person runs. Everything installs what it needs: Go modules through the Go
# toolchain, Python packages into the local virtual environment .venv.
GO      ?= go
PYTHON  ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
LIB     := build/libbounded_router.so
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' python/bounded_router/__init__.py)
ARCH    := $(shell uname -m)
# The manylinux2014 (glibc 2.17) wheel of one architecture, x86_64 or aarch64.
manylinux_wheel = dist/bounded_router-$(VERSION)-py3-none-manylinux_2_17_$(1).manylinux2014_$(1).whl

.PHONY: lib wheel wheels wheel-x86_64 wheel-aarch64 sdist check-aarch64 venv install test test-go \
	test-c test-header test-python test-fuzz demo bench clean FORCE

lib: $(LIB)

# Always handed to go build, whose cache knows which of the packages behind ./capi changed (a
# list of source folders here went stale when a package was added).
$(LIB): FORCE
	$(GO) build -buildmode=c-shared -trimpath -o $(LIB) ./capi

# What goes on the package index, in dist/: the manylinux2014 wheels for x86_64 and aarch64 and
# the sdist, each checked (scripts/check_wheel.py runs auditwheel show), then twine's checks.
wheels: wheel-x86_64 wheel-aarch64 sdist
	$(VPY) -m twine check --strict $(call manylinux_wheel,x86_64) $(call manylinux_wheel,aarch64) \
		dist/bounded_router-$(VERSION).tar.gz

# One manylinux2014 wheel, cross-built on any Linux host: setup.py builds the Go library with
# Zig's C compiler for <arch>-linux-gnu.2.17 as cgo's CC and puts it inside the package.
wheel-x86_64 wheel-aarch64: wheel-%: $(VENV)/.ready
	rm -f dist/bounded_router-*_$*.whl
	BOUNDED_ROUTER_MANYLINUX=$* $(VPY) -m build --wheel --no-isolation --outdir dist .
	$(VPY) scripts/check_wheel.py $(call manylinux_wheel,$*)

# The wheel for this machine's architecture.
wheel: wheel-$(ARCH)

sdist: $(VENV)/.ready
	rm -f dist/bounded_router-*.tar.gz
	$(VPY) -m build --sdist --no-isolation --outdir dist .

# The aarch64 wheel executed here under qemu user-mode emulation: the C API program and the
# Python contract tests on Debian's aarch64 CPython (about 12 minutes on a loaded 2-core machine;
# not part of make test, run by .ci/run).
check-aarch64: $(VENV)/.ready
	bash scripts/check_aarch64.sh

$(VENV)/.ready: requirements-dev.txt requirements-wheels.txt
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -r requirements-dev.txt
	touch $@

venv: $(VENV)/.ready

# Install this machine's freshly built manylinux wheel into .venv, so tests and the demo use
# what users get.
install: wheel
	$(VPY) -m pip install --quiet --force-reinstall --no-deps $(call manylinux_wheel,$(ARCH))

test: test-go test-c test-header test-python test-fuzz

# The allocation tests run once more without the race detector, whose sync.Pool drops buffers at
# random (TestBatchesAllocateNothing skips itself under it), and so do the gateway's, whose
# sockets are read and written by package rawio's own calls only then.
test-go:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	$(GO) test -count=1 -run 'Allocate' ./core
	$(GO) test -count=1 ./gateway/...

# Each Go fuzz target for FUZZTIME (their seed corpora also run in test-go).
FUZZTIME ?= 10s
FUZZ_TARGETS := FuzzRequestFromHeaders FuzzParseConfig FuzzRouterOperations FuzzCacheAware ./gateway:FuzzPromptTextMatchesEncodingJSON ./gateway:FuzzTokenBlocksMatchEncodingJSON ./kvevents:FuzzDecode ./peerroutes:FuzzDecode ./internal/zmqguard:FuzzReadyTypeMatchesZmq4 ./gateway/httpcheck:FuzzHeadersMatchNetHTTP ./gateway/httpcheck:FuzzRequestMatchesNetHTTP
test-fuzz:
	GO=$(GO) bash scripts/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

test-c: $(LIB)
	$(CC) -std=c11 -Wall -Wextra -Werror -Icapi -o build/route_keys tests/c/route_keys.c -Lbuild -lbounded_router -Wl,-rpath,'$$ORIGIN'
	./build/route_keys

# The hand-written public header against the exports cgo generates a header for.
test-header: $(LIB)
	$(PYTHON) scripts/check_header.py build/libbounded_router.h capi/bounded_router.h capi/*.c

# Run from tests/ so Python imports the installed package, never the source tree. The suite runs
# in PYTEST_WORKERS processes (pytest-xdist): most of its time is spent waiting on the gateways and
# workers its tests start, so two processes on two cores take little more than half as long.
PYTEST_WORKERS ?= 2
test-python: install
	cd tests && ../$(VPY) -m pytest -q -n $(PYTEST_WORKERS)

# The build's output goes to a log file; the screen shows the demo's progress and its table.
# DEMO_SEED=2 replays other seeded draws of the sessions (seeds 2 and 3); each seed prints the same
# table on every run.
DEMO_SEED ?= 0
demo:
	@mkdir -p build
	@echo "make demo: building the wheel and installing it into $(VENV) (log: build/demo-build.log)"
	@$(MAKE) --no-print-directory install >build/demo-build.log 2>&1 || \
		{ tail -n 30 build/demo-build.log; echo "make demo: the build failed, see build/demo-build.log" >&2; exit 1; }
	@$(VPY) scripts/demo.py --seed $(DEMO_SEED)

# The Go benchmarks in 7 rounds of the whole suite (a noisy minute then spoils one round of each
# benchmark, not all of one), then scripts/bench.py on the installed wheel with its bench-only
# dependencies (with the Python route paths and the plain route against an earlier build, which
# scripts/bench_builds.py builds under build/builds/); writes BENCHMARKS.md and BENCHMARKS.png.
# About 8 minutes.
bench: install
	$(VPY) -m pip install --quiet -r requirements-bench.txt
	mkdir -p build
	$(GO) test -c -o build/core.test ./core
	for round in 1 2 3 4 5 6 7; do \
		./build/core.test -test.run '^$$' -test.bench . -test.benchmem -test.benchtime 200ms || exit 1; \
	done > build/bench-go.txt
	cat build/bench-go.txt
	GO=$(GO) $(VPY) scripts/bench.py --go build/bench-go.txt

clean:
	rm -rf build dist $(VENV) python/bounded_router/libbounded_router.so python/*.egg-info

FORCE:
