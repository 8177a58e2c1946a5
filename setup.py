"""Build script of the ``bounded_router`` wheel.

The package is pure Python except for one native library, ``libbounded_router.so``, which is
the Go core built with ``go build -buildmode=c-shared``. Building therefore needs a Go
toolchain at least as new as go.mod's ``go`` line (``go`` on PATH, or the ``GO`` environment
variable naming it) and a C compiler for cgo; installing the resulting wheel needs neither.

The library is loaded with ctypes, not imported as a CPython extension, so the wheel is tagged
``py3-none-<platform>``: tied to the platform of the library, not to one CPython version.

Environment variables:

``BOUNDED_ROUTER_MANYLINUX=x86_64`` or ``aarch64``
    Build the manylinux2014 (glibc 2.17) wheel for that architecture, on any Linux host: cgo's C
    compiler is Zig's (``zig cc -target <arch>-linux-gnu.2.17``, the ``zig`` of the ``ziglang``
    package in requirements-wheels.txt), which links against glibc 2.17's symbol versions, and the
    wheel is tagged ``manylinux_2_17_<arch>.manylinux2014_<arch>`` (``make wheels``). Unset, the
    library is built with the host's compiler and glibc and tagged for the host (a build from the
    sdist).
``BOUNDED_ROUTER_STRIP=0``
    Keep the symbol table and debug information in the library (stripped by default).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py as _build_py

try:  # setuptools >= 70.1 ships bdist_wheel itself
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # pragma: no cover - older setuptools with the wheel package
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel  # type: ignore[no-redef]

ROOT = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "bounded_router"
LIBRARY = "libbounded_router.so"
HEADER = "libbounded_router.h"


MANYLINUX_ENV = "BOUNDED_ROUTER_MANYLINUX"
# Architecture (as in the wheel's platform tag): (GOARCH, Zig target, platform tag).
MANYLINUX_TARGETS = {
    "x86_64": ("amd64", "x86_64-linux-gnu.2.17", "manylinux_2_17_x86_64.manylinux2014_x86_64"),
    "aarch64": ("arm64", "aarch64-linux-gnu.2.17", "manylinux_2_17_aarch64.manylinux2014_aarch64"),
}


def _manylinux_target() -> tuple[str, str, str] | None:
    arch = os.environ.get(MANYLINUX_ENV)
    if not arch:
        return None
    if arch not in MANYLINUX_TARGETS:
        sys.exit(
            "error: %s=%r: expected one of %s" % (MANYLINUX_ENV, arch, ", ".join(MANYLINUX_TARGETS))
        )
    return MANYLINUX_TARGETS[arch]


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def required_go_version() -> str:
    """The Go version go.mod asks for (its ``go`` line), e.g. ``1.23``."""
    with open(os.path.join(ROOT, "go.mod"), encoding="utf-8") as f:
        match = re.search(r"^go\s+(\d+\.\d+(?:\.\d+)?)\s*$", f.read(), re.MULTILINE)
    if not match:
        sys.exit("error: go.mod has no `go` line naming the Go version this module needs")
    return match.group(1)


def _go_binary() -> str:
    """The Go toolchain to build with; exit with what to install when it is missing or too old."""
    required = required_go_version()
    install = (
        "Install Go %s or newer (https://go.dev/dl/ or your distribution's golang package) and "
        "put `go` on PATH or set GO=/path/to/go, or install a prebuilt bounded_router wheel, "
        "which needs no Go." % required
    )
    go = os.environ.get("GO") or shutil.which("go")
    if not go:
        sys.exit("error: building bounded_router from source needs the Go toolchain, and `go` "
                 "is not on PATH (nor set in GO). " + install)
    try:
        # GOTOOLCHAIN=local: the version of this binary, not a toolchain it would switch to.
        found = subprocess.run(
            [go, "env", "GOVERSION"], cwd=ROOT, env=dict(os.environ, GOTOOLCHAIN="local"),
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit("error: could not run `%s env GOVERSION` (%s). %s" % (go, e, install))
    if not found.startswith("go") or _version_tuple(found) < _version_tuple(required):
        sys.exit("error: building bounded_router from source needs Go %s or newer, but %s is %s. "
                 "%s" % (required, go, found or "of unknown version", install))
    return go


def _zig_cc(zig_target: str) -> str:
    """cgo's CC for a manylinux build: Zig's C compiler from the ziglang package, for one target."""
    try:
        import ziglang
    except ImportError:
        sys.exit("error: %s needs the ziglang package as its C compiler: "
                 "pip install -r requirements-wheels.txt" % MANYLINUX_ENV)
    zig = os.path.join(os.path.dirname(os.path.abspath(ziglang.__file__)), "zig")
    # cmd/go splits CC into words and honours quotes (not backslashes).
    words = [zig, "cc", "-target", zig_target]
    return " ".join("'%s'" % word if " " in word else word for word in words)


def build_native_library(package_dir: str) -> list[str]:
    """Build the Go shared library (and its C header) into ``package_dir``; return their paths."""
    os.makedirs(package_dir, exist_ok=True)
    output = os.path.join(package_dir, LIBRARY)
    command = [_go_binary(), "build", "-buildmode=c-shared", "-trimpath"]
    if os.environ.get("BOUNDED_ROUTER_STRIP", "1") != "0":
        # -s -w drop Go's symbol table and DWARF; --strip-all drops those of the C parts too.
        command.append("-ldflags=-s -w -extldflags=-Wl,--strip-all")
    command += ["-o", output, "./capi"]
    env = dict(os.environ, CGO_ENABLED="1")
    target = _manylinux_target()
    if target is not None:
        goarch, zig_target, _ = target
        env.update(GOOS="linux", GOARCH=goarch, CC=_zig_cc(zig_target))
        print("cgo's CC=%s" % env["CC"], flush=True)
    print("running " + shlex.join(command), flush=True)
    subprocess.run(command, cwd=ROOT, env=env, check=True)
    # The public header is the hand-written one (make test-header checks it against cgo's).
    header = os.path.join(package_dir, HEADER)
    shutil.copyfile(os.path.join(ROOT, "capi", "bounded_router.h"), header)
    return [output, header]


class build_py(_build_py):
    """Copy the Python sources, then build the native library into the package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            # An editable install imports the package from the source tree.
            target = os.path.join(ROOT, "python", PACKAGE)
        else:
            target = os.path.join(self.build_lib, PACKAGE)
        self._native_outputs = build_native_library(target)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return super().get_outputs(include_bytecode) + list(getattr(self, "_native_outputs", []))


class bdist_wheel(_bdist_wheel):
    """Tag the wheel py3-none-<platform>: it carries a native library but no CPython extension."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        target = _manylinux_target()
        if target is not None:
            platform = target[2]
        return "py3", "none", platform


class BinaryDistribution(Distribution):
    """A distribution with a native part: installed to platlib, never tagged as pure."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": build_py, "bdist_wheel": bdist_wheel},
)
