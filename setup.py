"""Build script of the ``bounded_router`` wheel.

The package is pure Python except for one native library, ``libbounded_router.so``, which is
the Go core built with ``go build -buildmode=c-shared``. Building therefore needs a Go
toolchain (``go`` on PATH, or the ``GO`` environment variable naming it); installing the
resulting wheel does not.

The library is loaded with ctypes, not imported as a CPython extension, so the wheel is tagged
``py3-none-<platform>``: tied to the platform of the library, not to one CPython version.
"""

from __future__ import annotations

import os
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


def _go_binary() -> str:
    go = os.environ.get("GO") or shutil.which("go")
    if not go:
        sys.exit(
            "error: building bounded_router needs the Go toolchain (1.23 or newer): put `go` "
            "on PATH or set GO=/path/to/go. Installing a built wheel does not need Go."
        )
    return go


def build_native_library(package_dir: str) -> list[str]:
    """Build the Go shared library (and its C header) into ``package_dir``; return their paths."""
    os.makedirs(package_dir, exist_ok=True)
    output = os.path.join(package_dir, LIBRARY)
    command = [_go_binary(), "build", "-buildmode=c-shared", "-trimpath", "-o", output, "./capi"]
    env = dict(os.environ, CGO_ENABLED="1")
    print("running " + " ".join(command), flush=True)
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
        return "py3", "none", platform


class BinaryDistribution(Distribution):
    """A distribution with a native part: installed to platlib, never tagged as pure."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": build_py, "bdist_wheel": bdist_wheel},
)
