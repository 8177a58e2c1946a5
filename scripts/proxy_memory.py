"""Memory of the routing proxy under large uploads: four concurrent 50 MB request bodies.

    .venv/bin/python scripts/proxy_memory.py                 # declared (Content-Length) and chunked
    .venv/bin/python scripts/proxy_memory.py --size-mib 100 --clients 8

Starts a mock worker and ``python -m bounded_router.integrations.serve`` (default limits:
``max_body_size`` 4 MiB) on 127.0.0.1, reads the proxy's resident set size when idle, then sends
the uploads at once, twice: with a declared ``Content-Length`` (refused before the body is read)
and chunked (read up to the limit, then refused). Prints the status each upload got and the
proxy's idle, peak (VmHWM) and final RSS; exits non-zero if the peak exceeds idle by more than
--limit-mib (default 50).
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
from typing import Dict, List

from bounded_router.testing.fleet import start_mock_worker, start_proxy

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
    with start_mock_worker("w0") as worker, start_proxy([worker.url], "bounded_consistent_hashing") as proxy:
        pid = proxy.process.pid
        host, port = proxy.url.rsplit("/", 1)[1].rsplit(":", 1)
        idle = status_kib(pid, "VmRSS")
        results: Dict[str, List[int]] = {}
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
            results["chunked" if chunked else "declared"] = statuses
        peak, final = status_kib(pid, "VmHWM"), status_kib(pid, "VmRSS")
    for how, statuses in results.items():
        print("%d uploads of %d MiB, %s length: statuses %s" % (args.clients, args.size_mib, how, sorted(statuses)))
    growth = (peak - idle) / 1024
    print("proxy RSS: idle %.1f MiB, peak %.1f MiB (+%.1f), after %.1f MiB" % (idle / 1024, peak / 1024, growth, final / 1024))
    if growth > args.limit_mib:
        print("FAIL: the peak exceeds idle by more than %.0f MiB" % args.limit_mib)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
