"""``python -m bounded_router.simulate``: the command line of the simulator (see ``--help``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, List, Optional, Sequence

from ..policy import DEFAULT_HASH_RING, HASH_RINGS
from .engine import PolicySpec, Result, run
from .model import CostModel, Workload
from .replay_cli import main as replay_main
from .replay_cli import wants_replay
from .report import describe, format_sweep, format_table, json_value
from .sweep import DEFAULT_GAPS, DEFAULT_RATES, DEFAULT_SKEWS, sweep

_DEFAULT_WORKLOAD = Workload()


def _list(kind: Any, what: str) -> Any:
    def parse(text: str) -> List[Any]:
        try:
            values = [kind(item) for item in text.split(",") if item.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError("%s must be a comma-separated list of numbers, got %r" % (what, text)) from None
        if not values:
            raise argparse.ArgumentTypeError("%s must list at least one value" % what)
        return values

    return parse


def _parser() -> argparse.ArgumentParser:
    w = _DEFAULT_WORKLOAD
    parser = argparse.ArgumentParser(
        prog="python -m bounded_router.simulate",
        description="Simulate routing policies on groups of streaming sibling requests that share a prompt "
        "prefix (by default the upstream two-worker A/B) and print what each policy does: placement of "
        "each group's siblings, spill, prefix-cache reuse, time to first token, throughput. Every routing "
        "decision is made by the real router; workers, caches and costs are modelled.",
    )
    parser.add_argument(
        "--trace",
        metavar="FILE.jsonl",
        help="replay a request trace (Mooncake format) instead; its options: --trace FILE.jsonl --help",
    )
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print a JSON array of rows instead of the table")
    out.add_argument("--plot", metavar="FILE.png", help="also draw a picture (needs matplotlib)")
    out.add_argument(
        "--sweep",
        action="store_true",
        help="run a grid of min_load_gap x max_load_skew at several loads instead of the policy table "
        "(with --plot: heat maps)",
    )
    pol = parser.add_argument_group("policies (the default run)")
    pol.add_argument("--gaps", type=_list(int, "--gaps"), default=[1, 2, 4], help="min_load_gap values of the bounded rows (default 1,2,4)")
    pol.add_argument("--skew", type=float, default=1.5, help="max_load_skew of the bounded rows (default 1.5)")
    pol.add_argument(
        "--smg-policies",
        type=_list(str, "--smg-policies"),
        default=[],
        metavar="LIST",
        help="also run these of SMG's policies, e.g. power_of_two,least_load,manual (default: none)",
    )
    pol.add_argument(
        "--hash-ring",
        choices=HASH_RINGS,
        default=DEFAULT_HASH_RING,
        help="the ring of the hashing rows: xxh64 or smg, SMG's (default %(default)s)",
    )
    sw = parser.add_argument_group("sweep")
    sw.add_argument("--sweep-gaps", type=_list(int, "--sweep-gaps"), default=list(DEFAULT_GAPS), metavar="LIST")
    sw.add_argument("--sweep-skews", type=_list(float, "--sweep-skews"), default=list(DEFAULT_SKEWS), metavar="LIST")
    sw.add_argument(
        "--sweep-rates",
        type=_list(float, "--sweep-rates"),
        default=list(DEFAULT_RATES),
        metavar="LIST",
        help="open-loop group arrival rates (groups/s) swept after the workload's own arrivals "
        "(default %s)" % ",".join("%g" % r for r in DEFAULT_RATES),
    )
    sw.add_argument("--no-sweep-rates", action="store_true", help="sweep the workload's own arrivals only")
    wl = parser.add_argument_group("workload")
    wl.add_argument("--workers", type=int, default=w.workers)
    wl.add_argument("--groups", type=int, default=w.groups)
    wl.add_argument("--siblings", type=int, default=w.siblings, help="requests per group, one routing key per group")
    wl.add_argument("--shared-prefix-tokens", type=int, default=w.shared_prefix_tokens)
    wl.add_argument("--own-tokens", type=int, default=w.own_tokens, help="prompt tokens unique to each sibling")
    wl.add_argument("--output-tokens", type=int, default=w.output_tokens)
    wl.add_argument("--sibling-interval-ms", type=float, default=w.sibling_interval_ms)
    wl.add_argument("--concurrency", type=int, default=w.concurrency, help="groups in flight (closed loop; default 1)")
    wl.add_argument("--rate", type=float, default=None, help="open loop instead: Poisson group arrivals, groups/s")
    wl.add_argument("--seed", type=int, default=w.seed)
    CostModel.add_arguments(parser.add_argument_group("worker costs"))
    return parser



def main(argv: Optional[Sequence[str]] = None) -> int:
    if wants_replay(sys.argv[1:] if argv is None else argv):
        return replay_main(argv)
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        workload = Workload(
            workers=args.workers,
            groups=args.groups,
            siblings=args.siblings,
            shared_prefix_tokens=args.shared_prefix_tokens,
            own_tokens=args.own_tokens,
            output_tokens=args.output_tokens,
            sibling_interval_ms=args.sibling_interval_ms,
            concurrency=args.concurrency,
            rate=args.rate,
            seed=args.seed,
        )
        cost = CostModel.from_args(args)
        if args.sweep:
            specs = [
                PolicySpec("bounded_consistent_hashing", g, s, args.hash_ring) for g in args.sweep_gaps for s in args.sweep_skews
            ]
        else:
            specs = (
                [PolicySpec("consistent_hashing", hash_ring=args.hash_ring)]
                + [PolicySpec("bounded_consistent_hashing", gap, args.skew, args.hash_ring) for gap in args.gaps]
                + [PolicySpec("round_robin"), PolicySpec("random")]
                + [PolicySpec(name) for name in args.smg_policies]
            )
        for spec in specs:  # let the library judge the settings before anything runs
            spec.make_router(["http://check"]).close()
    except ValueError as e:
        parser.error(str(e))

    if args.sweep:
        rates = [] if args.no_sweep_rates else args.sweep_rates
        cells = sweep(workload, cost, args.sweep_gaps, args.sweep_skews, rates, args.hash_ring)
        if args.json:
            print(json.dumps([json_value(cell.row()) for cell in cells], indent=1))
        else:
            print(describe(cells[0].strict))
            print()
            print(format_sweep(cells))
        if args.plot:
            from .plot import plot_sweep

            plot_sweep(cells, args.plot)
            print("wrote %s" % args.plot, file=sys.stderr)
        return 0

    results: List[Result] = [run(spec, workload, cost) for spec in specs]
    if args.json:
        print(json.dumps([json_value(r.row()) for r in results], indent=1))
    else:
        print(describe(results[0]))
        print()
        print(format_table(results))
    if args.plot:
        from .plot import plot_results

        plot_results(results, args.plot)
        print("wrote %s" % args.plot, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
