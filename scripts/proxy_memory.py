"""Memory of the routing proxy under large uploads: four concurrent 50 MB request bodies.

    .venv/bin/python scripts/proxy_memory.py                 # declared (Content-Length) and chunked
    .venv/bin/python scripts/proxy_memory.py --size-mib 100 --clients 8

Starts a mock worker and, in turn, each proxy process -- the native gateway (``python -m
bounded_router serve``) and the Python one (``python -m bounded_router.integrations.serve``),
default limits (``max_body_size`` 4 MiB) -- on 127.0.0.1, reads the proxy's resident set size
when idle, then sends the uploads at once, twice: with a declared ``Content-Length`` (refused
before the body is read) and chunked (read up to the limit, then refused). Prints the status
each upload got and each proxy's idle, peak (VmHWM) and final RSS; exits non-zero if a peak
exceeds idle by more than --limit-mib (default 50).
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
from typing import List

from bounded_router.testing.fleet import ServerProcess, start_mock_worker, start_proxy

CHUNK = b"x" * (1 << 20)


def status_kib(pid: int, field: str) -> int:
    with open("/proc/%d/status" % pid) as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError("no %s in /proc/%d/status" % (field, pid))


def upload(address: tuple, size_mib: int, chunked: bool, statuses: List[int]) -> None:
    """Send one upload of ``size_mib`` MiB as fast as the proxy takes it; record the status."""
    with socket.create_connection(address, timeout=60) as sock:
        framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % (size_mib << 20)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: proxy\r\n%s\r\n\r\n" % framing)
        try:
            for _ in range(size_mib):
                sock.sendall(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK) if chunked else CHUNK)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # refused and closed before the whole body was sent
        answer = sock.recv(64)
        statuses.append(int(answer.split(b" ")[1]) if answer.startswith(b"HTTP/") else 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--size-mib", type=int, default=50)
    parser.add_argument("--limit-mib", type=float, default=50.0)
    args = parser.parse_args()
    failed = False
    with start_mock_worker("w0") as worker:
        for native in (True, False):
            with start_proxy([worker.url], "bounded_consistent_hashing", native=native) as proxy:
                failed |= measure(proxy, "gateway" if native else "python serve", args)
    return 1 if failed else 0


def measure(proxy: ServerProcess, name: str, args: argparse.Namespace) -> bool:
    """Send the uploads through ``proxy``, print what happened; True if memory grew too much."""
    pid = proxy.process.pid
    host, port = proxy.url.rsplit("/", 1)[1].rsplit(":", 1)
    idle = status_kib(pid, "VmRSS")
    for chunked in (False, True):
        statuses: List[int] = []
        threads = [
            threading.Thread(target=upload, args=((host, int(port)), args.size_mib, chunked, statuses))
            for _ in range(args.clients)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        how = "chunked" if chunked else "declared"
        print("%s: %d uploads of %d MiB, %s length: statuses %s" % (name, args.clients, args.size_mib, how, sorted(statuses)))
    peak, final = status_kib(pid, "VmHWM"), status_kib(pid, "VmRSS")
    growth = (peak - idle) / 1024
    print("%s RSS: idle %.1f MiB, peak %.1f MiB (+%.1f), after %.1f MiB" % (name, idle / 1024, peak / 1024, growth, final / 1024))
    if growth > args.limit_mib:
        print("FAIL: %s's peak exceeds idle by more than %.0f MiB" % (name, args.limit_mib))
    return growth > args.limit_mib

if __name__ == "__main__":
    sys.exit(main())
