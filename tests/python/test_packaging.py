"""What users install: the suite runs on the manylinux2014 wheel (glibc 2.17), its metadata is
what the package index shows, and the sdist builds from source only with a new enough Go,
saying what to install otherwise."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Dict, Tuple

import pytest
from elftools.elf.elffile import ELFFile

import bounded_router

REPO = Path(__file__).resolve().parents[2]
ARCH = platform.machine()


def _glibc_version(symbol_version: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in symbol_version[len("GLIBC_"):].split("."))


def _required_go() -> str:
    match = re.search(r"^go (\S+)$", (REPO / "go.mod").read_text(), re.MULTILINE)
    assert match, "go.mod has no go line"
    return match.group(1)


def test_installed_wheel_is_the_manylinux2014_wheel() -> None:
    wheel = metadata.distribution("bounded_router").read_text("WHEEL") or ""
    tags = set(re.findall(r"^Tag: (\S+)$", wheel, re.MULTILINE))
    assert tags == {"py3-none-manylinux_2_17_" + ARCH, "py3-none-manylinux2014_" + ARCH}, (
        "the suite must run on the manylinux wheel of `make wheels` (make install), not on %s" % tags
    )


def test_installed_library_needs_no_glibc_newer_than_2_17() -> None:
    library = Path(bounded_router.__file__).parent / "libbounded_router.so"
    with library.open("rb") as f:
        needs = ELFFile(f).get_section_by_name(".gnu.version_r")
        assert needs is not None, "%s has no version requirements section" % library
        versions = {aux.name for _, auxes in needs.iter_versions() for aux in auxes}
    glibc = sorted((v for v in versions if re.fullmatch(r"GLIBC_[\d.]+", v)), key=_glibc_version)
    assert glibc, "%s requires no GLIBC_ symbol version at all: %s" % (library, sorted(versions))
    assert _glibc_version(glibc[-1]) <= (2, 17), "%s needs %s, newer than manylinux2014's 2.17" % (
        library,
        glibc[-1],
    )


def test_metadata_is_what_the_index_shows() -> None:
    dist = metadata.distribution("bounded_router")
    meta = dist.metadata
    assert meta["Version"] == bounded_router.__version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in (meta.get_all("License-File") or [])
    assert meta["Requires-Python"] == ">=3.9"
    assert "Source, https://github.com/bounded-router/bounded-router" in (meta.get_all("Project-URL") or [])
    assert meta["Description-Content-Type"] == "text/markdown"
    readme = (REPO / "README.md").read_text()
    assert (dist.read_text("METADATA") or "").rstrip().endswith(readme.rstrip()[-200:])


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sdist")
    command = [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(out), str(REPO)]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    (path,) = out.glob("bounded_router-*.tar.gz")
    return path


def _build_wheel(sdist: Path, out: Path, env: Dict[str, str]) -> "subprocess.CompletedProcess[str]":
    """pip wheel from the sdist, as a user without a matching wheel gets it."""
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir"]
    command += ["-w", str(out), str(sdist)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def _env(**changes: str) -> Dict[str, str]:
    unset = ("GO", "BOUNDED_ROUTER_MANYLINUX", "BOUNDED_ROUTER_LIBRARY")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(changes)
    return env


def test_sdist_without_go_says_what_to_install(sdist: Path, tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    result = _build_wheel(sdist, tmp_path / "out", _env(PATH=str(empty)))
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "`go` is not on PATH" in output, output
    assert "Install Go %s or newer" % _required_go() in output, output
    assert not list(tmp_path.glob("out/*.whl"))


def test_sdist_with_too_old_go_names_the_version_found(sdist: Path, tmp_path: Path) -> None:
    old_go = tmp_path / "go"
    old_go.write_text('#!/bin/sh\n[ "$*" = "env GOVERSION" ] && echo go1.20.14 && exit 0\nexit 3\n')
    old_go.chmod(0o755)
    result = _build_wheel(sdist, tmp_path / "out", _env(GO=str(old_go)))
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "needs Go %s or newer, but %s is go1.20.14" % (_required_go(), old_go) in output, output
    assert "Install Go %s or newer" % _required_go() in output, output
    assert not list(tmp_path.glob("out/*.whl"))


def test_sdist_builds_a_working_wheel_with_go(sdist: Path, tmp_path: Path) -> None:
    result = _build_wheel(sdist, tmp_path / "out", _env())
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "out").glob("*.whl")
    assert wheel.name == "bounded_router-%s-py3-none-linux_%s.whl" % (bounded_router.__version__, ARCH)
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path / "site")
    # In a fresh interpreter: one process loads one Go runtime, and this one has the installed.
    code = (
        "import bounded_router as b; print(b.__file__); "
        "r = b.Router(['http://w0:8000', 'http://w1:8000']); print(r.route('k').worker_url)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_env(PYTHONPATH=str(tmp_path / "site")),
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0, run.stderr
    module, worker = run.stdout.split()
    assert Path(module).parent == tmp_path / "site" / "bounded_router"
    assert worker in ("http://w0:8000", "http://w1:8000")


def test_make_rebuilds_the_library_when_any_package_it_links_changes(tmp_path: Path) -> None:
    # A stale build/libbounded_router.so would let make test-c and test-header check old code:
    # pretending one file of each of the module's packages behind ./capi changed (make -W) must
    # leave the library out of date, whatever its age.
    listed = subprocess.run(
        ["go", "list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}/{{index .GoFiles 0}}{{end}}", "./capi"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()
    files = [str(Path(f).relative_to(REPO)) for f in listed if Path(f).is_relative_to(REPO)]
    assert any(f.startswith("core/") for f in files), "go list found none of the module's packages: %s" % listed
    library = tmp_path / "libbounded_router.so"
    library.touch()
    stale = []
    for name in files:
        plan = subprocess.run(["make", "-q", "-W", name, "LIB=%s" % library, str(library)], cwd=REPO, capture_output=True, text=True)
        assert plan.returncode in (0, 1), plan.stderr
        if plan.returncode == 0:
            stale.append(name)
    assert not stale, "make keeps the library up to date although these changed: %s" % stale
