"""The worker and workload model shared by the simulator and the mock inference worker.

A worker serves streaming completions with one prefill engine and unbounded decode:

* **Prefix cache.** Prompts are cut into blocks of ``block_size`` tokens; a block is identified
  by the whole prompt prefix up to its end (a hash chain, as vLLM and SGLang key their caches),
  so a block hits only if every token before it matches too. The cache is an LRU of those
  blocks holding at most ``cache_tokens`` tokens per worker.
* **Prefill.** Requests wait in one FIFO queue per worker. When a request's prefill starts, its
  longest cached prefix is looked up; it computes the remaining tokens at
  ``prefill_ms_per_token`` (plus ``prefill_overhead_ms``), then its blocks enter the cache. A
  request queued behind a sibling therefore reuses the prefix the sibling just computed.
  Time to first token = queueing + prefill of the uncached tokens.
* **Decode.** After prefill a request streams its output tokens at ``decode_ms_per_token`` each,
  independently of the other requests (a fixed rate, as with continuous batching far from
  saturation). The request holds its router lease from arrival until its last token.

A workload is ``groups`` groups of ``siblings`` streaming requests; the siblings of a group share
a prompt prefix of ``shared_prefix_tokens`` tokens followed by ``own_tokens`` tokens of their own,
carry the routing key ``group-<n>``, and are sent one after another ``sibling_interval_ms``
apart. Groups arrive either in a closed loop (``concurrency`` groups in flight; a group starts
when one has finished) or in an open loop (Poisson arrivals at ``rate`` groups per second).

Calibration of the defaults against the upstream two-worker A/B (see docs/ab-reproduction.md):
with the siblings of a group on one worker, the first sibling computes its whole prompt and the
seven others only their own tokens, so the cached-token fraction is 7/8 x shared/prompt; a shared
prefix of 1,760 tokens out of 2,048 gives 75.2% (upstream 75.5%). Prefill at 1 ms per token puts
the strict mean time to first token at 2,048 + 3.5 x 288 = 3,056 ms (upstream 3,087 ms), and 1,024
output tokens at 20 ms make a group last about 24.5 s, where upstream's 2.1-2.4% throughput gain
for a ~570 ms shorter group fits.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

__all__ = ["CostModel", "Workload", "PrefixCache", "text_block_keys"]


def _check_number(name: str, value: Any, minimum: float, strict: bool = False, integer: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise ValueError("%s must be %s, got %r" % (name, "an integer" if integer else "a number", value))
    if not math.isfinite(value) or value < minimum or (strict and value == minimum):
        raise ValueError("%s must be %s %s, got %r" % (name, ">" if strict else ">=", minimum, value))


@dataclass(frozen=True)
class CostModel:
    """What a worker costs: prefill and decode times and the size of its prefix cache.

    Attributes:
        prefill_ms_per_token: prefill time per uncached prompt token.
        prefill_overhead_ms: fixed time added to every prefill.
        decode_ms_per_token: time per output token (the stream's rate).
        block_size: tokens per prefix-cache block (only whole blocks are cached).
        cache_tokens: prefix-cache capacity of one worker, in tokens.
    """

    prefill_ms_per_token: float = 1.0
    prefill_overhead_ms: float = 0.0
    decode_ms_per_token: float = 20.0
    block_size: int = 16
    cache_tokens: int = 262144

    def __post_init__(self) -> None:
        _check_number("prefill_ms_per_token", self.prefill_ms_per_token, 0.0)
        _check_number("prefill_overhead_ms", self.prefill_overhead_ms, 0.0)
        _check_number("decode_ms_per_token", self.decode_ms_per_token, 0.0)
        _check_number("block_size", self.block_size, 1, integer=True)
        _check_number("cache_tokens", self.cache_tokens, 0, integer=True)

    def prefill_ms(self, uncached_tokens: int) -> float:
        """Prefill time of a request with ``uncached_tokens`` tokens to compute."""
        return self.prefill_overhead_ms + uncached_tokens * self.prefill_ms_per_token

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @staticmethod
    def add_arguments(parser: Any) -> None:
        """Add ``--prefill-ms-per-token`` ... ``--cache-tokens`` to an argparse parser or group."""
        c = CostModel()
        parser.add_argument("--prefill-ms-per-token", type=float, default=c.prefill_ms_per_token)
        parser.add_argument("--prefill-overhead-ms", type=float, default=c.prefill_overhead_ms)
        parser.add_argument("--decode-ms-per-token", type=float, default=c.decode_ms_per_token)
        parser.add_argument("--block-size", type=int, default=c.block_size, help="prefix-cache block, tokens")
        parser.add_argument("--cache-tokens", type=int, default=c.cache_tokens, help="prefix-cache capacity per worker, tokens")

    @classmethod
    def from_args(cls, args: Any) -> CostModel:
        """The cost model of arguments parsed with :meth:`add_arguments`."""
        return cls(
            prefill_ms_per_token=args.prefill_ms_per_token,
            prefill_overhead_ms=args.prefill_overhead_ms,
            decode_ms_per_token=args.decode_ms_per_token,
            block_size=args.block_size,
            cache_tokens=args.cache_tokens,
        )


@dataclass(frozen=True)
class Workload:
    """Groups of sibling requests sharing a prompt prefix (the upstream A/B by default).

    Attributes:
        workers: number of workers.
        groups: number of groups.
        siblings: requests per group (one routing key per group).
        shared_prefix_tokens: prompt tokens shared by the siblings of a group.
        own_tokens: prompt tokens unique to each sibling (after the shared prefix).
        output_tokens: tokens each request streams back.
        sibling_interval_ms: time between two siblings of a group being sent.
        concurrency: groups in flight in the closed loop (ignored when ``rate`` is set).
        rate: open loop: Poisson group arrivals at this many groups per second.
        seed: seeds the open-loop arrivals and the ``random`` policy.
    """

    workers: int = 2
    groups: int = 400
    siblings: int = 8
    shared_prefix_tokens: int = 1760
    own_tokens: int = 288
    output_tokens: int = 1024
    sibling_interval_ms: float = 1.0
    concurrency: int = 1
    rate: Optional[float] = None
    seed: int = 1

    def __post_init__(self) -> None:
        _check_number("workers", self.workers, 1, integer=True)
        _check_number("groups", self.groups, 1, integer=True)
        _check_number("siblings", self.siblings, 1, integer=True)
        _check_number("shared_prefix_tokens", self.shared_prefix_tokens, 0, integer=True)
        _check_number("own_tokens", self.own_tokens, 0, integer=True)
        if self.shared_prefix_tokens + self.own_tokens < 1:
            raise ValueError("a prompt needs at least one token: shared_prefix_tokens + own_tokens must be >= 1")
        _check_number("output_tokens", self.output_tokens, 1, integer=True)
        _check_number("sibling_interval_ms", self.sibling_interval_ms, 0.0)
        _check_number("concurrency", self.concurrency, 1, integer=True)
        if self.rate is not None:
            _check_number("rate", self.rate, 0.0, strict=True)
        _check_number("seed", self.seed, 0, integer=True)

    @property
    def prompt_tokens(self) -> int:
        return self.shared_prefix_tokens + self.own_tokens

    @property
    def requests(self) -> int:
        return self.groups * self.siblings

    def describe(self) -> str:
        """One line saying what is simulated."""
        if self.rate is None:
            arrivals = "closed loop, %d group%s in flight" % (self.concurrency, "" if self.concurrency == 1 else "s")
        else:
            arrivals = "open loop, %g groups/s" % self.rate
        return "%d workers, %d groups x %d siblings (%s); prompt %d shared + %d own tokens, %d output tokens" % (
            self.workers,
            self.groups,
            self.siblings,
            arrivals,
            self.shared_prefix_tokens,
            self.own_tokens,
            self.output_tokens,
        )

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


class PrefixCache:
    """An LRU of prompt-prefix blocks with a capacity in tokens.

    ``keys`` passed to :meth:`lookup` and :meth:`insert` are the block keys of one prompt, in
    order: key ``i`` must identify the whole prefix up to the end of block ``i`` (see
    :func:`text_block_keys`), so a lookup stops at the first block that is not cached.
    """

    def __init__(self, capacity_tokens: int, block_size: int) -> None:
        _check_number("capacity_tokens", capacity_tokens, 0, integer=True)
        _check_number("block_size", block_size, 1, integer=True)
        self.block_size = block_size
        self.capacity_blocks = capacity_tokens // block_size
        self._blocks: "OrderedDict[Hashable, None]" = OrderedDict()

    def __len__(self) -> int:
        """Blocks held."""
        return len(self._blocks)

    def lookup(self, keys: Sequence[Hashable]) -> int:
        """How many leading tokens of the prompt are cached (a multiple of ``block_size``)."""
        blocks = self._blocks
        hits = 0
        for key in keys:
            if key not in blocks:
                break
            hits += 1
        return hits * self.block_size

    def insert(self, keys: Sequence[Hashable]) -> Tuple[List[Hashable], List[Hashable]]:
        """Cache every block of the prompt (most recently used), evicting the least recently used.

        Blocks are touched last-first, so a prompt's earlier blocks (on which the later ones
        depend) are the more recently used and are evicted after them.

        Returns what an engine's KV cache events would report: the blocks newly stored, in
        prompt order, and the blocks evicted (some of the new ones too, when the prompt is
        longer than the cache).
        """
        if self.capacity_blocks == 0:
            return [], []
        blocks = self._blocks
        stored: List[Hashable] = []
        for key in reversed(keys):
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
                stored.append(key)
        stored.reverse()
        evicted: List[Hashable] = []
        while len(blocks) > self.capacity_blocks:
            evicted.append(blocks.popitem(last=False)[0])
        return stored, evicted

    def clear(self) -> None:
        self._blocks.clear()


def text_block_keys(tokens: Sequence[Hashable], block_size: int) -> List[Hashable]:
    """Block keys of a tokenized prompt: key ``i`` stands for tokens ``[0, (i + 1) * block_size)``.

    Only whole blocks get a key. Keys are chained hashes, equal across prompts exactly when the
    prefixes are equal (within one process; up to hash collisions).
    """
    keys: List[Hashable] = []
    previous: Hashable = None
    for end in range(block_size, len(tokens) + 1, block_size):
        previous = hash((previous, tuple(tokens[end - block_size : end])))
        keys.append(previous)
    return keys
