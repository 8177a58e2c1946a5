"""Memory, the CI size of scripts/memory.py: 100,000 route/release cycles and 1,000 membership
changes (never-seen URLs, leases outliving their workers) must not grow the process's resident
set by more than a few MiB after a warm-up. A leak of even 100 bytes per cycle (one Lease, one
lease slot, one key count) would add about 10 MiB. The long run: `.venv/bin/python scripts/memory.py`."""

from __future__ import annotations

import importlib.util
import os

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts", "memory.py")
LIMIT_MIB = 8.0


def test_no_memory_growth():  # Linux only, like the package: reads VmRSS from /proc/self/status
    spec = importlib.util.spec_from_file_location("bounded_router_memory", SCRIPT)
    memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(memory)
    figures = memory.run(cycles=100000, changes=1000)
    assert figures["leaked_leases"] == 0
    assert figures["growth_over_cycles_mib"] <= LIMIT_MIB, figures
    assert figures["growth_over_changes_mib"] <= LIMIT_MIB, figures
