"""Memory of the native gateway hashing large prompts: 32 concurrent 3.9 MB chat bodies with
``--prefix-blocks text`` against the same with the option off.

    .venv/bin/python scripts/prompt_memory.py
    .venv/bin/python scripts/prompt_memory.py --clients 32 --size-mb 3.9 --rounds 3

Starts a mock worker and, in turn for each round, the gateway (``python -m bounded_router serve
--policy cache_aware``) with the option off and on, on 127.0.0.1; sends the bodies at once
(declared ``Content-Length``, under the default ``max_body_size`` of 4 MiB), waits for every
answer, and reads the gateway's peak (VmHWM) and final RSS from /proc. Prints each run and the
ratio of the peaks, on to off; exits non-zero if the median ratio exceeds --max-ratio (1.5, the
target of issue 24). Figures: BENCHMARKS.md, "Prefix blocks in the gateway".
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
from typing import List, Tuple

from bounded_router.simulate.model import CostModel
from bounded_router.testing.fleet import ServerProcess, start_mock_worker, start_proxy
from proxy_memory import status_kib


def chat_body(size: int) -> bytes:
    """An OpenAI chat body of about ``size`` bytes: messages of about 1 KiB each."""
    turn = ("word %d of the conversation " * 36).encode()
    messages, length = [], 0
    while length < size:
        content = (b"%d " % len(messages)) + turn
        messages.append({"role": "user" if len(messages) % 2 else "assistant", "content": content.decode()})
        length += len(content) + 40
    return json.dumps({"model": "m", "max_tokens": 1, "messages": messages}).encode()


def send(address: Tuple[str, int], body: bytes, statuses: List[int]) -> None:
    connection = http.client.HTTPConnection(*address, timeout=120)
    try:
        connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        statuses.append(response.status)
    finally:
        connection.close()


def run(proxy: ServerProcess, body: bytes, clients: int) -> Tuple[float, float, float, List[int]]:
    """(idle, peak, final) RSS in MiB and the statuses of one burst of ``clients`` bodies."""
    pid = proxy.process.pid
    host, port = proxy.url.rsplit("/", 1)[1].rsplit(":", 1)
    idle = status_kib(pid, "VmRSS") / 1024
    statuses: List[int] = []
    threads = [threading.Thread(target=send, args=((host, int(port)), body, statuses)) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return idle, status_kib(pid, "VmHWM") / 1024, status_kib(pid, "VmRSS") / 1024, sorted(statuses)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--size-mb", type=float, default=3.9)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-ratio", type=float, default=1.5)
    args = parser.parse_args()
    body = chat_body(int(args.size_mb * 1e6))
    print("%d clients, bodies of %d bytes" % (args.clients, len(body)))
    ratios = []
    with start_mock_worker("w0", cost=CostModel(prefill_ms_per_token=0.0, decode_ms_per_token=0.0), time_scale=1e-6) as worker:
        for _ in range(args.rounds):
            peaks = {}
            for option in ("off", "text"):
                with start_proxy([worker.url], "cache_aware", flags=["--prefix-blocks", option]) as proxy:
                    idle, peak, final, statuses = run(proxy, body, args.clients)
                peaks[option] = peak
                print("prefix_blocks=%-4s idle %6.1f MiB, peak %6.1f MiB, after %6.1f MiB, statuses %s" % (option, idle, peak, final, sorted(set(statuses))))
            ratios.append(peaks["text"] / peaks["off"])
            print("peak, text / off: %.2f" % ratios[-1])
    median = statistics.median(ratios)
    print("median over %d rounds: %.2f (target <= %.2f)" % (args.rounds, median, args.max_ratio))
    return 0 if median <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
