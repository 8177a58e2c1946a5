# The commands a person runs. Everything installs what it needs: Go modules through the Go
# toolchain, Python packages into the local virtual environment .venv.
GO      ?= go
PYTHON  ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
LIB     := build/libbounded_router.so
GO_SRC  := $(shell find core capi -name '*.go' -o -name '*.c' -o -name '*.h') go.mod go.sum

.PHONY: lib wheel venv install test test-go test-c test-header test-python test-fuzz demo bench clean

lib: $(LIB)

$(LIB): $(GO_SRC)
	$(GO) build -buildmode=c-shared -trimpath -o $(LIB) ./capi

# The wheel: setup.py builds the Go library and puts it inside the package.
wheel: $(VENV)/.ready
	rm -rf dist
	$(VPY) -m pip wheel --no-deps --no-build-isolation -w dist .

$(VENV)/.ready: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -r requirements-dev.txt
	touch $@

venv: $(VENV)/.ready

# Install the freshly built wheel into .venv, so tests and the demo use what users get.
install: wheel
	$(VPY) -m pip install --quiet --force-reinstall --no-deps dist/bounded_router-*.whl

test: test-go test-c test-header test-python test-fuzz

test-go:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

# Each Go fuzz target for FUZZTIME (the seed corpora in core/testdata/fuzz also run in test-go).
FUZZTIME ?= 20s
FUZZ_TARGETS := FuzzRequestFromHeaders FuzzParseConfig FuzzRouterOperations
test-fuzz:
	GO=$(GO) bash scripts/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

test-c: $(LIB)
	$(CC) -std=c11 -Wall -Wextra -Werror -Icapi -o build/route_keys tests/c/route_keys.c -Lbuild -lbounded_router -Wl,-rpath,'$$ORIGIN'
	./build/route_keys

# The hand-written public header against the exports cgo generates a header for.
test-header: $(LIB)
	$(PYTHON) scripts/check_header.py build/libbounded_router.h capi/bounded_router.h capi/*.c

# Run from tests/ so Python imports the installed package, never the source tree.
test-python: install
	cd tests && ../$(VPY) -m pytest -q

demo: install
	$(VPY) scripts/demo.py

# The Go benchmarks in 7 rounds of the whole suite (a noisy minute then spoils one round of each
# benchmark, not all of one), then scripts/bench.py on the installed wheel with its bench-only
# dependencies; writes BENCHMARKS.md and BENCHMARKS.png. About 6 minutes.
bench: install
	$(VPY) -m pip install --quiet -r requirements-bench.txt
	mkdir -p build
	$(GO) test -c -o build/core.test ./core
	for round in 1 2 3 4 5 6 7; do \
		./build/core.test -test.run '^$$' -test.bench . -test.benchmem -test.benchtime 200ms || exit 1; \
	done > build/bench-go.txt
	cat build/bench-go.txt
	$(VPY) scripts/bench.py --go build/bench-go.txt

clean:
	rm -rf build dist $(VENV) python/bounded_router/libbounded_router.so python/*.egg-info
