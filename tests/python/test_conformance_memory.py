"""Memory: the bookkeeping of scripts/memory.py's workload, in CI at a small size.

100,000 route/release cycles and 1,000 membership changes (never-seen URLs, leases outliving
their workers) must leave no lease, no load and no leak behind; scripts/memory.py itself asserts
that every load is back to zero and the membership back to its start. The resident set size is
not asserted here: its growth depends on the allocators (glibc's arenas, Go's heap, pymalloc's
pools), not only on the code, so it is a measurement, reported by the long run:
`.venv/bin/python scripts/memory.py` (exits non-zero past --limit-mib).
"""

from __future__ import annotations

import importlib.util
import os

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts", "memory.py")


def test_workload_leaves_nothing_behind():  # Linux only, like the package: memory.py reads /proc/self/status
    spec = importlib.util.spec_from_file_location("bounded_router_memory", SCRIPT)
    memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(memory)
    figures = memory.run(cycles=100000, changes=1000)
    assert figures["leaked_leases"] == 0
    assert (figures["cycles"], figures["membership_changes"]) == (100000, 1000)
    assert figures["urls_used"] > 8  # the changes used URLs never seen before
