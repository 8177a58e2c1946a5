"""Every code block of README.md runs as written, so the examples cannot rot.

Each ``python`` block runs alone in a fresh interpreter (it starts its own mock workers on
127.0.0.1 and stops them); each ``sh`` block carries a marker on the line above it,
``<!-- readme-test: run -->`` (run with bash -e, ``python`` being this interpreter) or
``<!-- readme-test: skip, REASON -->``, so a new shell block cannot go unchecked by accident.
Blocks run in a scratch directory holding ``tests/testdata``, as a clone has it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^(?:<!-- readme-test: (?P<marker>[^>]*?) -->\n)?```(?P<lang>\w*)\n(?P<code>.*?)^```$", re.M | re.S)
TIMEOUT_S = 60


class Block(NamedTuple):
    line: int
    lang: str
    marker: str
    code: str


def readme_blocks() -> List[Block]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [
        Block(text.count("\n", 0, m.start("code")), m.group("lang"), m.group("marker") or "", m.group("code"))
        for m in BLOCK.finditer(text)
        if m.group("lang") in ("python", "sh")
    ]


def test_the_first_screen_has_exactly_two_set_up_commands() -> None:
    first = readme_blocks()[0]
    assert first.lang == "sh" and first.line < 25
    commands = [line.split("#")[0].strip() for line in first.code.splitlines()]
    assert [c for c in commands if c] == ["make demo", "make test"]


def test_every_shell_block_is_marked() -> None:
    unmarked = [b.line for b in readme_blocks() if b.lang == "sh" and not re.fullmatch(r"run|skip, .+", b.marker)]
    assert not unmarked, "README.md lines %s: mark the sh block <!-- readme-test: run --> or <!-- readme-test: skip, why -->" % unmarked


@pytest.mark.parametrize("block", [b for b in readme_blocks() if b.lang == "python" or b.marker == "run"], ids=lambda b: "line%d" % b.line)
def test_readme_block_runs(block: Block, tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "testdata").symlink_to(ROOT / "tests" / "testdata")
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}  # loopback only, never through a proxy
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    command = [sys.executable, "-c", block.code] if block.lang == "python" else ["bash", "-e", "-c", block.code]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, "README.md line %d:\n%s\n%s" % (block.line, done.stdout[-2000:], done.stderr[-4000:])
    assert done.stdout.strip(), "the example prints what it did"
