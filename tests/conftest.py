"""Guard for the Python tests: they must exercise the INSTALLED wheel, never the source tree.

`make test-python` builds the wheel, installs it into .venv and runs pytest from tests/. If
``bounded_router`` resolves to python/bounded_router (or is not installed at all) the run stops
with a usage error instead of testing something users never get.
"""

from __future__ import annotations

import os
import sysconfig

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SOURCE_PACKAGE = os.path.join(_REPO, "python", "bounded_router")


def _check_installed_package() -> None:
    try:
        import bounded_router
    except ImportError as e:
        raise pytest.UsageError(
            "bounded_router is not installed in this interpreter (%s); run `make test-python`, "
            "which builds the wheel and installs it into .venv" % e
        )
    location = os.path.dirname(os.path.realpath(bounded_router.__file__))
    install_dirs = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    if location == os.path.realpath(_SOURCE_PACKAGE) or os.path.dirname(location) not in install_dirs:
        raise pytest.UsageError(
            "the tests must run against the installed wheel, but bounded_router was imported from "
            "%s (expected a directory under %s); run them with `make test-python`"
            % (location, " or ".join(sorted(install_dirs)))
        )


# At import, before tests/python/conftest.py (which imports the package) is loaded.
_check_installed_package()


# Hypothesis: the same examples on every run (derandomize: examples derived from each test's
# code, no example database), so a run that passes in CI passes again and a failure reproduces.
# HYPOTHESIS_PROFILE=explore draws new examples each run, for looking for bugs by hand.
from hypothesis import settings  # noqa: E402

settings.register_profile("fixed", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))
