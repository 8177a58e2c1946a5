"""Pictures of simulated runs (matplotlib, imported only here and only when a plot is asked for)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Sequence

from .engine import Result
from .report import placement_columns, replay_options
from .sweep import SweepCell

if TYPE_CHECKING:
    from .replay import ReplayResult

__all__ = ["plot_results", "plot_sweep", "plot_replay"]


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise SystemExit(
            "--plot needs matplotlib, which is not installed: pip install 'bounded-router[plot]' "
            "(or pip install matplotlib); the table and --json work without it"
        ) from None
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


def plot_results(results: Sequence[Result], path: str) -> None:
    """Placement, cache reuse, time to first token and throughput of each policy, as a PNG."""
    plt = _pyplot()
    labels = [
        r.spec.label.replace("bounded ", "bounded\n").replace(" skew", "\nskew")
        if r.spec.policy == "bounded_consistent_hashing"
        else r.spec.policy.replace("_", "\n", 1)
        for r in results
    ]
    x = list(range(len(results)))
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    fig.suptitle("Simulated: " + results[0].workload.describe(), fontsize=10)

    ax = axes[0][0]
    columns = placement_columns(results)
    bottom = [0] * len(results)
    colors = plt.get_cmap("viridis")
    for i, column in enumerate(columns):
        values = [r.placement.get(column, 0) if column != "other" else 0 for r in results]
        if column == "other":
            values = [sum(r.placement.values()) - sum(r.placement.get(c, 0) for c in columns[:-1]) for r in results]
        ax.bar(x, values, bottom=bottom, label=column, color=colors(i / max(1, len(columns) - 1)))
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_title("Placement of each group's siblings (groups)")
    ax.set_ylim(0, max(bottom) * 1.18)
    ax.legend(title="split", fontsize=8, ncol=len(columns), loc="upper center")

    ax = axes[0][1]
    width = 0.4
    ax.bar([i - width / 2 for i in x], [100 * r.cached_token_fraction for r in results], width, label="cached prompt tokens")
    ax.bar([i + width / 2 for i in x], [100 * r.spill_fraction for r in results], width, label="requests spilled")
    ax.set_ylabel("%")
    ax.set_title("Cache reuse and spill")
    ax.legend(fontsize=8)

    ax = axes[1][0]
    ax.bar([i - width / 2 for i in x], [r.mean_ttft_ms for r in results], width, label="mean")
    ax.bar([i + width / 2 for i in x], [r.p99_ttft_ms for r in results], width, label="p99")
    ax.set_ylabel("ms")
    ax.set_title("Time to first token")
    ax.legend(fontsize=8)

    ax = axes[1][1]
    ax.bar(x, [r.throughput_rps for r in results], color="tab:green")
    low = min(r.throughput_rps for r in results)
    ax.set_ylim(low * 0.95, max(r.throughput_rps for r in results) * 1.02)
    ax.set_ylabel("requests/s")
    ax.set_title("Throughput")

    for row in axes:
        for ax in row:
            ax.set_xticks(x)
            ax.set_xticklabels(labels, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sweep(cells: Sequence[SweepCell], path: str) -> None:
    """Heat maps over min_load_gap x max_load_skew, one column per load, as a PNG.

    Top row: mean time to first token against strict consistent hashing at the same load (blue
    is faster), each cell annotated with that change and its spill fraction. Bottom row: cached-token fraction.
    """
    plt = _pyplot()
    loads: List[str] = []
    for cell in cells:
        if cell.load not in loads:
            loads.append(cell.load)
    fig, axes = plt.subplots(2, len(loads), figsize=(5.4 * len(loads) + 1.5, 9), squeeze=False, constrained_layout=True)
    workload = cells[0].result.workload.describe().split("; ")
    fig.suptitle("bounded_consistent_hashing settings\n" + "\n".join(workload), fontsize=10)
    ttft_image = cache_image = None
    limit = max(abs(c.result.mean_ttft_ms / c.strict.mean_ttft_ms - 1) * 100 for c in cells) or 1.0
    low_cached = min(100 * c.result.cached_token_fraction for c in cells)
    high_cached = max(100 * c.strict.cached_token_fraction for c in cells)
    for column, load in enumerate(loads):
        here = [c for c in cells if c.load == load]
        gaps = sorted({c.gap for c in here})
        skews = sorted({c.skew for c in here})
        by_key = {(c.gap, c.skew): c for c in here}
        ttft = [[(by_key[(g, s)].result.mean_ttft_ms / by_key[(g, s)].strict.mean_ttft_ms - 1) * 100 for g in gaps] for s in skews]
        cached = [[100 * by_key[(g, s)].result.cached_token_fraction for g in gaps] for s in skews]
        spill = [[100 * by_key[(g, s)].result.spill_fraction for g in gaps] for s in skews]
        for row, (data, cmap) in enumerate(((ttft, "RdBu_r"), (cached, "viridis"))):
            ax = axes[row][column]
            if row == 0:
                image = ax.imshow(data, cmap=cmap, vmin=-limit, vmax=limit, aspect="auto", origin="lower")
                ttft_image = image
            else:
                image = ax.imshow(data, cmap=cmap, vmin=low_cached - 1, vmax=high_cached + 1, aspect="auto", origin="lower")
                cache_image = image
            for i in range(len(skews)):
                for j in range(len(gaps)):
                    if row == 0:
                        text = "%+.0f%%\n%.0f%%" % (ttft[i][j], spill[i][j])
                        dark = abs(ttft[i][j]) > 0.6 * limit
                    else:
                        text = "%.0f%%" % cached[i][j]
                        dark = cached[i][j] < (low_cached + high_cached) / 2
                    ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if dark else "black")
            ax.set_xticks(range(len(gaps)))
            ax.set_xticklabels([str(g) for g in gaps], fontsize=8)
            ax.set_yticks(range(len(skews)))
            ax.set_yticklabels(["%g" % s for s in skews], fontsize=8)
            ax.set_xlabel("min_load_gap")
            if column == 0:
                ax.set_ylabel("max_load_skew")
            strict = here[0].strict
            if row == 0:
                ax.set_title("%s\nmean TTFT vs strict (%.0f ms), spill" % (load, strict.mean_ttft_ms), fontsize=9)
            else:
                ax.set_title("cached prompt tokens (strict %.1f%%)" % (100 * strict.cached_token_fraction), fontsize=9)
    fig.colorbar(ttft_image, ax=list(axes[0]), label="mean TTFT vs strict (%)", shrink=0.9)
    fig.colorbar(cache_image, ax=list(axes[1]), label="cached prompt tokens (%)", shrink=0.9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _replay_label(result: "ReplayResult") -> str:
    p = result.policy
    if p.policy == "oracle":
        return "oracle\nmargin %d" % (p.margin or 0)
    if p.min_load_gap is not None:
        name = "bounded" if p.policy == "bounded_consistent_hashing" else p.policy
        return "\n".join(["%s" % name, "gap %d" % p.min_load_gap, "skew %g" % (p.max_load_skew or 0)] + replay_options(p))
    return p.policy.replace("_", "\n", 1)


def plot_replay(results: Sequence["ReplayResult"], path: str) -> None:
    """Time to first token, cache hits, spill and utilisation of each row of a trace replay, as a PNG."""
    plt = _pyplot()
    x = list(range(len(results)))
    labels = [_replay_label(r) for r in results]
    config = results[0].config
    load = "as recorded" if config.load is None else "offered prefill load %g" % config.load
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    first = results[0]
    title = "Trace replay: %d requests, %d workers, %s, cache %d blocks/worker"
    fig.suptitle(title % (first.requests, config.workers, load, first.cache_blocks), fontsize=10)
    width = 0.4
    ax = axes[0]
    ax.bar([i - width / 2 for i in x], [r.mean_ttft_ms / 1000 for r in results], width, label="mean")
    ax.bar([i + width / 2 for i in x], [r.p99_ttft_ms / 1000 for r in results], width, label="p99")
    ax.set_yscale("log")
    ax.set_ylabel("s")
    ax.set_title("Time to first token")
    ax.legend(fontsize=8)
    ax = axes[1]
    ax.bar([i - width / 2 for i in x], [100 * r.cached_token_fraction for r in results], width, label="prompt tokens from cache")
    ax.bar([i + width / 2 for i in x], [100 * r.spill_fraction for r in results], width, label="requests off the key's worker")
    ax.set_ylabel("%")
    ax.set_title("Cache hits and spill")
    ax.legend(fontsize=8)
    ax = axes[2]
    ax.bar([i - width / 2 for i in x], [r.utilisation for r in results], width, label="mean")
    ax.bar([i + width / 2 for i in x], [r.max_utilisation for r in results], width, label="busiest worker")
    ax.set_ylim(0, 1.05)
    ax.set_title("Achieved prefill utilisation")
    ax.legend(fontsize=8)
    for ax in axes:
        ax.set_xticks(x)
        ax.set_xticklabels(labels, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
