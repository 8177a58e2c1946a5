"""The timing loop the Python benchmarks share (scripts/bench_weights.py, scripts/bench_builds.py).

It imports nothing of the package, so that bench_builds.py can time a build of any commit.
"""

from __future__ import annotations

import time
from typing import Callable, Dict

#: The clocks a measurement may read: wall time, or the CPU time of the measuring thread (the
#: library routes on the calling thread, so its work is counted), which a busy shared machine
#: inflates far less: other processes taking the cores stretch the wall time, not this thread's CPU time.
CLOCKS: Dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}


def per_call_ns(call: Callable[[], object], seconds: float, clock: Callable[[], float] = time.perf_counter) -> float:
    """Nanoseconds per call of ``call`` on ``clock``, timed over about ``seconds`` of it."""
    n, elapsed = 1, 0.0
    while elapsed < seconds / 4:  # find a count that takes a measurable time
        n *= 4
        start = clock()
        for _ in range(n):
            call()
        elapsed = clock() - start
    n = max(1, int(n * seconds / elapsed))
    start = clock()
    for _ in range(n):
        call()
    return (clock() - start) / n * 1e9
