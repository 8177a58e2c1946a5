"""SMG and this package's proxy side by side, in front of the same mock workers: key agreement,
8-sibling burst placement per policy, and added latency against calling a worker directly.

Not part of CI (it downloads SMG and takes about two minutes). Run from the repository root with
the package installed (``make install``)::

    .venv/bin/python scripts/compare_smg.py                     # prints the report
    .venv/bin/python scripts/compare_smg.py --write docs/smg-comparison.md

It installs ``smg==1.13.0`` into the scratch venv of ``scripts/record_smg_ring.py`` (``--venv``)
and starts, all on 127.0.0.1: ``--workers`` mock workers
(:mod:`bounded_router.testing.mock_worker`); SMG (``smg launch``) with each of ``--smg-policies``;
this package's Python proxy (``python -m bounded_router.integrations.serve``) with each of its
policies, the hashing ones on ``--hash-ring smg``; and its native gateway (``python -m
bounded_router serve``) with both hashing policies on ``--hash-ring smg``. From that one run it
measures:

* key agreement: ``--keys`` keys, each sent once as ``X-SMG-Routing-Key`` to SMG
  (``consistent_hashing``) and to the proxy and the gateway (``consistent_hashing``, SMG's ring,
  and the proxy on the default XXH64 ring too); the worker that answered is read from the mock's
  ``X-Mock-Worker`` header;
* burst placement: ``--groups`` groups of 8 streaming siblings that share a routing key and a
  prompt prefix, the siblings sent 1 ms apart, one group at a time, through every target; how
  the 8 were spread over the workers (``8:0`` all on one worker, ``6:2``, ...);
* added latency: ``--rounds`` rounds of one small non-streaming completion to every target and to
  a worker directly, in a new random order each round, on keep-alive connections; the median and
  90th percentile of each target's time minus the direct time of the same round.

Every process it starts is stopped by its PID before it exits.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_smg_workers import HEADING as WORKER_API_HEADING  # noqa: E402
from compare_smg_workers import with_section  # noqa: E402
from record_smg_ring import SMG_VERSION, Gateway, routing_keys, smg_executable  # noqa: E402

from bounded_router.simulate.engine import placement_label  # noqa: E402
from bounded_router.simulate.model import CostModel  # noqa: E402
from bounded_router.testing.fleet import ServerProcess, start_mock_worker  # noqa: E402
from bounded_router.testing.mock_worker import make_prompt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "mock-model"
SIBLINGS = 8


class Target:
    """Somewhere to send requests: SMG, the proxy, or a worker."""

    def __init__(self, label: str, url: str) -> None:
        self.label = label
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        return conn

    def complete(self, key: str, prompt: str, max_tokens: int, stream: bool) -> str:
        """Send one completion with ``key``; return the name of the worker that answered it."""
        body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": stream})
        headers = {"Content-Type": "application/json", "X-SMG-Routing-Key": key}
        for attempt in (1, 2):  # a kept-alive connection the server has closed since: once more, on a new one
            conn = self._connection()
            try:
                conn.request("POST", "/v1/completions", body, headers)
                response = conn.getresponse()
                response.read()
                break
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        if response.status != 200:
            raise RuntimeError("%s answered %d for key %r" % (self.label, response.status, key))
        return response.getheader("X-Mock-Worker", "")


def agreement(smg: Target, proxies: Sequence[Target], keys: Sequence[str]) -> List[Tuple[str, int]]:
    """For each proxy, on how many keys it chose the worker SMG chose."""
    chosen = {key: smg.complete(key, "ring probe", 1, False) for key in keys}
    return [(p.label, sum(p.complete(key, "ring probe", 1, False) == chosen[key] for key in keys)) for p in proxies]


def bursts(target: Target, groups: int, workers: int) -> Dict[str, int]:
    """Send ``groups`` bursts of 8 siblings; count the placements."""
    placements: Dict[str, int] = collections.Counter()
    for group in range(groups):
        names: List[str] = []
        errors: List[BaseException] = []

        def sibling(i: int) -> None:
            try:
                names.append(target.complete("group-%d" % group, make_prompt(group, i, 200, 20, tag=target.label.replace(" ", "_")), 50, True))
            except BaseException as e:  # reported after the join
                errors.append(e)

        threads = [threading.Thread(target=sibling, args=(i,)) for i in range(SIBLINGS)]
        for t in threads:
            t.start()
            time.sleep(0.001)  # the siblings' spacing, as the simulator's default workload
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        counts = collections.Counter(names)
        placements[placement_label([counts.get("w%d" % i, 0) for i in range(workers)])] += 1
    return dict(placements)


def latencies(targets: Sequence[Target], direct: Sequence[Target], rounds: int) -> Dict[str, List[float]]:
    """Per target, its time minus the direct time of the same round, in milliseconds."""
    added: Dict[str, List[float]] = {t.label: [] for t in targets}
    for t in list(targets) + list(direct):  # open the kept-alive connections first
        t.complete("warm-up", "hi", 1, False)
    rng = random.Random(5)
    for r in range(rounds):
        order: List[Optional[Target]] = list(targets) + [None]
        rng.shuffle(order)
        times: Dict[Optional[str], float] = {}
        for target in order:
            via = target if target is not None else direct[r % len(direct)]
            start = time.perf_counter()
            via.complete("latency-%d" % rng.randrange(64), "hi", 1, False)
            times[target.label if target is not None else None] = time.perf_counter() - start
        for t in targets:
            added[t.label].append((times[t.label] - times[None]) * 1000.0)
    return added


def quantile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


def start_proxy(urls: List[str], policy: str, extra: Sequence[str]) -> ServerProcess:
    args = ["--port", "0", "--lifetime", "1800", "--policy", policy] + list(extra) + ["--worker-urls"] + urls
    return ServerProcess("proxy (%s)" % policy, "bounded_router.integrations.serve", args)


# What differs by design, written under every report (docs/contract.md has the rules).
DIFFERENCES = """## Differences by design

- `X-SMG-Target-Worker: <index>` indexes the available workers in the **configured order** here
  (the order of `--worker-urls`, then of joins), which is stable across launches; SMG indexes its
  worker registry, whose order changed between two launches with the same flags. The same index
  can name different workers on the two.
- `power_of_two` and `least_load` compare the in-flight loads this router counts (its leases);
  SMG scores load reports it polls from the workers (queued tokens, KV-cache pressure) and
  breaks ties at random, where `least_load` here takes the first tied worker clockwise from the
  routing key (random without a key: docs/contract.md, "Ties by the key").
- `manual` keeps one worker per key and bounds the keys by count (`max_keys`, least recently
  routed forgotten first); SMG keeps two candidates per key (a key returns to its first worker
  when it recovers) and forgets keys idle for `max_idle_secs`. SMG's `min_group` and `delegate`
  assignment modes, and its `bucket`, `prefix_hash` and `passthrough` policies, are refused as not
  implemented.
- `RouterArgs.add_cli_args(parser, use_router_prefix, exclude_host_port)` and `from_cli_args`
  follow SMG 1.13.0: under the prefix, `--worker-urls`, `--host` and `--port` stay unprefixed, a
  prefixed setting left at None reads the unprefixed flag of the same name, and
  `--router-disable-arg-fallback` turns that off (for those three flags too, as in SMG).
- `--routing-key-headers` replaces the default header list as in SMG; an empty list is refused
  here (SMG accepts it and then reads no header)."""


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=40, help="8-sibling bursts per target (default 40)")
    parser.add_argument("--rounds", type=int, default=300, help="latency rounds (default 300)")
    parser.add_argument(
        "--smg-policies", nargs="+", default=["consistent_hashing", "round_robin", "power_of_two", "least_load", "manual"]
    )
    parser.add_argument("--venv", default="/tmp/bounded-router-smg-" + SMG_VERSION, help="scratch venv for smg")
    parser.add_argument("--write", metavar="FILE.md", help="also write the report to this file")
    args = parser.parse_args(argv or None)
    smg = smg_executable(args.venv)

    stop: List[Callable[[], None]] = []
    try:
        workers = []
        for i in range(args.workers):
            workers.append(start_mock_worker("w%d" % i, CostModel(), time_scale=0.05, lifetime=1800))
            stop.append(workers[-1].stop)
        urls = [w.url for w in workers]
        smgs: Dict[str, Target] = {}
        for policy in args.smg_policies:
            gateway = Gateway(smg, urls, policy)
            stop.append(gateway.stop)
            gateway.wait_ready(urls)
            smgs[policy] = Target("smg %s" % policy, gateway.url)
        ours: Dict[str, Target] = {}
        for label, policy, extra in (
            ("consistent_hashing ring=smg", "consistent_hashing", ["--hash-ring", "smg"]),
            ("consistent_hashing ring=xxh64", "consistent_hashing", []),
            ("bounded gap=2 skew=1.5 ring=smg", "bounded_consistent_hashing", ["--hash-ring", "smg"]),
            ("round_robin", "round_robin", []),
            ("random", "random", []),
            ("power_of_two", "power_of_two", []),
            ("least_load", "least_load", []),
            ("manual", "manual", []),
        ):
            proxy = start_proxy(urls, policy, extra)
            stop.append(proxy.stop)
            ours[label] = Target("proxy %s" % label, proxy.url)
        native: Dict[str, Target] = {}
        for label, policy in (("consistent_hashing ring=smg", "consistent_hashing"), ("bounded gap=2 skew=1.5 ring=smg", "bounded_consistent_hashing")):
            gateway_process = ServerProcess(
                "gateway (%s)" % policy, "bounded_router", ["serve", "--port", "0", "--policy", policy, "--hash-ring", "smg", "--worker-urls"] + urls
            )
            stop.append(gateway_process.stop)
            native[label] = Target("gateway %s" % label, gateway_process.url)
        direct = [Target("direct w%d" % i, u) for i, u in enumerate(urls)]

        keys = routing_keys(args.keys)
        compared = [ours["consistent_hashing ring=smg"], native["consistent_hashing ring=smg"], ours["consistent_hashing ring=xxh64"]]
        agree = agreement(smgs["consistent_hashing"], compared, keys)
        burst_targets = (
            list(smgs.values())
            + [t for label, t in ours.items() if label != "consistent_hashing ring=xxh64"]
            + [native["bounded gap=2 skew=1.5 ring=smg"]]
        )
        placements = [(t.label, bursts(t, args.groups, args.workers)) for t in burst_targets]
        latency_targets = [smgs["consistent_hashing"]] + [t for label, t in ours.items() if "ring=smg" in label] + list(native.values())
        added = latencies(latency_targets, direct, args.rounds)
    finally:
        for s in reversed(stop):
            s()

    smg_version = subprocess.run([smg, "--version"], capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    out = ["# SMG and bounded-router side by side", ""]
    out.append(
        "Written by `scripts/compare_smg.py` (its docstring says how it measures), from one run on %s UTC: %s, "
        "commit %s, %d mock workers on 127.0.0.1 (`time_scale` 0.05), %s, %s, %d cores."
        % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), smg_version, commit, args.workers, platform.python_implementation() + " " + platform.python_version(), platform.platform(), os.cpu_count() or 0)
    )  # fmt: skip
    out += ["", "## Key agreement with SMG's `consistent_hashing`", "", "| router | same worker as SMG |", "|---|---|"]
    for label, n in agree:
        out.append("| %s | %d/%d (%.1f%%) |" % (label, n, len(keys), 100.0 * n / len(keys)))
    labels = sorted({k for _, p in placements for k in p}, key=lambda k: [-int(x) for x in k.split(":")])
    out += ["", "## 8-sibling bursts: how each group's 8 siblings were spread", ""]
    out += ["| target | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for label, p in placements:
        out.append("| %s | %s |" % (label, " | ".join(str(p.get(k, 0)) for k in labels)))
    out += ["", "%d groups per target, one at a time; siblings 1 ms apart, 50 output tokens each." % args.groups]
    out += ["", "## Added latency against calling a worker directly", "", "| target | median | p90 |", "|---|---|---|"]
    for label, values in added.items():
        out.append("| %s | %.3f ms | %.3f ms |" % (label, statistics.median(values), quantile(values, 0.9)))
    out += ["", "%d rounds of one non-streaming completion (1 token) per target, keep-alive connections." % args.rounds]
    out += ["", DIFFERENCES]
    report = "\n".join(out) + "\n"
    print(report)
    if args.write:
        if os.path.exists(args.write):  # keep the section scripts/compare_smg_workers.py wrote
            with open(args.write) as f:
                kept = f.read()
            start = kept.find(WORKER_API_HEADING)
            report = report if start < 0 else with_section(report, kept[start:])
        with open(args.write, "w") as f:
            f.write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
