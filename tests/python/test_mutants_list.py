"""scripts/mutants.py's mutants match the code: every snippet occurs exactly once in its file,
so none is reported STALE (a stale mutant tests nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_mutant_is_stale() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "mutants.py"), "--list"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(rows) >= 20
    stale = [line for line in rows if line.split()[1] == "STALE"]
    assert not stale, "update these mutants to the current code:\n" + "\n".join(stale)
