"""Side-by-side benchmark of the native gateway, SMG's Rust gateway and the Python proxy.

Not part of CI (it takes a few minutes and needs SMG). Run from the repository root with the
package installed (``make install``) and SMG in a scratch virtual environment::

    python3 -m venv /tmp/smg-venv && /tmp/smg-venv/bin/pip install smg==1.13.0
    .venv/bin/python scripts/bench_gateway.py --smg /tmp/smg-venv/bin/smg

It builds ``scripts/bench_gateway_tool.go`` (a fast mock worker and a keep-alive load
generator, in Go so neither is the bottleneck), starts ``--workers`` workers on loopback and,
in front of the same workers:

* ``gateway``: ``python -m bounded_router serve`` (the native gateway, bounded_consistent_hashing);
* with ``--gomaxprocs N``, also ``gateway, GOMAXPROCS=N``: the same gateway with Go's
  ``GOMAXPROCS`` set to N in its environment (on a machine whose cores it shares with the load
  generator and the workers, one processor spends less CPU per request: BENCHMARKS.md,
  "Processors"); the targets are judged on ``gateway``, the default;
* ``smg``: ``smg launch --policy consistent_hashing`` (skipped with a note when ``--smg`` is absent);
* ``python-proxy``: ``python -m bounded_router.integrations.serve`` (FastAPI + httpx);
* ``haproxy``: HAProxy with bounded-load consistent hashing on the routing key (``balance
  hdr(X-SMG-Routing-Key)``, ``hash-type consistent``, ``hash-balance-factor 150``, ``option
  http-no-delay``, ``http-reuse always``);
* ``nginx``: nginx with ``hash $http_x_smg_routing_key consistent``, upstream keep-alive and
  ``proxy_buffering off``;
* ``direct``: the workers themselves, in turn, as the baseline.

HAProxy and nginx are Debian's packages; with ``--install`` the script installs the missing ones
with ``apt-get`` (as root), without it it skips them with a note. Their configurations are
generated in the scratch directory. A second table gives the gateway's figures as ratios to each
other target's.

Every request is a small ``POST /v1/completions`` (8 tokens) with ``X-SMG-Routing-Key`` (64
keys). Measured, with the targets in a new random order in every round:

* added latency: median and p99 of sequential requests on one keep-alive connection per target,
  minus the same quantile calling the workers directly; non-streaming and streaming (SSE, 8
  events). The requests go to every target in turn, one at a time (one of the workers stands for
  the direct calls in each round), so that the machine's changes of pace meet every target alike;
* throughput at concurrency 16 and 64 (keep-alive clients, non-streaming);
* CPU per request: the target's processes' utime + stime (``/proc/PID/stat``) over the
  concurrency-16 runs, divided by their requests.

With ``--profile DIR``, the gateway also serves Go's profiles on its admin listener (``--pprof``)
and, after the measured rounds, the script takes a CPU profile and then an allocation profile of
it, each over ``--profile-seconds`` of load at concurrency 64, into ``DIR/gateway-cpu.pprof`` and
``DIR/gateway-allocs.pprof`` (read them with ``go tool pprof -top``), and prints the top of each.

It prints a Markdown table, the ratios, issue 24's targets with verdicts (``make bench`` prints
them again from BENCHMARKS.md) and, with ``--write BENCHMARKS.md``, puts it in that file between the
markers ``<!-- bench_gateway -->`` and ``<!-- /bench_gateway -->`` (``make bench`` keeps that
section when it rewrites the rest).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Dict, List, Optional, Tuple, Union

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_smg_ring import Gateway as SmgGateway  # noqa: E402  the one way this project launches SMG
from record_smg_ring import free_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")
KEYS = "64"


class Process:
    """A server process; ``url`` is where it listens, ``pid`` its process id."""

    def __init__(self, name: str, argv: List[str], env: Optional[Dict[str, str]] = None) -> None:
        self.name = name
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log, text=True, start_new_session=True, env=None if env is None else dict(os.environ, **env)
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.startswith("metrics listening on "):  # the gateway with --metrics-port says it first
            line = self.proc.stdout.readline()
        if " listening on " not in line:
            self.stop()
            self.log.seek(0)
            raise RuntimeError("%s did not start: %r %s" % (name, line, self.log.read()[-2000:]))
        self.url = line.rsplit(" listening on ", 1)[1].strip()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and its descendants, in seconds."""
    children: Dict[int, List[int]] = {}
    times: Dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        times[int(entry)] = int(fields[11]) + int(fields[12])
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        total += times.get(p, 0)
        stack.extend(children.get(p, []))
    return total / TICK


def wait_http(url: str, timeout: float = 60) -> None:
    """Wait until a completion through ``url`` answers 200."""
    body = b'{"model":"mock-model","prompt":"warm up","max_tokens":1,"stream":false}'
    deadline = time.monotonic() + timeout
    while True:
        try:
            req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json", "X-SMG-Routing-Key": "k"})
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("%s never answered a completion" % url)
        time.sleep(0.5)


def in_turn(tool_path: str, urls: List[str], order: List[str], per_target: int, stream: bool) -> Dict[str, List[float]]:
    """Sequential latencies (s) of each target of ``order``, ``per_target`` requests each, sent one
    to each target in turn so that a change in the machine's state meets every target alike;
    ``urls`` gives each target's URL in the same order."""
    times = tool(tool_path, "seq", ",".join(urls), str(per_target * len(order)), KEYS, "1" if stream else "0").split()
    # The tool's first timed request, after 20 untimed ones, goes to URL 20 % len.
    return {name: [int(v) / 1e6 for v in times[(i - 20) % len(order) :: len(order)]] for i, name in enumerate(order)}


def tool(tool_path: str, *args: str) -> str:
    done = subprocess.run([tool_path] + list(args), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError("bench tool %s failed: %s" % (args, done.stderr[-2000:]))
    return done.stdout.strip()


def quantile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


BEGIN, END = "<!-- bench_gateway -->", "<!-- /bench_gateway -->"


def write_section(path: str, text: str) -> None:
    """Put ``text`` between the markers in ``path``, replacing what was there or appending."""
    with open(path) as f:
        current = f.read()
    section = "%s\n%s\n%s" % (BEGIN, text.strip(), END)
    if BEGIN in current and END in current:
        head, rest = current.split(BEGIN, 1)
        current = head + section + rest.split(END, 1)[1]
    else:
        current = current.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as f:
        f.write(current)


class Configured:
    """A server started from a generated configuration; ready once a completion answers."""

    def __init__(self, name: str, argv: List[str], url: str) -> None:
        self.name, self.url = name, url
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, start_new_session=True)
        try:
            wait_http(url)
        except RuntimeError:
            self.stop()
            self.log.seek(0)
            raise RuntimeError("%s did not start: %s" % (name, self.log.read()[-2000:]))

    pid = Process.pid
    stop = Process.stop


def peer_executable(name: str, install: bool) -> Optional[str]:
    """``name`` on PATH (or in /usr/sbin), installed with apt-get first when allowed."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if found or not install:
        return found
    subprocess.run(["apt-get", "install", "-y", "-qq", name], check=True, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    return shutil.which(name, path="/usr/sbin:/usr/bin")


def haproxy(executable: str, scratch: str, urls: List[str]) -> Configured:
    port = free_port()
    servers = "\n".join("    server w%d %s" % (i, u.split("//", 1)[1]) for i, u in enumerate(urls))
    config = os.path.join(scratch, "haproxy.cfg")
    with open(config, "w") as f:
        f.write(
            "global\n    maxconn 4096\n\ndefaults\n    mode http\n    timeout connect 10s\n    timeout client 600s\n"
            "    timeout server 600s\n    http-reuse always\n\nfrontend proxy\n    bind 127.0.0.1:%d\n    default_backend workers\n\n"
            "backend workers\n    balance hdr(X-SMG-Routing-Key)\n    hash-type consistent\n    hash-balance-factor 150\n"
            "    option http-no-delay\n%s\n" % (port, servers)
        )
    return Configured("haproxy", [executable, "-db", "-f", config], "http://127.0.0.1:%d" % port)


def nginx(executable: str, scratch: str, urls: List[str]) -> Configured:
    port = free_port()
    servers = "".join("        server %s;\n" % u.split("//", 1)[1] for u in urls)
    config = os.path.join(scratch, "nginx.conf")
    with open(config, "w") as f:
        f.write(
            "daemon off;\nworker_processes auto;\npid %s/nginx.pid;\nerror_log %s/nginx-error.log;\n"
            "events { worker_connections 8192; }\nhttp {\n    access_log off;\n    client_body_temp_path %s;\n"
            "    upstream workers {\n        hash $http_x_smg_routing_key consistent;\n%s        keepalive 256;\n    }\n"
            "    server {\n        listen 127.0.0.1:%d;\n        location / {\n            proxy_pass http://workers;\n"
            "            proxy_http_version 1.1;\n            proxy_set_header Connection \"\";\n            proxy_buffering off;\n"
            "        }\n    }\n}\n" % (scratch, scratch, scratch, servers, port)
        )
    return Configured("nginx", [executable, "-c", config, "-p", scratch], "http://127.0.0.1:%d" % port)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smg", default=shutil.which("smg"), help="the smg executable (pip install smg==1.13.0); default: smg on PATH")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=20, help="rounds of the latency measurement (default: %(default)s)")
    parser.add_argument("--per-round", type=int, default=50, help="sequential requests per target, mode and round (default: %(default)s)")
    parser.add_argument("--throughput-rounds", type=int, default=3, help="rounds of the throughput measurement (default: %(default)s)")
    parser.add_argument("--requests", type=int, default=20000, help="requests per throughput run; a tenth for the Python proxy (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--gomaxprocs", type=int, metavar="N", help="also measure the gateway with GOMAXPROCS=N (see above)")
    parser.add_argument("--install", action="store_true", help="apt-get install haproxy and nginx when missing (as root)")
    parser.add_argument("--profile", metavar="DIR", help="write the gateway's CPU and allocation profiles under load into DIR (see above)")
    parser.add_argument("--profile-seconds", type=int, default=10, help="seconds of load each profile covers (default: %(default)s)")
    parser.add_argument("--write", metavar="BENCHMARKS.md", help="also put the table in this file (see above)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    scratch = tempfile.mkdtemp(prefix="bench-gateway-")
    tool_path = os.path.join(scratch, "bench_gateway_tool")
    subprocess.run([os.environ.get("GO", "go"), "build", "-o", tool_path, os.path.join(ROOT, "scripts", "bench_gateway_tool.go")], check=True, cwd=ROOT)

    processes: List[Union[Process, Configured, SmgGateway]] = []
    try:
        workers = [Process("worker %d" % i, [tool_path, "worker"]) for i in range(args.workers)]
        processes += workers
        urls = [w.url for w in workers]
        targets: Dict[str, Tuple[str, Optional[int]]] = {"direct": (",".join(urls), None)}
        admin_port = free_port()
        profiling = ["--metrics-port", str(admin_port), "--pprof"] if args.profile else []
        serve = [sys.executable, "-m", "bounded_router", "serve", "--port", "0", "--worker-urls"] + urls
        gateway = Process("gateway", serve + profiling)
        processes.append(gateway)
        targets["gateway"] = (gateway.url, gateway.pid)
        if args.gomaxprocs is not None:
            name = "gateway, GOMAXPROCS=%d" % args.gomaxprocs
            variant = Process(name, serve, env={"GOMAXPROCS": str(args.gomaxprocs)})
            processes.append(variant)
            targets[name] = (variant.url, variant.pid)
        proxy = Process("python-proxy", [sys.executable, "-m", "bounded_router.integrations.serve", "--port", "0", "--worker-urls"] + urls)
        processes.append(proxy)
        targets["python-proxy"] = (proxy.url, proxy.pid)
        smg_note = ""
        if args.smg:
            smg = SmgGateway(args.smg, urls)
            processes.append(smg)
            wait_http(smg.url)
            smg_note = subprocess.run([args.smg, "--version"], capture_output=True, text=True).stdout.strip()
            targets["smg"] = (smg.url, smg.process.pid)
        else:
            smg_note = "not measured: no smg executable (pass --smg)"
        peer_notes = []
        for peer, start in (("haproxy", haproxy), ("nginx", nginx)):
            executable = peer_executable(peer, args.install)
            if executable is None:
                peer_notes.append("%s not measured: not installed (pass --install)" % peer)
                continue
            server = start(executable, scratch, urls)
            processes.append(server)
            targets[peer] = (server.url, server.pid)
            version = subprocess.run([executable, "-v"], capture_output=True, text=True)
            peer_notes.append((version.stdout or version.stderr).strip().splitlines()[0])
        for name, (url, _) in targets.items():
            wait_http(url.split(",")[0])

        names = list(targets)
        latency: Dict[Tuple[str, bool], List[float]] = {(n, s): [] for n in names for s in (False, True)}
        for r in range(args.rounds):
            order = names[:]
            rng.shuffle(order)
            # The workers are called directly one after the other.
            urls_in_turn = [urls[r % len(urls)] if name == "direct" else targets[name][0] for name in order]
            for stream in (False, True):
                for name, seconds in in_turn(tool_path, urls_in_turn, order, args.per_round, stream).items():
                    latency[(name, stream)] += seconds

        throughput: Dict[Tuple[str, int], List[float]] = {(n, c): [] for n in names for c in (16, 64)}
        cpu: Dict[str, List[float]] = {n: [] for n in names}
        for _ in range(args.throughput_rounds):
            order = names[:]
            rng.shuffle(order)
            for name in order:
                url, pid = targets[name]
                n = args.requests // 10 if name == "python-proxy" else args.requests
                for concurrency in (16, 64):
                    before = cpu_seconds(pid) if pid else 0.0
                    rate, failed = tool(tool_path, "conc", url, str(n), str(concurrency), KEYS).split()
                    if int(failed):
                        print("warning: %s: %s of %d requests failed at concurrency %d" % (name, failed, n, concurrency), file=sys.stderr)
                    throughput[(name, concurrency)].append(float(rate))
                    if pid and concurrency == 16:
                        cpu[name].append((cpu_seconds(pid) - before) / (n + concurrency) * 1000)
        if args.profile:
            profile(tool_path, gateway.url, "http://127.0.0.1:%d" % admin_port, args.profile, args.profile_seconds)
    finally:
        for p in reversed(processes):
            p.stop()
        shutil.rmtree(scratch, ignore_errors=True)

    def added(name: str, stream: bool, q: float) -> str:
        value = quantile(latency[(name, stream)], q) - quantile(latency[("direct", stream)], q)
        return "%+.2f ms" % value

    lines = [
        "## The gateway against SMG, the Python proxy, HAProxy and nginx (issues 14, 24)",
        "",
        "`%s` on %s (%d workers from `scripts/bench_gateway_tool.go` on loopback; %d rounds x %d "
        "sequential requests per target and mode, sent to the targets in turn, %d throughput rounds of %d "
        "requests, targets interleaved in a new order every round; SMG: %s). Added latency: the quantile through the "
        "target minus the same quantile calling the workers directly. CPU per request: the target's "
        "processes' utime + stime over the concurrency-16 runs. Peers: %s."
        % (" ".join(["python", "scripts/bench_gateway.py"] + sys.argv[1:]), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           args.workers, args.rounds, args.per_round, args.throughput_rounds, args.requests, smg_note, "; ".join(peer_notes)),
        "",
        "| target | added median | added p99 | added median, streaming | added p99, streaming | req/s at c=16 | req/s at c=64 | CPU per request |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for name in names:
        if name == "direct":
            row = ["direct (baseline: %.2f / %.2f ms, streaming %.2f / %.2f ms)" % (
                quantile(latency[(name, False)], 0.5), quantile(latency[(name, False)], 0.99),
                quantile(latency[(name, True)], 0.5), quantile(latency[(name, True)], 0.99))]  # fmt: skip
            row += ["-"] * 4
        else:
            row = [name, added(name, False, 0.5), added(name, False, 0.99), added(name, True, 0.5), added(name, True, 0.99)]
        row += ["%.0f" % statistics.median(throughput[(name, c)]) for c in (16, 64)]
        row.append("%.3f ms" % statistics.median(cpu[name]) if cpu[name] else "-")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "The gateway's figures as ratios to each other target's (below 1: the gateway adds less, or spends less; above 1 for req/s: it serves more):", ""]
    for subject in (n for n in names if n.startswith("gateway")):
        lines += ratio_table(names, subject, latency, throughput, cpu) + [""]
    lines += [TARGETS, ""] + targets_table(names, latency, throughput, cpu)
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(args.write, text)
        print("wrote the section in %s" % args.write)
    return 0


def profile(tool_path: str, url: str, admin_url: str, directory: str, seconds: int) -> None:
    """Take the gateway's CPU profile, then its allocation profile, each over ``seconds`` of load
    at concurrency 64, into ``directory``, and print the top of each."""
    os.makedirs(directory, exist_ok=True)
    for kind, sample in (("profile", "cpu"), ("allocs", "alloc_space")):
        path = os.path.join(directory, "gateway-%s.pprof" % ("cpu" if kind == "profile" else kind))
        taken = threading.Thread(target=fetch_to, args=("%s/debug/pprof/%s?seconds=%d" % (admin_url, kind, seconds), path, seconds + 30))
        taken.start()
        while taken.is_alive():
            tool(tool_path, "conc", url, "5000", "64", KEYS)
        taken.join()
        top = subprocess.run([os.environ.get("GO", "go"), "tool", "pprof", "-top", "-nodecount=30", "-sample_index=" + sample, path], capture_output=True, text=True)
        print("%s (%s):\n%s" % (path, sample, top.stdout or top.stderr), file=sys.stderr)


def fetch_to(url: str, path: str, timeout: float) -> None:
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=timeout) as r, open(path, "wb") as f:
        shutil.copyfileobj(r, f)


TARGETS = "### Targets (issue 24)"


def targets_table(names: List[str], latency: Dict[Tuple[str, bool], List[float]], throughput: Dict[Tuple[str, int], List[float]], cpu: Dict[str, List[float]]) -> List[str]:
    """Issue 24's targets for the gateway, against HAProxy and SMG of the same run, with verdicts."""
    def added(name: str, stream: bool, q: float) -> float:
        return quantile(latency[(name, stream)], q) - quantile(latency[("direct", stream)], q)

    def verdict(ok: bool) -> str:
        return "met" if ok else "**not met**"

    rows = ["| target | goal | measured | |", "|---|---|---|---|"]
    if "haproxy" in names:
        for label, gateway, peer, limit in (
            ("CPU per request", statistics.median(cpu["gateway"]), statistics.median(cpu["haproxy"]), 1.5),
            ("added median", added("gateway", False, 0.5), added("haproxy", False, 0.5), 1.5),
            ("added p99", added("gateway", False, 0.99), added("haproxy", False, 0.99), 2.0),
        ):
            if min(peer, gateway) > 0:
                rows.append("| %s against HAProxy | ≤ %.1fx | %.2fx | %s |" % (label, limit, gateway / peer, verdict(gateway <= limit * peer)))
            else:  # an added latency at or below 0: the direct baseline's quantile was the higher one
                rows.append("| %s against HAProxy | ≤ %.1fx | the gateway's is %.3f ms, HAProxy's %.3f ms: no ratio (noise) | |" % (label, limit, gateway, peer))
        rate = statistics.median(throughput[("gateway", 64)]) / statistics.median(throughput[("haproxy", 64)])
        rows.append("| req/s at c=64 against HAProxy | ≥ 0.7x | %.2fx | %s |" % (rate, verdict(rate >= 0.7)))
    if "smg" in names:
        # An added latency at or below 0 is noise (the direct baseline's quantile was the higher one): not compared.
        costs = [(what, ours, theirs) for what, ours, theirs in (
            ("added median", added("gateway", False, 0.5), added("smg", False, 0.5)),
            ("added p99", added("gateway", False, 0.99), added("smg", False, 0.99)),
            ("added median, streaming", added("gateway", True, 0.5), added("smg", True, 0.5)),
            ("added p99, streaming", added("gateway", True, 0.99), added("smg", True, 0.99)),
        )]
        noise = [what for what, ours, theirs in costs if min(ours, theirs) <= 0]
        costs = [c for c in costs if c[0] not in noise] + [("CPU per request", statistics.median(cpu["gateway"]), statistics.median(cpu["smg"]))]
        behind = [what for what, ours, theirs in costs if ours > theirs]
        behind += ["req/s at c=%d" % c for c in (16, 64) if statistics.median(throughput[("gateway", c)]) < statistics.median(throughput[("smg", c)])]
        measured = "behind on " + ", ".join(behind) if behind else "ahead on every column"
        if noise:
            measured += " (not compared, an added latency at or below 0: %s)" % ", ".join(noise)
        rows.append("| ahead of SMG | every column | %s | %s |" % (measured, verdict(not behind)))
    return rows


def targets_text(markdown: str) -> str:
    """The targets table of the section this script wrote in ``markdown`` (for ``make bench``)."""
    if TARGETS not in markdown:
        return "gateway targets (issue 24): not measured (run scripts/bench_gateway.py --write BENCHMARKS.md)"
    table = markdown.split(TARGETS, 1)[1].split(END, 1)[0].strip().split("\n\n", 1)[0]
    return "gateway targets (issue 24), from the last run of scripts/bench_gateway.py:\n" + table


def ratio_table(
    names: List[str], subject: str, latency: Dict[Tuple[str, bool], List[float]], throughput: Dict[Tuple[str, int], List[float]], cpu: Dict[str, List[float]]
) -> List[str]:
    """The subject's figures as ratios to every other target's but the baseline's and the other
    gateway rows'."""

    def added(name: str, q: float) -> float:
        return quantile(latency[(name, False)], q) - quantile(latency[("direct", False)], q)

    rows = ["| %s against | added median | added p99 | req/s at c=64 | CPU per request |" % subject, "|---|---|---|---|---|"]
    for name in names:
        if name == "direct" or name.startswith("gateway"):
            continue
        cells = ["%.2fx" % (added(subject, q) / added(name, q)) if min(added(name, q), added(subject, q)) > 0 else "-" for q in (0.5, 0.99)]
        cells.append("%.2fx" % (statistics.median(throughput[(subject, 64)]) / statistics.median(throughput[(name, 64)])))
        cells.append("%.2fx" % (statistics.median(cpu[subject]) / statistics.median(cpu[name])) if cpu[name] and cpu[subject] else "-")
        rows.append("| %s | %s |" % (name, " | ".join(cells)))
    return rows


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(main())
