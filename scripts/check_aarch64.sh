#!/usr/bin/env bash
# Runs the aarch64 manylinux2014 wheel on this x86_64 machine, under qemu user-mode emulation:
#  1. the C API program tests/c/route_keys.c, compiled for aarch64-linux-gnu.2.17 with Zig's C
#     compiler against the header and library from the wheel;
#  2. the Python contract tests (tests/python, less those that need the HTTP frameworks, the
#     simulator's plots or the x86_64 build tools) on Debian's aarch64 CPython, with the wheel
#     installed into its site-packages as pip installs it.
# The aarch64 root is Debian's arm64 libc6 and python3 packages, downloaded with apt-get into
# build/aarch64/ and unpacked there (not installed: the machine's dpkg state is not touched); the
# tests' aarch64 dependencies come from the package index. Needs .venv (make venv) and Debian's
# qemu-user: when qemu-aarch64 is missing it says so and asks before installing qemu-user with
# apt-get (as root, through sudo when not root); with CI=true it installs without asking, and
# without a terminal to ask it stops and says what to install. A few minutes.
#
#   bash scripts/check_aarch64.sh [pytest arguments, default: the contract test files]
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
VPY=$REPO/.venv/bin/python
WORK=$REPO/build/aarch64
ROOT=$WORK/root

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
if ! command -v qemu-aarch64 >/dev/null; then
  echo "qemu-aarch64 (Debian's qemu-user) is missing: it runs the aarch64 wheel on this machine."
  if [ "${CI:-}" = true ]; then
    echo "CI=true: installing qemu-user with apt-get, as root"
  elif [ -t 0 ]; then
    read -r -p "Install qemu-user now with apt-get, as root? [y/N] " answer
    case "$answer" in [yY]*) ;; *) echo "not installed; install qemu-user, then run make check-aarch64 again" >&2; exit 1 ;; esac
  else
    echo "error: no terminal to ask: install qemu-user (apt-get install qemu-user), or set CI=true to let this do it" >&2
    exit 1
  fi
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user
fi

make wheel-aarch64
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' python/bounded_router/__init__.py)
WHEEL=$REPO/dist/bounded_router-$VERSION-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.whl

# Debian's arm64 packages through a private apt configuration: arm64 indices of this release's
# main archive in $WORK/apt, nothing added to the machine's architectures or sources.
# libssl3: prometheus_client (the tests' metrics parser) imports ssl.
if [ ! -x "$ROOT/usr/bin/python3" ] || [ ! -e "$ROOT/usr/lib/aarch64-linux-gnu/libssl.so.3" ]; then
  . /etc/os-release
  APT_DIR=$WORK/apt
  rm -rf "$APT_DIR" "$ROOT"
  mkdir -p "$APT_DIR"/{lists/partial,cache/archives/partial,parts,debs} "$ROOT"
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  cat >"$APT_DIR/sources.list" <<EOF
deb [arch=arm64 signed-by=$keyring] http://deb.debian.org/debian $VERSION_CODENAME main
deb [arch=arm64 signed-by=$keyring] http://deb.debian.org/debian-security $VERSION_CODENAME-security main
EOF
  apt=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o Dir::State::status=/dev/null
       -o Dir::Etc::SourceList="$APT_DIR/sources.list" -o Dir::Etc::SourceParts="$APT_DIR/parts"
       -o Dir::State::Lists="$APT_DIR/lists" -o Dir::Cache="$APT_DIR/cache")
  apt-get "${apt[@]}" update -qq
  # The release's default python3, e.g. python3.11. (sed reads to the end: a reader that stops
  # early, grep -m1, kills apt-cache with SIGPIPE, which pipefail makes the script's exit 141.)
  py=$(apt-cache "${apt[@]}" show python3-minimal | grep -oE 'python3\.[0-9]+-minimal' | sed -n 1p)
  py=${py%-minimal}
  (cd "$APT_DIR/debs" && apt-get "${apt[@]}" download libc6 libgcc-s1 zlib1g libexpat1 libffi8 libssl3 \
    "$py-minimal" "lib$py-minimal" "lib$py-stdlib" 2>&1 | { grep -v '^W: Download is performed unsandboxed' || true; })
  for deb in "$APT_DIR"/debs/*.deb; do dpkg-deb -x "$deb" "$ROOT"; done
  # The interpreter as an executable of this machine, which the tests' subprocesses can start
  # (sys.executable): nothing here registers qemu to run foreign executables (binfmt_misc).
  printf '#!/bin/sh\nexec qemu-aarch64 -L "%s" -0 "$0" "%s" "$@"\n' "$ROOT" "$ROOT/usr/bin/$py" \
    >"$ROOT/usr/bin/python3"
  chmod +x "$ROOT/usr/bin/python3"
fi
run() { qemu-aarch64 -L "$ROOT" "$@"; }
PY=("$ROOT/usr/bin/python3")
"${PY[@]}" -c 'import platform, sys; print("Python", sys.version.split()[0], "on", platform.machine())'

echo "== the C API program on the aarch64 library"
ZIG=$($VPY -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
rm -rf "$WORK/c" && mkdir -p "$WORK/c"
$VPY -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], [
    "bounded_router/libbounded_router.so", "bounded_router/libbounded_router.h"])' "$WHEEL" "$WORK/c"
LIBDIR=$WORK/c/bounded_router
# The program includes the header by its source name (capi/bounded_router.h); the wheel ships it
# as libbounded_router.h, beside the library. The wheel's copy is the one compiled against.
mkdir -p "$WORK/c/include" && cp "$LIBDIR/libbounded_router.h" "$WORK/c/include/bounded_router.h"
"$ZIG" cc -target aarch64-linux-gnu.2.17 -std=c11 -Wall -Wextra -Werror -I"$WORK/c/include" \
  -o "$WORK/c/route_keys" tests/c/route_keys.c -L"$LIBDIR" -lbounded_router -Wl,-rpath,"$LIBDIR"
file "$WORK/c/route_keys" | grep -q 'ARM aarch64' || { file "$WORK/c/route_keys"; exit 1; }
run "$WORK/c/route_keys"

echo "== the Python contract tests on the aarch64 wheel"
PYVER=$("${PY[@]}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
SITE=$("${PY[@]}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
case "$SITE" in
  "$ROOT"/*) ;;
  *) echo "error: the aarch64 Python's site-packages $SITE is outside $ROOT" >&2; exit 1 ;;
esac
rm -rf "$SITE" && mkdir -p "$SITE"
# The same lower bounds as requirements-dev.txt (the tests, the reference model's two rings and
# the metrics parser); aarch64 wheels for the emulated CPython.
mapfile -t deps < <(grep -E '^(pytest|hypothesis|xxhash|blake3|prometheus_client)[<>=!~]' requirements-dev.txt)
$VPY -m pip install --quiet --no-cache-dir --target "$SITE" --only-binary=:all: \
  --platform manylinux2014_aarch64 --python-version "$PYVER" --implementation cp "${deps[@]}" "$WHEEL"
CONTRACT=(test_native.py test_router.py test_leases.py test_batch.py test_headers.py test_config.py
          test_fast_path.py test_metrics.py test_reference_vectors.py test_conformance_bad_input.py
          test_conformance_determinism.py test_conformance_differential.py
          test_conformance_linearizability.py)
# Left out: test_fast_path's test of Starlette's Headers (not installed here), and the fork test:
# qemu-user aborts in a child forked from a process with several threads (the Go runtime's),
# "qemu_plugin_vcpu_init_hook: assertion failed", an emulator limitation.
[ $# -gt 0 ] || set -- -k 'not starlette and not test_multiprocessing_fork_child_gets_a_clear_error' \
  "${CONTRACT[@]/#/python/}"
# A test that compiles a stub library finds `cc`: here Zig's, for aarch64.
mkdir -p "$WORK/bin"
printf '#!/bin/sh\nexec "%s" cc -target aarch64-linux-gnu.2.17 "$@"\n' "$ZIG" >"$WORK/bin/cc"
chmod +x "$WORK/bin/cc"
# From tests/, as make test-python runs them: the installed package, never the source tree.
cd tests
PATH=$WORK/bin:$PATH "${PY[@]}" -m pytest -q -p no:cacheprovider "$@"
