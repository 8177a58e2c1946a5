"""Worker failures, side by side: the native gateway and SMG in front of the same mock workers.

    .venv/bin/python scripts/bench_faults.py                 # every scenario, about 3 minutes
    .venv/bin/python scripts/bench_faults.py --scenarios kill --duration 20

Four mock workers (:mod:`bounded_router.testing.mock_worker`, in their own processes), the
native gateway (``bounded-router serve``, ``bounded_consistent_hashing``, its defaults: probes,
circuit breaker, retries) and SMG ``smg==1.13.0`` (installed into a scratch venv as
``scripts/record_smg_ring.py`` does; ``consistent_hashing``, its defaults) in front of them at
the same time. For each scenario one client per gateway sends ``--rate`` requests a second for
``--duration`` seconds (``--keys`` routing keys in ``X-SMG-Routing-Key``, every other request
streamed), and at ``--fault-at`` seconds worker 0 is

* ``kill``: killed (SIGKILL) and restarted on its port ``--fault-for`` seconds later;
* ``unavailable``: switched to answer 503 to everything (``POST /fault``) for ``--fault-for`` s;
* ``hang``: stopped (SIGSTOP) for ``--fault-for`` seconds, then continued;
* ``none``: left alone (the reference for latency).

Then ``--burst`` streams at once through each gateway and, ``--settle`` seconds after the last
ended, the file descriptors each gateway process still holds (idle connections to the workers).

Printed per scenario and gateway: failed requests (a status other than 200, a broken stream or
no answer within ``--client-timeout``), when the last failure came after the fault began, how
long after the fault ended worker 0 served a request again, the p99 latency of the requests that
did not fail against the ``none`` run's, and (ours) the leases left once the client is done.
Not part of ``make test``: it measures, it does not assert.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_smg_ring import SMG_VERSION, Gateway, free_port, smg_executable  # noqa: E402

from bounded_router.metrics import parse  # noqa: E402
from bounded_router.testing.fleet import ServerProcess  # noqa: E402

SCENARIOS = ("none", "kill", "unavailable", "hang")


@dataclass
class Outcome:
    """One request as the client saw it."""

    sent: float  # seconds since the run began
    ok: bool
    latency: float
    worker: str = ""


@dataclass
class Run:
    label: str
    outcomes: List[Outcome] = field(default_factory=list)
    leases_left: Optional[int] = None


class MockWorkers:
    """Four mock workers, each its own process, so that one can be killed or stopped."""

    def __init__(self, n: int, time_scale: float) -> None:
        self.ports = [free_port() for _ in range(n)]
        self.time_scale = time_scale
        self.processes: List[Optional[ServerProcess]] = [None] * n
        for i in range(n):
            self.start(i)

    @property
    def urls(self) -> List[str]:
        return ["http://127.0.0.1:%d" % p for p in self.ports]

    def start(self, i: int) -> None:
        args = ["--name", "w%d" % i, "--port", str(self.ports[i]), "--time-scale", str(self.time_scale)]
        self.processes[i] = ServerProcess("w%d" % i, "bounded_router.testing.mock_worker", args)

    def signal(self, i: int, sig: int) -> None:
        process = self.processes[i]
        assert process is not None
        os.kill(process.process.pid, sig)
        if sig == signal.SIGKILL:
            process.process.wait(10)

    def fault(self, i: int, mode: str) -> None:
        request = urllib.request.Request(self.urls[i] + "/fault", data=json.dumps({"mode": mode}).encode(), method="POST")
        urllib.request.urlopen(request, timeout=10).read()

    def stop(self) -> None:
        for process in self.processes:
            if process is not None:
                process.process.send_signal(signal.SIGCONT)
                process.stop()


async def one_request(session: "object", url: str, key: str, stream: bool, timeout: float, start: float) -> Outcome:
    import aiohttp

    assert isinstance(session, aiohttp.ClientSession)
    sent = time.monotonic()
    body = {"model": "mock-model", "prompt": "session %s turn" % key, "max_tokens": 8, "stream": stream}
    try:
        async with session.post(url + "/v1/completions", json=body, headers={"X-SMG-Routing-Key": key}, timeout=aiohttp.ClientTimeout(total=timeout)) as res:
            text = await res.read()
            ok = res.status == 200 and (not stream or text.rstrip().endswith(b"[DONE]"))
            return Outcome(sent - start, ok, time.monotonic() - sent, res.headers.get("X-Mock-Worker", ""))
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return Outcome(sent - start, False, time.monotonic() - sent)


async def drive(url: str, rate: float, duration: float, keys: int, timeout: float, start: float) -> List[Outcome]:
    """Send requests at a fixed rate (open loop), then wait for all of them."""
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = []
        n = int(rate * duration)
        for i in range(n):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one_request(session, url, "key-%d" % (i % keys), i % 2 == 0, timeout, start)))
        return list(await asyncio.gather(*tasks))


async def inject(workers: MockWorkers, scenario: str, at: float, length: float, start: float) -> None:
    await asyncio.sleep(max(0.0, start + at - time.monotonic()))
    if scenario == "kill":
        workers.signal(0, signal.SIGKILL)
    elif scenario == "unavailable":
        workers.fault(0, "unavailable")
    elif scenario == "hang":
        workers.signal(0, signal.SIGSTOP)
    else:
        return
    await asyncio.sleep(max(0.0, start + at + length - time.monotonic()))
    if scenario == "kill":
        await asyncio.get_running_loop().run_in_executor(None, workers.start, 0)
    elif scenario == "unavailable":
        workers.fault(0, "ok")
    else:
        workers.signal(0, signal.SIGCONT)


def active_leases(metrics_url: str) -> int:
    text = urllib.request.urlopen(metrics_url + "/metrics", timeout=10).read().decode()
    return int(parse(text)[("bounded_router_active_leases", ())])


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def summary(run: Run, at: float, length: float, reference_p99: Optional[float]) -> Dict[str, object]:
    failed = [o for o in run.outcomes if not o.ok]
    good = [o.latency for o in run.outcomes if o.ok]
    after = [o.sent for o in run.outcomes if o.ok and o.worker == "w0" and o.sent >= at + length]
    p99 = quantile(good, 0.99)
    return {
        "gateway": run.label,
        "failed": len(failed),
        "failed_share": len(failed) / max(1, len(run.outcomes)),
        "last_failure_s": max((o.sent for o in failed), default=at) - at if failed else 0.0,
        "back_after_s": (min(after) - (at + length)) if after else None,
        "p99_ms": p99 * 1000,
        "p99_vs_none": p99 / reference_p99 if reference_p99 else 1.0,
        "leases_left": run.leases_left,
    }


@contextlib.contextmanager
def side_by_side(args: argparse.Namespace, smg: str) -> Iterator[Tuple[MockWorkers, ServerProcess, Gateway, str]]:
    """Four mock workers, the native gateway (with its metrics URL) and SMG in front of them;
    every process is stopped by its PID on the way out."""
    workers = MockWorkers(4, args.time_scale)
    ours: Optional[ServerProcess] = None
    theirs: Optional[Gateway] = None
    try:
        ours = ServerProcess(
            "gateway",
            "bounded_router",
            ["serve", "--port", "0", "--metrics-port", "0", "--policy", "bounded_consistent_hashing", "--worker-urls"] + workers.urls,
        )
        metrics_url = next(line.rsplit(" listening on ", 1)[1].strip() for line in ours.lines if line.startswith("metrics "))
        theirs = Gateway(smg, workers.urls, "consistent_hashing")
        theirs.wait_ready(workers.urls)
        yield workers, ours, theirs, metrics_url
    finally:
        if theirs is not None:
            theirs.stop()
        if ours is not None:
            ours.stop()
        workers.stop()


def scenario_run(args: argparse.Namespace, smg: str, scenario: str) -> List[Run]:
    with side_by_side(args, smg) as (workers, ours, theirs, metrics_url):
        runs = [Run("bounded-router"), Run("smg " + SMG_VERSION)]

        async def main() -> None:
            start = time.monotonic() + 0.5
            results = await asyncio.gather(
                drive(ours.url, args.rate, args.duration, args.keys, args.client_timeout, start),
                drive(theirs.url, args.rate, args.duration, args.keys, args.client_timeout, start),
                inject(workers, scenario, args.fault_at, args.fault_for, start),
            )
            runs[0].outcomes, runs[1].outcomes = results[0], results[1]

        asyncio.run(main())
        runs[0].leases_left = active_leases(metrics_url)
        return runs


def open_fds(pid: int) -> int:
    return len(os.listdir("/proc/%d/fd" % pid))


def burst_fds(args: argparse.Namespace, smg: str) -> Dict[str, int]:
    """Descriptors each gateway holds ``--settle`` s after ``--burst`` concurrent streams ended."""
    with side_by_side(args, smg) as (_, ours, theirs, _):

        async def burst(url: str) -> None:
            import aiohttp

            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                start = time.monotonic()
                await asyncio.gather(*(one_request(session, url, "key-%d" % i, True, args.client_timeout, start) for i in range(args.burst)))

        async def both() -> None:
            await asyncio.gather(burst(ours.url), burst(theirs.url))

        asyncio.run(both())
        time.sleep(args.settle)
        return {"bounded-router": open_fds(ours.process.pid), "smg " + SMG_VERSION: open_fds(theirs.process.pid)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--rate", type=float, default=80.0, help="requests a second per gateway (default %(default)s)")
    parser.add_argument("--duration", type=float, default=40.0, help="seconds of traffic (default %(default)s)")
    parser.add_argument("--keys", type=int, default=200, help="routing keys (default %(default)s)")
    parser.add_argument("--fault-at", type=float, default=10.0)
    parser.add_argument("--fault-for", type=float, default=15.0)
    parser.add_argument("--client-timeout", type=float, default=20.0)
    parser.add_argument("--time-scale", type=float, default=0.01, help="mock worker time scale (default %(default)s)")
    parser.add_argument("--venv", default="/tmp/bounded-router-smg-" + SMG_VERSION, help="scratch venv for smg")
    parser.add_argument("--burst", type=int, default=1000, help="concurrent streams of the idle-connection check (0: skip)")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after the burst before counting descriptors")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    smg = smg_executable(args.venv)
    scenarios = ["none"] + [s for s in args.scenarios if s != "none"]
    reference: Dict[str, float] = {}
    rows: List[Dict[str, object]] = []
    for scenario in scenarios:
        runs = scenario_run(args, smg, scenario)
        for run in runs:
            good = [o.latency for o in run.outcomes if o.ok]
            if scenario == "none":
                reference[run.label] = quantile(good, 0.99)
            row = summary(run, args.fault_at, args.fault_for, reference.get(run.label))
            row["scenario"] = scenario
            rows.append(row)
            print(
                "%-12s %-16s failed %4d (%5.1f%%)  last failure +%5.1f s  worker 0 back after %s  p99 %7.1f ms (%.2fx none)  leases left %s"
                % (
                    scenario,
                    row["gateway"],
                    row["failed"],
                    100 * float(row["failed_share"]),  # type: ignore[arg-type]
                    row["last_failure_s"],
                    "%5.1f s" % row["back_after_s"] if row["back_after_s"] is not None else "never",
                    row["p99_ms"],
                    row["p99_vs_none"],
                    "-" if row["leases_left"] is None else row["leases_left"],
                ),
                flush=True,
            )
    if args.burst:
        fds = burst_fds(args, smg)
        for label, n in fds.items():
            print("burst        %-16s %d concurrent streams, %g s later: %d open file descriptors" % (label, args.burst, args.settle, n), flush=True)
        rows.append({"scenario": "burst", "fds": fds})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
