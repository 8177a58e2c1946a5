"""``python -m bounded_router.simulate --trace FILE.jsonl``: the command line of the trace replay."""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional, Sequence

from .batching import StepCosts
from .oracle import DEFAULT_MARGIN
from .replay import DEFAULT_CACHE_FRACTION, DEFAULT_LOAD, ReplayConfig, ReplayResult, arrival_scale, replay
from .replay_policies import ReplayPolicy
from .report import json_value
from .trace import TraceError, load_trace

__all__ = ["DEFAULT_CACHE_AWARE_GAP", "DEFAULT_CACHE_AWARE_SKEW", "main", "replay_policies", "wants_replay"]

#: The settings of the cache_aware rows unless told: the best of the sweep in
#: docs/trace-replay.md ("cache_aware against the oracle").
DEFAULT_CACHE_AWARE_GAP = 8
DEFAULT_CACHE_AWARE_SKEW = 1.0


def _int_list(text: str) -> List[int]:
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("expected a comma-separated list of integers, got %r" % text) from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one value")
    return values


def _parser() -> argparse.ArgumentParser:
    c = StepCosts()
    r = ReplayConfig()
    parser = argparse.ArgumentParser(
        prog="python -m bounded_router.simulate --trace FILE.jsonl",
        description="Replay a request trace (Mooncake format: timestamp, input_length, output_length, hash_ids) "
        "over simulated workers with a prefix block cache, chunked prefill and continuous batching, routed "
        "by each policy of the library and by a cache-aware oracle, and print time to first token, cache "
        "hits, spill and utilisation per policy.",
    )
    parser.add_argument("--trace", required=True, metavar="FILE.jsonl", help="the trace to replay")
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print a JSON array of rows instead of the table")
    out.add_argument("--plot", metavar="FILE.png", help="also draw a picture (needs matplotlib)")
    tr = parser.add_argument_group("trace")
    tr.add_argument("--block-size", type=int, default=512, help="tokens per hash_ids block (default 512)")
    tr.add_argument("--limit", type=int, default=None, metavar="N", help="replay the first N requests only")
    tr.add_argument(
        "--routing-key-field",
        metavar="NAME",
        default=None,
        help="route by this field of each line (default: the first block after the blocks every request shares)",
    )
    fl = parser.add_argument_group("fleet and load")
    fl.add_argument("--workers", type=int, default=r.workers, help="default %d" % r.workers)
    fl.add_argument(
        "--load",
        type=float,
        default=DEFAULT_LOAD,
        help="offered prefill work per worker as a fraction of its capacity; arrivals keep the trace's "
        "timing, scaled to it (default %g)" % DEFAULT_LOAD,
    )
    fl.add_argument("--as-recorded", action="store_true", help="keep the trace's timestamps unscaled (ignores --load)")
    cache = fl.add_mutually_exclusive_group()
    cache.add_argument("--cache-blocks", type=int, default=None, metavar="N", help="block-cache capacity of each worker")
    cache.add_argument(
        "--cache-fraction",
        type=float,
        default=DEFAULT_CACHE_FRACTION,
        metavar="F",
        help="or: each worker caches this fraction of the trace's distinct blocks (default %g)" % DEFAULT_CACHE_FRACTION,
    )
    fl.add_argument("--seed", type=int, default=r.seed, help="seeds the random row")
    pol = parser.add_argument_group("rows")
    pol.add_argument("--gaps", type=_int_list, default=[2], help="min_load_gap of the bounded rows (default 2)")
    pol.add_argument("--skew", type=float, default=1.5, help="max_load_skew of the bounded rows (default 1.5)")
    pol.add_argument(
        "--oracle-margin",
        type=_int_list,
        default=[DEFAULT_MARGIN],
        metavar="LIST",
        help="the oracle picks among workers with at most this many more requests in flight than the least "
        "loaded (default %d)" % DEFAULT_MARGIN,
    )
    pol.add_argument(
        "--spill-target",
        choices=("clockwise", "least_loaded"),
        default="clockwise",
        help="with --key-memory or least_loaded: add bounded rows with these library options",
    )
    pol.add_argument("--key-memory", type=int, default=0, metavar="N", help="see --spill-target (default 0: none)")
    pol.add_argument(
        "--cache-aware",
        action="store_true",
        help="add cache_aware rows (one per --cache-aware-gaps) routed by the trace's hash_ids as prefix blocks alone",
    )
    pol.add_argument(
        "--cache-aware-keyed",
        action="store_true",
        help="add cache_aware rows routed by the routing key as well as the blocks (ties then follow the key's ring)",
    )
    pol.add_argument(
        "--cache-aware-gaps",
        type=_int_list,
        default=[DEFAULT_CACHE_AWARE_GAP],
        metavar="LIST",
        help="min_load_gap of the cache_aware rows (default %d)" % DEFAULT_CACHE_AWARE_GAP,
    )
    pol.add_argument(
        "--cache-aware-skew",
        type=float,
        default=DEFAULT_CACHE_AWARE_SKEW,
        help="max_load_skew of the cache_aware rows (default %g)" % DEFAULT_CACHE_AWARE_SKEW,
    )
    pol.add_argument(
        "--blocks-per-worker",
        type=int,
        default=None,
        metavar="N",
        help="blocks_per_worker of the cache_aware rows (default: each simulated worker's cache capacity)",
    )
    pol.add_argument(
        "--prototype",
        action="store_true",
        help="add a row for the prototype of token weights + key memory + least-loaded spill (Python-side, not a library policy)",
    )
    costs = parser.add_argument_group("step costs (ms)")
    costs.add_argument("--step-ms", type=float, default=c.step_ms, help="fixed cost of a step")
    costs.add_argument("--prefill-ms-per-token", type=float, default=c.prefill_ms_per_token)
    costs.add_argument("--decode-ms-per-request", type=float, default=c.decode_ms_per_request, help="per request in the batch")
    costs.add_argument("--context-ms-per-token", type=float, default=c.context_ms_per_token, help="per prompt token in the batch")
    costs.add_argument("--chunk-tokens", type=int, default=c.chunk_tokens, help="most prompt tokens prefilled per step")
    return parser


def replay_policies(
    gaps: Sequence[int],
    skew: float,
    margins: Sequence[int],
    prototype: bool,
    spill_target: str = "clockwise",
    key_memory: int = 0,
    cache_aware: bool = False,
    cache_aware_keyed: bool = False,
    cache_aware_gaps: Sequence[int] = (DEFAULT_CACHE_AWARE_GAP,),
    cache_aware_skew: float = DEFAULT_CACHE_AWARE_SKEW,
    blocks_per_worker: Optional[int] = None,
) -> List[ReplayPolicy]:
    """The rows of a replay: the baselines, strict and bounded hashing (also with the library's
    options, when any is set), the prototype, cache_aware, the oracles."""
    rows = [ReplayPolicy("random"), ReplayPolicy("round_robin"), ReplayPolicy("consistent_hashing")]
    rows += [ReplayPolicy("bounded_consistent_hashing", gap, skew) for gap in gaps]
    if (spill_target, key_memory) != ("clockwise", 0):
        rows += [
            ReplayPolicy("bounded_consistent_hashing", gap, skew, spill_target=spill_target, key_memory=key_memory) for gap in gaps
        ]
    if prototype:
        rows += [ReplayPolicy("prototype", gap, skew) for gap in gaps]
    keyed_rows = ([False] if cache_aware else []) + ([True] if cache_aware_keyed else [])
    rows += [
        ReplayPolicy("cache_aware", gap, cache_aware_skew, blocks_per_worker=blocks_per_worker, keyed=keyed)
        for keyed in keyed_rows
        for gap in cache_aware_gaps
    ]
    rows += [ReplayPolicy("oracle", margin=margin) for margin in margins]
    return rows


def _json_rows(results: Sequence[ReplayResult]) -> str:

    return json.dumps([json_value(r.row()) for r in results], indent=1)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from .report import describe_replay, format_replay_table

    parser = _parser()
    args = parser.parse_args(argv)
    try:
        costs = StepCosts(
            step_ms=args.step_ms,
            prefill_ms_per_token=args.prefill_ms_per_token,
            decode_ms_per_request=args.decode_ms_per_request,
            context_ms_per_token=args.context_ms_per_token,
            chunk_tokens=args.chunk_tokens,
        )
        config = ReplayConfig(
            workers=args.workers,
            load=None if args.as_recorded else args.load,
            cache_blocks=args.cache_blocks,
            cache_fraction=args.cache_fraction,
            costs=costs,
            seed=args.seed,
        )
        policies = replay_policies(
            args.gaps, args.skew, args.oracle_margin, args.prototype, args.spill_target, args.key_memory, args.cache_aware,
            args.cache_aware_keyed, args.cache_aware_gaps, args.cache_aware_skew, args.blocks_per_worker,
        )
        for policy in policies:  # let the library judge the settings before anything runs
            router = policy.make_router(["http://check"], 1)
            if router is not None:
                router.close()
        if args.limit is not None and args.limit < 1:
            raise ValueError("--limit must be >= 1, got %d" % args.limit)
        trace = load_trace(args.trace, args.block_size, args.routing_key_field, args.limit)
        arrival_scale(trace, config)  # a trace whose arrivals span no time cannot be scaled to a load
    except OSError as e:
        parser.error("cannot read the trace: %s" % e)
    except (TraceError, ValueError) as e:
        parser.error(str(e))

    results = [replay(policy, trace, config) for policy in policies]
    if args.json:
        print(_json_rows(results))
    else:
        print(describe_replay(args.trace, trace, results[0]))
        print()
        print(format_replay_table(results))
    if args.plot:
        from .plot import plot_replay

        plot_replay(results, args.plot)
        print("wrote %s" % args.plot, file=sys.stderr)
    return 0


def wants_replay(argv: Sequence[str]) -> bool:
    """Whether a simulator command line asks for a trace replay."""
    return any(arg == "--trace" or arg.startswith("--trace=") for arg in argv)
