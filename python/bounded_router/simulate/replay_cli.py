"""``python -m bounded_router.simulate --trace FILE.jsonl``: the command line of the trace replay."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import List, Optional, Sequence

from .._request import MAX_LEASE_WEIGHT
from ..policy import BALANCE_BY
from .batching import EVENTS_AT, StepCosts
from .oracle import DEFAULT_MARGIN
from .peer_rules import DEFAULT_PREFILL_MARGIN, parse_prototype, peer_rows, replicated_llm_d
from .replay import DEFAULT_CACHE_FRACTION, DEFAULT_LOAD, LOAD_WAITING, ReplayConfig, ReplayResult, arrival_scale, replay
from .replay_policies import WEIGHTS, ReplayPolicy
from .report import json_value
from .trace import Trace, TraceError, load_trace

__all__ = ["DEFAULT_CACHE_AWARE_GAP", "DEFAULT_CACHE_AWARE_SKEW", "main", "replay_policies", "wants_replay"]

#: The settings of the cache_aware rows unless told: the best of the sweep in
#: docs/trace-replay.md ("cache_aware against the oracle").
DEFAULT_CACHE_AWARE_GAP = 8
DEFAULT_CACHE_AWARE_SKEW = 1.0

#: The token-weighted rows' min_load_gap unless --token-gaps: this many mean prompts of the trace.
TOKEN_GAP_MEAN_PROMPTS = 4
#: The token-weighted rows' max_load_skew unless --token-skew.
DEFAULT_TOKEN_SKEW = 1.35


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
    fl.add_argument(
        "--spread-ticks",
        action="store_true",
        help="spread the requests that share a timestamp at random (seeded) over the time to the next one, as "
        "they came before a trace rounded them to its ticks (default: they arrive together)",
    )
    cache = fl.add_mutually_exclusive_group()
    cache.add_argument("--cache-blocks", type=int, default=None, metavar="N", help="block-cache capacity of each worker")
    cache.add_argument(
        "--cache-fraction",
        type=float,
        default=DEFAULT_CACHE_FRACTION,
        metavar="F",
        help="or: each worker caches this fraction of the trace's distinct blocks (default %g)" % DEFAULT_CACHE_FRACTION,
    )
    fl.add_argument("--seed", type=int, default=r.seed, help="seeds the random row and the replicas' draw")
    fl.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="N",
        help="replay N times, with seeds --seed to --seed + N - 1, and print each row's mean over the seeds with "
        "their range: a difference between rules smaller than that range is the seeds' (default 1)",
    )
    fl.add_argument(
        "--replicas",
        type=int,
        default=r.replicas,
        metavar="R",
        help="independent routers per library row, each request sent to a random one (default %d)" % r.replicas,
    )
    fl.add_argument(
        "--events-delay-ms",
        type=float,
        default=None,
        metavar="D",
        help="add cache_aware rows whose routers learn the workers' KV cache events (blocks stored and "
        "evicted), delivered D ms after the cache changed (default: no such rows)",
    )
    fl.add_argument(
        "--events-at",
        choices=EVENTS_AT,
        default=r.events_at,
        help="when a worker's events report a prompt's blocks stored: step-end, each chunk's blocks when its "
        "step ends (vLLM, SGLang); schedule, when its step starts; prefill-end, all when the prompt's prefill "
        "ends (default %s)" % r.events_at,
    )
    fl.add_argument(
        "--load-interval-ms",
        type=float,
        default=None,
        metavar="I",
        help="every I ms, tell each router every worker's requests in flight and prefill queue, as "
        "polling the engines' load endpoints would (default: no reports)",
    )
    fl.add_argument(
        "--peer-routes-ms",
        type=float,
        default=None,
        metavar="P",
        help="with --replicas, each route a replica takes reaches the other replicas P ms later, as a "
        "peer-route feed between them would (docs/contract.md, \"Peer routes\"; default: replicas share nothing)",
    )
    fl.add_argument(
        "--load-waiting",
        choices=LOAD_WAITING,
        default=r.load_waiting,
        help="what the load reports say of the prefill queue to rows whose leases weigh prompt tokens: "
        "its prompt tokens, its uncached prompt tokens (SGLang's num_waiting_uncached_tokens) or its "
        "requests alone (vLLM's num_requests_waiting) (default %(default)s)",
    )
    fl.add_argument(
        "--ring-layout",
        type=int,
        default=r.ring_layout,
        metavar="N",
        help="another naming of the workers, hence another draw of the hashing ring (default 0)",
    )
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
        "--balance-by",
        choices=BALANCE_BY,
        default=BALANCE_BY[0],
        help="prefill: add bounded rows like --spill-target's whose bound weighs the requests waiting for "
        "their first token; the token-weighted rows use it too (default %s)" % BALANCE_BY[0],
    )
    pol.add_argument(
        "--weights",
        choices=WEIGHTS,
        default="requests",
        help="tokens: add bounded rows with --spill-target and --key-memory whose leases weigh the request's "
        "prompt tokens (input_length), with --token-gaps and --token-skew (default: requests, no such rows)",
    )
    pol.add_argument(
        "--token-gaps",
        type=_int_list,
        default=None,
        metavar="LIST",
        help="min_load_gap of the token-weighted rows, in tokens (default: %g times the trace's mean prompt)"
        % TOKEN_GAP_MEAN_PROMPTS,
    )
    pol.add_argument(
        "--token-skew",
        type=float,
        default=DEFAULT_TOKEN_SKEW,
        help="max_load_skew of the token-weighted rows (default %g)" % DEFAULT_TOKEN_SKEW,
    )
    pol.add_argument(
        "--smg-policies",
        type=lambda text: [name for name in text.split(",") if name],
        default=[],
        metavar="LIST",
        help="also replay these of SMG's policies, e.g. power_of_two,least_load,manual (default: none)",
    )
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
        "--cache-aware-balance-by",
        choices=BALANCE_BY,
        default=BALANCE_BY[0],
        help="balance_by of the cache_aware rows: prefill weighs the requests waiting for their first token "
        "(docs/contract.md, \"Prefill load\") (default %s)" % BALANCE_BY[0],
    )
    pol.add_argument(
        "--cache-aware-hit-wait-factor",
        type=float,
        default=0.0,
        metavar="F",
        help="hit_wait_factor of the cache_aware rows (with --cache-aware-balance-by prefill): a prefix hit "
        "stays only while its worker's prefill load exceeds the least by at most F times the weight of its "
        "matched blocks (docs/contract.md, \"Prefill load\", rule 5; default 0: every hit stays)",
    )
    pol.add_argument(
        "--cache-aware-weights",
        choices=WEIGHTS,
        default="requests",
        help="tokens: the cache_aware rows' leases weigh the request's prompt tokens (default: requests)",
    )
    pol.add_argument(
        "--blocks-per-worker",
        type=int,
        default=None,
        metavar="N",
        help="blocks_per_worker of the cache_aware rows (default: each simulated worker's cache capacity)",
    )
    peers = parser.add_argument_group("the peers' rules and the prefill queue (docs/trace-replay.md, \"The peers' rules\")")
    peers.add_argument(
        "--peers",
        action="store_true",
        help="add rows of llm-d's default scorers, Dynamo's KV router and the oracle with the prefill queue as its "
        "load, each reading the simulated workers' caches (with --replicas and --load-interval-ms, llm-d run as the "
        "replicas too, each seeing the reported loads and its own routes)",
    )
    peers.add_argument(
        "--prefill-oracle-margins",
        type=_int_list,
        default=[DEFAULT_PREFILL_MARGIN],
        metavar="LIST",
        help="with --peers: the prefill-queue oracle picks among workers with at most this many more requests "
        "waiting for their first token than the least (default %d)" % DEFAULT_PREFILL_MARGIN,
    )
    peers.add_argument(
        "--prefill-prototypes",
        type=lambda text: [spec for spec in text.split(",") if spec],
        default=[],
        metavar="LIST",
        help="add Python prototypes of the library's rules with another load, each RULE:LOAD:GAP:SKEW, RULE "
        "cache_aware (no key, the workers' caches) or bounded (least-loaded spill), LOAD in_flight, waiting, "
        "waiting_tokens or mixedK (K x waiting + in flight), e.g. cache_aware:waiting_tokens:100000:1",
    )
    peers.add_argument(
        "--prefill-report-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="with --peers or --prefill-prototypes: the rules see the queues and KV use as of a report every MS of simulated time, plus "
        "what they sent since (default 0: live)",
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
    spill_target: str = "clockwise",
    key_memory: int = 0,
    token_gaps: Sequence[int] = (),
    token_skew: float = DEFAULT_TOKEN_SKEW,
    smg_policies: Sequence[str] = (),
    *,
    cache_aware: bool = False,
    cache_aware_keyed: bool = False,
    cache_aware_gaps: Sequence[int] = (DEFAULT_CACHE_AWARE_GAP,),
    cache_aware_skew: float = DEFAULT_CACHE_AWARE_SKEW,
    blocks_per_worker: Optional[int] = None,
    cache_aware_balance_by: str = BALANCE_BY[0],
    cache_aware_hit_wait_factor: float = 0.0,
    cache_aware_weights: str = "requests",
    balance_by: str = BALANCE_BY[0],
    cache_aware_events: bool = False,
) -> List[ReplayPolicy]:
    """The rows of a replay: the baselines, SMG's policies asked for, strict and bounded hashing
    (also with the library's options, when any is set, and with token weights for each of
    ``token_gaps``), cache_aware (by blocks alone and/or keyed, for each of ``cache_aware_gaps``;
    with ``cache_aware_events`` each also with the workers' KV cache events), the oracles."""
    rows = [ReplayPolicy("random"), ReplayPolicy("round_robin"), ReplayPolicy("consistent_hashing")]
    rows += [ReplayPolicy(name) for name in smg_policies]
    rows += [ReplayPolicy("bounded_consistent_hashing", gap, skew) for gap in gaps]
    def bounded(gap: int, skew: float, weights: str) -> ReplayPolicy:
        return ReplayPolicy(
            "bounded_consistent_hashing", gap, skew, spill_target=spill_target, key_memory=key_memory, weights=weights, balance_by=balance_by
        )

    if (spill_target, key_memory, balance_by) != ("clockwise", 0, BALANCE_BY[0]):
        rows += [bounded(gap, skew, "requests") for gap in gaps]
    rows += [bounded(gap, token_skew, "tokens") for gap in token_gaps]
    keyed_rows = ([False] if cache_aware else []) + ([True] if cache_aware_keyed else [])
    rows += [
        ReplayPolicy(
            "cache_aware",
            gap,
            cache_aware_skew,
            blocks_per_worker=blocks_per_worker,
            keyed=keyed,
            events=events,
            balance_by=cache_aware_balance_by,
            hit_wait_factor=cache_aware_hit_wait_factor,
            weights=cache_aware_weights,
        )
        for events in ([False, True] if cache_aware_events else [False])
        for keyed in keyed_rows
        for gap in cache_aware_gaps
    ]
    rows += [ReplayPolicy("oracle", margin=margin) for margin in margins]
    return rows


def _token_gaps(args: argparse.Namespace, trace: Trace) -> List[int]:
    """The gaps of the token-weighted rows: none without ``--weights tokens``, else ``--token-gaps``
    or the default, a multiple of the trace's mean prompt. Every prompt must fit in a lease weight."""
    if args.weights != "tokens":
        return []
    longest = max(r.input_tokens for r in trace.requests)
    if longest > MAX_LEASE_WEIGHT:
        raise ValueError("--weights tokens: a prompt of %d tokens is over the largest lease weight, %d" % (longest, MAX_LEASE_WEIGHT))
    if args.token_gaps is not None:
        return list(args.token_gaps)
    return [int(round(TOKEN_GAP_MEAN_PROMPTS * trace.prompt_tokens / len(trace.requests)))]


def _json_rows(results: Sequence[ReplayResult]) -> str:

    return json.dumps([json_value(r.row()) for r in results], indent=1)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from .report import describe_replay, format_replay_table, format_seeds_table

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
            ring_layout=args.ring_layout,
            replicas=args.replicas,
            events_delay_ms=0.0 if args.events_delay_ms is None else args.events_delay_ms,
            load_interval_ms=args.load_interval_ms,
            events_at=args.events_at,
            load_waiting=args.load_waiting,
            peer_routes_ms=args.peer_routes_ms,
            spread_ticks=args.spread_ticks,
        )
        if args.limit is not None and args.limit < 1:
            raise ValueError("--limit must be >= 1, got %d" % args.limit)
        if args.seeds < 1:
            raise ValueError("--seeds must be >= 1, got %d" % args.seeds)
        if args.seeds > 1 and args.plot:
            raise ValueError("--plot draws one replay; it cannot be used with --seeds above 1")
        trace = load_trace(args.trace, args.block_size, args.routing_key_field, args.limit)
        arrival_scale(trace, config)  # a trace whose arrivals span no time cannot be scaled to a load
        policies = replay_policies(
            args.gaps,
            args.skew,
            args.oracle_margin,
            args.spill_target,
            args.key_memory,
            _token_gaps(args, trace),
            args.token_skew,
            args.smg_policies,
            cache_aware=args.cache_aware,
            cache_aware_keyed=args.cache_aware_keyed,
            cache_aware_gaps=args.cache_aware_gaps,
            cache_aware_skew=args.cache_aware_skew,
            blocks_per_worker=args.blocks_per_worker,
            cache_aware_balance_by=args.cache_aware_balance_by,
            cache_aware_hit_wait_factor=args.cache_aware_hit_wait_factor,
            cache_aware_weights=args.cache_aware_weights,
            balance_by=args.balance_by,
            cache_aware_events=args.events_delay_ms is not None,
        )
        if not args.prefill_report_ms >= 0:
            raise ValueError("--prefill-report-ms must be a number of milliseconds >= 0, got %g" % args.prefill_report_ms)
        if args.peers:
            policies += peer_rows(args.prefill_oracle_margins, args.prefill_report_ms)
            if args.replicas > 1 and args.load_interval_ms is not None:
                policies.append(replicated_llm_d(args.load_interval_ms))
        policies += [parse_prototype(spec, args.prefill_report_ms) for spec in args.prefill_prototypes]
        for policy in policies:  # let the library judge the settings before anything runs
            router = policy.make_router(["http://check"], 1)
            if router is not None:
                router.close()
    except OSError as e:
        parser.error("cannot read the trace: %s" % e)
    except (TraceError, ValueError) as e:
        parser.error(str(e))

    runs = [[replay(policy, trace, dataclasses.replace(config, seed=seed)) for policy in policies] for seed in range(args.seed, args.seed + args.seeds)]
    results = runs[0]
    if args.json:
        print(_json_rows([r for run in runs for r in run]))
    else:
        print(describe_replay(args.trace, trace, results[0]))
        print()
        print(format_replay_table(results) if len(runs) == 1 else format_seeds_table(runs))
    if args.plot:
        from .plot import plot_replay

        plot_replay(results, args.plot)
        print("wrote %s" % args.plot, file=sys.stderr)
    return 0


def wants_replay(argv: Sequence[str]) -> bool:
    """Whether a simulator command line asks for a trace replay."""
    return any(arg == "--trace" or arg.startswith("--trace=") for arg in argv)
