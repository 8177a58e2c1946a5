"""Record SMG's consistent_hashing ring from the real gateway: the worker it picks for each key.

Not part of CI (it downloads SMG and takes about a minute). Run from the repository root with
the package installed (``make install``)::

    .venv/bin/python scripts/record_smg_ring.py                # 2, 4 and 8 workers, 1,000 keys each
    .venv/bin/python scripts/record_smg_ring.py --keys 2000 --workers 3 5

It creates a scratch virtual environment (``--venv``, default ``/tmp/bounded-router-smg-1.13.0``,
reused when it already runs ``smg 1.13.0``) and installs ``smg==1.13.0`` into it with pip. For
each fleet size it starts that many mock workers
(:mod:`bounded_router.testing.mock_worker`, which SMG registers as SGLang workers) and
``smg launch --policy consistent_hashing`` in front of them, all on 127.0.0.1; waits until
SMG's ``GET /workers`` lists every worker ready and healthy; sends each key once as
``X-SMG-Routing-Key`` on a ``POST /v1/completions``; and reads which worker answered from the
mock's ``X-Mock-Worker`` header, checked against SMG's own ``X-SMG-Routed-Worker-Id``. The
observed table goes to ``tests/testdata/smg_ring_<n>.json`` (``--out``)::

    {"recorded_by": "scripts/record_smg_ring.py", "smg_version": "smg 1.13.0",
     "policy": "consistent_hashing", "worker_urls": [...], "routes": {"<key>": "<worker URL>", ...}}

The keys are the same every run (seeded): ``session-<n>``, UUID-like hex strings and random
visible-ASCII strings of 1 to 128 bytes (SMG ignores a routing key longer than 128 bytes). The
worker URLs are new every run (free ports), so each file carries its own.

Finally it prints the live agreement: the share of keys that a router with
``hash_ring="smg"`` (and, for contrast, the default ``"xxh64"``) sends to the worker SMG chose.
``tests/python/test_smg_ring.py`` and ``core/smg_ring_test.go`` check the recorded files in CI,
without SMG. Every process it starts is stopped by its PID before it exits.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import string
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence, Tuple

from bounded_router import ConsistentHashingConfig, Router
from bounded_router.testing.fleet import ServerProcess, start_mock_worker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMG_VERSION = "1.13.0"
MODEL = "mock-model"
# SMG's cap on X-SMG-Routing-Key (model_gateway/src/routers/common/header_utils.rs).
MAX_KEY_BYTES = 128


def routing_keys(count: int, seed: int = 12) -> List[str]:
    """``count`` distinct keys, the same for the same seed."""
    rng = random.Random(seed)
    visible = string.ascii_letters + string.digits + string.punctuation
    keys: List[str] = []
    seen = set()
    while len(keys) < count:
        kind = len(keys) % 3
        if kind == 0:
            key = "session-%d" % rng.randrange(10**9)
        elif kind == 1:
            key = "%032x" % rng.getrandbits(128)
        else:
            key = "".join(rng.choice(visible) for _ in range(rng.randint(1, MAX_KEY_BYTES)))
        if key not in seen:
            seen.add(key)
            keys.append(key)
    return keys


def smg_executable(venv: str) -> str:
    """``smg`` from the scratch venv, installed there first unless it is already the right version."""
    smg = os.path.join(venv, "bin", "smg")
    if os.path.exists(smg) and _version(smg) == "smg " + SMG_VERSION:
        return smg
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--quiet", "smg==" + SMG_VERSION], check=True)
    if _version(smg) != "smg " + SMG_VERSION:
        raise RuntimeError("%s --version does not print smg %s" % (smg, SMG_VERSION))
    return smg


def _version(smg: str) -> str:
    return subprocess.run([smg, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Gateway:
    """``smg launch --policy POLICY`` on 127.0.0.1 in front of ``worker_urls``."""

    def __init__(self, smg: str, worker_urls: Sequence[str], policy: str = "consistent_hashing") -> None:
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log = tempfile.TemporaryFile(mode="w+", prefix="smg-")
        argv = [smg, "launch", "--host", "127.0.0.1", "--port", str(self.port),
                "--policy", policy, "--log-level", "warn",
                "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
                "--shutdown-grace-period-secs", "0", "--worker-urls"] + list(worker_urls)  # fmt: skip
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)

    def get_json(self, path: str) -> object:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return json.loads(response.read())
        finally:
            conn.close()

    def wait_ready(self, worker_urls: Sequence[str], timeout: float = 120.0) -> None:
        """Wait until GET /workers lists exactly these workers, every one ready and healthy."""
        deadline = time.monotonic() + timeout
        listed: object = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("smg exited with status %s: %s" % (self.process.returncode, self.output()))
            try:
                listed = self.get_json("/workers")
            except (OSError, ValueError):
                listed = None
            workers = listed.get("workers", []) if isinstance(listed, dict) else []
            if sorted(w.get("url") for w in workers) == sorted(worker_urls) and all(
                w.get("is_healthy") and w.get("status") == "ready" for w in workers
            ):
                return
            time.sleep(0.2)  # polling a process we do not control: it offers no readiness signal
        raise RuntimeError("smg did not register %s within %gs; last /workers: %s\n%s" % (worker_urls, timeout, listed, self.output()))

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def record(smg: str, n: int, keys: Sequence[str]) -> Tuple[List[str], Dict[str, str]]:
    """Start n mock workers and SMG; return the worker URLs and the worker SMG chose per key."""
    workers: List[ServerProcess] = []
    gateway = None
    try:
        for i in range(n):
            workers.append(start_mock_worker("w%d" % i, time_scale=0.001, lifetime=600))
        by_name = {"w%d" % i: w.url for i, w in enumerate(workers)}
        urls = list(by_name.values())
        gateway = Gateway(smg, urls)
        gateway.wait_ready(urls)
        routes: Dict[str, str] = {}
        conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
        try:
            for key in keys:
                body = json.dumps({"model": MODEL, "prompt": "ring probe", "max_tokens": 1, "stream": False})
                conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json", "X-SMG-Routing-Key": key})
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    raise RuntimeError("key %r: smg answered %d\n%s" % (key, response.status, gateway.output()))
                answered = by_name[response.getheader("X-Mock-Worker", "")]
                if response.getheader("X-SMG-Routed-Worker-Id") != answered:
                    raise RuntimeError("key %r: SMG says %s, the worker %s" % (key, response.getheader("X-SMG-Routed-Worker-Id"), answered))
                routes[key] = answered
        finally:
            conn.close()
        return urls, routes
    finally:
        if gateway is not None:
            gateway.stop()
        for w in workers:
            w.stop()


def agreement(worker_urls: List[str], routes: Dict[str, str], hash_ring: str) -> int:
    """How many keys of ``routes`` a router with ``hash_ring`` sends to the worker SMG chose."""
    with Router(worker_urls, ConsistentHashingConfig(hash_ring=hash_ring)) as router:
        return sum(router.select(routing_key=key).worker_url == url for key, url in routes.items())


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8], help="fleet sizes (default 2 4 8)")
    parser.add_argument("--keys", type=int, default=1000, help="keys per fleet (default 1000)")
    parser.add_argument("--venv", default="/tmp/bounded-router-smg-" + SMG_VERSION, help="scratch venv for smg")
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "testdata"), help="where smg_ring_<n>.json go")
    args = parser.parse_args(argv or None)
    smg = smg_executable(args.venv)
    keys = routing_keys(args.keys)
    print("%s, policy consistent_hashing, %d keys per fleet" % (_version(smg), len(keys)))
    print("workers | agreement hash_ring=smg | agreement hash_ring=xxh64 | file")
    failed = False
    for n in args.workers:
        urls, routes = record(smg, n, keys)
        table = {
            "recorded_by": "scripts/record_smg_ring.py",
            "smg_version": _version(smg),
            "policy": "consistent_hashing",
            "worker_urls": urls,
            "routes": routes,
        }
        path = os.path.join(args.out, "smg_ring_%d.json" % n)
        with open(path, "w") as f:
            json.dump(table, f, indent=1)
            f.write("\n")
        smg_agree, xxh_agree = agreement(urls, routes, "smg"), agreement(urls, routes, "xxh64")
        failed = failed or smg_agree != len(keys)
        print("%7d | %d/%d (%.1f%%) | %d/%d (%.1f%%) | %s" % (
            n, smg_agree, len(keys), 100.0 * smg_agree / len(keys),
            xxh_agree, len(keys), 100.0 * xxh_agree / len(keys), os.path.relpath(path, ROOT)))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
