"""What the prefix block helpers cost from Python, and what the proxies' body parsing costs by
body size (BENCHMARKS.md, "Prefix blocks"): the figures behind INLINE_BODY_LIMIT.

    python scripts/bench_prefix_blocks.py

Each figure is the median of 9 rounds of the best of 5 calls (the machine is shared).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any, Callable, List

from bounded_router import prefix_blocks, text_prefix_blocks
from bounded_router.integrations._prompt import body_prefix_blocks

ROUNDS = 9
CALLS = 5


def median_best(call: Callable[[], Any]) -> float:
    """Seconds: the median over rounds of the fastest of CALLS calls."""
    rounds = []
    for _ in range(ROUNDS):
        best = float("inf")
        for _ in range(CALLS):
            start = time.perf_counter()
            call()
            best = min(best, time.perf_counter() - start)
        rounds.append(best)
    return statistics.median(rounds)


def chat_body(size: int) -> bytes:
    """An OpenAI chat body of about ``size`` bytes: messages of about 1 KiB each."""
    messages: List[Any] = []
    while True:
        turn = len(messages)
        messages.append({"role": "user" if turn % 2 else "assistant", "content": ("word %d of the conversation " % turn) * 36})
        body = json.dumps({"model": "m", "messages": messages}).encode()
        if len(body) >= size:
            return body


async def thread_round_trip() -> float:
    """Seconds for asyncio.to_thread of a function that does nothing (the offload's own cost)."""

    async def once() -> None:
        await asyncio.to_thread(lambda: None)

    rounds = []
    for _ in range(ROUNDS):
        best = float("inf")
        for _ in range(CALLS):
            start = time.perf_counter()
            await once()
            best = min(best, time.perf_counter() - start)
        rounds.append(best)
    return statistics.median(rounds)


def main() -> None:
    print("| input | blocks | time |")
    print("|---|--:|--:|")
    for tokens in (1024, 16384, 131072):
        ids = list(range(tokens))
        t = median_best(lambda: prefix_blocks(ids))
        print("| prefix_blocks, %d tokens | %d | %.1f µs |" % (tokens, tokens // 16, t * 1e6))
    for size in (4096, 65536, 1 << 20):
        text = "x" * size
        t = median_best(lambda: text_prefix_blocks(text))
        print("| text_prefix_blocks, %d bytes | %d | %.1f µs |" % (size, size // 64, t * 1e6))
    for size in (4096, 16384, 65536, 262144, 1 << 20, 4 << 20):
        body = chat_body(size)
        blocks = body_prefix_blocks(body, 64) or []
        t = median_best(lambda: body_prefix_blocks(body, 64))
        print("| chat body, %d bytes (parse + text + hash) | %d | %.1f µs |" % (len(body), len(blocks), t * 1e6))
    print("| asyncio.to_thread round trip | - | %.1f µs |" % (asyncio.run(thread_round_trip()) * 1e6))


if __name__ == "__main__":
    main()
