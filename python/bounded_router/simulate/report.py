"""Terminal tables of simulated runs and sweeps."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from .engine import Result
from .peer_rules import PEER_POLICIES
from .sweep import SweepCell

if TYPE_CHECKING:
    from .replay import ReplayConfig, ReplayResult
    from .replay_policies import ReplayPolicy
    from .trace import Trace

__all__ = ["placement_columns", "format_table", "format_sweep", "describe", "describe_replay", "format_replay_table", "replay_options"]


def placement_columns(results: Sequence[Result]) -> List[str]:
    """The placement columns to show: every split of a group over two workers, else the observed ones."""
    if not results:
        return []
    workload = results[0].workload
    if workload.workers == 2:
        s = workload.siblings
        return ["%d:%d" % (s - k, k) for k in range(0, s // 2 + 1)]
    seen: Dict[str, int] = {}
    for result in results:
        for label, count in result.placement.items():
            seen[label] = seen.get(label, 0) + count
    labels = sorted(seen, key=lambda label: [-int(x) for x in label.split(":")])
    return labels if len(labels) <= 6 else labels[:5] + ["other"]


def _placement_cells(result: Result, columns: List[str]) -> List[int]:
    cells = [result.placement.get(label, 0) for label in columns if label != "other"]
    if columns and columns[-1] == "other":
        cells.append(sum(result.placement.values()) - sum(cells))
    return cells


def _relative(value: float, base: Optional[float]) -> str:
    if base is None or not base or math.isnan(value) or math.isnan(base):
        return "-"
    return "%+.1f%%" % ((value / base - 1.0) * 100.0)


def describe(result: Result) -> str:
    """The scenario and cost lines printed above a table."""
    cost = result.cost
    return "%s\nprefill %g ms/token%s, decode %g ms/token, prefix cache %d tokens/worker in blocks of %d, seed %d" % (
        result.workload.describe(),
        cost.prefill_ms_per_token,
        " + %g ms" % cost.prefill_overhead_ms if cost.prefill_overhead_ms else "",
        cost.decode_ms_per_token,
        cost.cache_tokens,
        cost.block_size,
        result.workload.seed,
    )


def format_table(results: Sequence[Result]) -> str:
    """The table of a run: one row per policy; relative figures are against consistent_hashing."""
    if not results:
        return ""
    base = next((r for r in results if r.spec.policy == "consistent_hashing"), None)
    columns = placement_columns(results)
    header = ["policy", "gap", "skew"] + columns + [
        "spill",
        "cached",
        "prefill tok",
        "mean TTFT",
        "vs strict",
        "p99 TTFT",
        "req/s",
        "vs strict",
    ]
    rows: List[List[str]] = []
    for r in results:
        bounded = r.spec.policy == "bounded_consistent_hashing"
        keyed = r.spec.policy in ("consistent_hashing", "bounded_consistent_hashing")
        rows.append(
            [
                r.spec.policy,
                str(r.spec.min_load_gap) if bounded else "-",
                "%g" % r.spec.max_load_skew if bounded and r.spec.max_load_skew is not None else "-",
            ]
            + [str(c) for c in _placement_cells(r, columns)]
            + [
                "%.1f%%" % (100 * r.spill_fraction) if keyed else "-",
                "%.1f%%" % (100 * r.cached_token_fraction),
                "{:,}".format(r.computed_tokens),
                "%.0f ms" % r.mean_ttft_ms,
                "-" if r is base else _relative(r.mean_ttft_ms, base.mean_ttft_ms if base else None),
                "%.0f ms" % r.p99_ttft_ms,
                "%.3f" % r.throughput_rps,
                "-" if r is base else _relative(r.throughput_rps, base.throughput_rps if base else None),
            ]
        )
    return _align(header, rows)


def format_sweep(cells: Sequence[SweepCell]) -> str:
    """One block per load: mean TTFT vs strict, spill and cached tokens for every gap x skew."""
    blocks: List[str] = []
    loads: List[str] = []
    for cell in cells:
        if cell.load not in loads:
            loads.append(cell.load)
    for load in loads:
        here = [c for c in cells if c.load == load]
        gaps = sorted({c.gap for c in here})
        skews = sorted({c.skew for c in here})
        strict = here[0].strict
        title = "%s -- strict: mean TTFT %.0f ms, cached %.1f%%" % (
            load,
            strict.mean_ttft_ms,
            100 * strict.cached_token_fraction,
        )
        lines = [title, "mean TTFT vs strict / spill / cached tokens (rows: max_load_skew, columns: min_load_gap)"]
        width = 20
        lines.append("skew".ljust(6) + "".join(("gap %d" % g).rjust(width) for g in gaps))
        by_key = {(c.gap, c.skew): c for c in here}
        for skew in skews:
            row = ("%g" % skew).ljust(6)
            for gap in gaps:
                r = by_key[(gap, skew)].result
                text = "%+.0f%% %2.0f%% %2.0f%%" % (
                    (r.mean_ttft_ms / strict.mean_ttft_ms - 1) * 100,
                    100 * r.spill_fraction,
                    100 * r.cached_token_fraction,
                )
                row += text.rjust(width)
            lines.append(row)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def describe_replay(path: str, trace: "Trace", result: "ReplayResult") -> str:
    """The scenario lines printed above a replay table."""
    config = result.config
    costs = config.costs
    load = "as recorded" if config.load is None else "offered prefill load %g" % config.load
    return (
        "%s: %d requests, %d distinct blocks of %d tokens, routing key: %s\n"
        "%d workers, %s (arrivals over %.0f s), cache %d blocks/worker, seed %d%s\n"
        "step %g ms + prefill %g ms/token (chunks of %d) + decode %g ms/request + %g ms/context token"
        % (
            path,
            len(trace.requests),
            trace.unique_blocks,
            trace.block_size,
            trace.key_source,
            config.workers,
            load,
            result.arrival_span_ms / 1000.0,
            result.cache_blocks,
            config.seed,
            (", ring layout %d" % config.ring_layout if config.ring_layout else "")
            + (", ticks spread" if config.spread_ticks else "")
            + _replicas(config),
            costs.step_ms,
            costs.prefill_ms_per_token,
            costs.chunk_tokens,
            costs.decode_ms_per_request,
            costs.context_ms_per_token,
        )
    )


def _replicas(config: "ReplayConfig") -> str:
    """The scenario's router replicas and event delay, when not the single router's."""
    loads = "" if config.load_interval_ms is None else ", engine loads every %g ms (waiting %s)" % (config.load_interval_ms, config.load_waiting)
    if config.replicas == 1:
        return loads
    peers = "" if config.peer_routes_ms is None else ", peer routes after %g ms" % config.peer_routes_ms
    return ", %d router replicas (events after %g ms%s)%s" % (config.replicas, config.events_delay_ms, peers, loads)


def format_replay_table(results: Sequence["ReplayResult"]) -> str:
    """One row per policy; relative figures are against the first bounded_consistent_hashing row."""
    if not results:
        return ""
    base = next((r for r in results if r.policy.policy == "bounded_consistent_hashing"), None)
    header = ["policy", "gap", "skew", "mean TTFT", "vs bounded", "p99 TTFT", "vs bounded", "cached", "spill", "util", "max util"]
    rows: List[List[str]] = []
    for r in results:
        p = r.policy
        spills = p.policy in ("bounded_consistent_hashing", "oracle") + PEER_POLICIES
        rows.append(
            [
                _replay_name(p),
                "-" if p.min_load_gap is None else str(p.min_load_gap),
                "-" if p.max_load_skew is None else "%g" % p.max_load_skew,
                "%.0f ms" % r.mean_ttft_ms,
                "-" if r is base else _relative(r.mean_ttft_ms, base.mean_ttft_ms if base else None),
                "%.0f ms" % r.p99_ttft_ms,
                "-" if r is base else _relative(r.p99_ttft_ms, base.p99_ttft_ms if base else None),
                "%.1f%%" % (100 * r.cached_token_fraction),
                "%.1f%%" % (100 * r.spill_fraction) if spills else "-",
                "%.2f" % r.utilisation,
                "%.2f" % r.max_utilisation,
            ]
        )
    return _align(header, rows)


def format_seeds_table(runs: Sequence[Sequence["ReplayResult"]]) -> str:
    """One row per policy over replays that differ only in their seed (``runs[i][j]``: seed i,
    policy j): each figure's mean over the seeds, with its lowest and highest in brackets."""
    header = ["policy", "gap", "skew", "mean TTFT", "p99 TTFT", "cached", "seeds"]
    rows: List[List[str]] = []
    for same_row in zip(*runs):
        p = same_row[0].policy
        rows.append(
            [
                _replay_name(p),
                "-" if p.min_load_gap is None else str(p.min_load_gap),
                "-" if p.max_load_skew is None else "%g" % p.max_load_skew,
                _spread([r.mean_ttft_ms for r in same_row], "%.0f", " ms"),
                _spread([r.p99_ttft_ms for r in same_row], "%.0f", " ms"),
                _spread([100 * r.cached_token_fraction for r in same_row], "%.1f", "%"),
                "%d-%d" % (same_row[0].config.seed, same_row[-1].config.seed),
            ]
        )
    return _align(header, rows)


def _spread(values: Sequence[float], form: str, unit: str) -> str:
    """The mean of ``values`` and, in brackets, their lowest and highest."""
    mean = sum(values) / len(values)
    return "%s%s (%s-%s)" % (form % mean, unit, form % min(values), form % max(values))


def replay_options(p: "ReplayPolicy") -> List[str]:
    """The options of a replay row that are not the library's defaults, as short phrases."""
    options = ([] if p.spill_target == "clockwise" else [p.spill_target]) + (["memory %d" % p.key_memory] if p.key_memory else [])
    options += ["token weights"] if p.weights == "tokens" else []
    options += ["prefill load"] if p.balance_by == "prefill" else []
    options += ["hit wait %g" % p.hit_wait_factor] if p.hit_wait_factor else []
    options += ["blocks %d" % p.blocks_per_worker] if p.blocks_per_worker is not None else []
    return options + (["keyed"] if p.keyed else []) + (["events"] if p.events else [])


def _replay_name(p: "ReplayPolicy") -> str:
    """The policy column of a replay row: the policy, with the options that are not defaults."""
    if p.policy == "oracle":
        return "oracle (margin %d)" % (p.margin or 0)
    if p.policy in PEER_POLICIES:
        return p.label
    options = replay_options(p)
    return p.policy + (" (%s)" % ", ".join(options) if options else "")


def _align(header: List[str], rows: List[List[str]]) -> str:
    widths = [max(len(row[i]) for row in rows + [header]) for i in range(len(header))]
    lines = []
    for row in [header] + rows:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(widths[i]) for i, cell in enumerate(row) if i > 0]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def json_value(value: Any) -> Any:
    """``value`` for JSON output: non-finite floats as null, in dicts too."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    return value
