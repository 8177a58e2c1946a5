"""Prometheus text exposition of a router's statistics.

:func:`render` (also :meth:`Router.metrics_text <bounded_router.Router.metrics_text>`) returns the
router's counters in the Prometheus text format (version 0.0.4), ready to serve on ``/metrics``::

    # HELP bounded_router_requests_total Requests routed, by the branch that chose the worker.
    # TYPE bounded_router_requests_total counter
    bounded_router_requests_total{branch="explicit_routing_key_hit"} 1042
    bounded_router_requests_total{branch="explicit_routing_key_spillover"} 87
    ...
    bounded_router_worker_load{worker="http://w0:8000"} 6
    bounded_router_worker_active_keys{worker="http://w0:8000"} 2
    bounded_router_worker_healthy{worker="http://w0:8000"} 1
    bounded_router_active_leases 8
    bounded_router_leaked_leases_total 0

Every branch is always present (zero until it decides a request), so rates and ratios such as
"spilled / explicit-key requests" work from the first scrape. Each router's samples come from
one :meth:`Router.statistics <bounded_router.Router.statistics>` snapshot, so a scrape never
mixes two moments. Several routers in one process are told apart by constant labels:
``render_all([(router_a, {"router": "a"}), (router_b, {"router": "b"})])`` puts them in one
exposition with each metric family declared once; routers with the same labels are refused
(their series would collide).

Standard library only: no Prometheus client is needed (with ``prometheus_client`` installed, a
custom collector can still wrap :func:`render`'s numbers, but the text is usually all a scraper
needs).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Protocol, Sequence, Tuple

from .stats import Statistics

__all__ = ["CONTENT_TYPE", "render", "render_all", "parse"]

#: The Content-Type to serve the exposition with.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

# (name suffix, type, help) in the order they are written.
_FAMILIES: Tuple[Tuple[str, str, str], ...] = (
    ("requests_total", "counter", "Requests routed, by the branch that chose the worker (or found none)."),
    ("worker_load", "gauge", "Leases held on the worker: requests in flight from this process."),
    ("worker_active_keys", "gauge", "Distinct explicit routing keys among the leases held on the worker."),
    ("worker_healthy", "gauge", "1 if the worker is available for routing, 0 if it is marked unhealthy."),
    ("worker_indexed_blocks", "gauge", "Prefix blocks cache_aware remembers sending to the worker."),
    ("active_leases", "gauge", "Leases held, including those on workers removed since they were taken."),
    (
        "leaked_leases_total",
        "counter",
        "Leases garbage-collected without release (released by the safety net): each one is a bug.",
    ),
    ("prefix_blocks_total", "counter", "Prefix blocks of the requests cache_aware routed."),
    (
        "prefix_blocks_matched_total",
        "counter",
        "Prefix blocks of the requests cache_aware routed that their worker held (the matched prefix).",
    ),
    ("indexed_blocks", "gauge", "(worker, block) pairs in cache_aware's index, over all workers."),
    ("worker_routed_total", "counter", "Leases taken on the worker: requests routed (or acquired) to it."),
    (
        "worker_outcomes_total",
        "counter",
        "Released requests of the worker by outcome: success, failure, pushback (429), neutral.",
    ),
    (
        "worker_condition",
        "gauge",
        "1 for the worker's condition: available, half_open, ejected, unhealthy_probe or unhealthy_user.",
    ),
    ("worker_ejections_total", "counter", "Times the worker's circuit breaker opened."),
    ("worker_probes_total", "counter", "Health-check probes of the worker, by result: passed or failed."),
    (
        "worker_prefill_load",
        "gauge",
        "Weight of the leases held on the worker that have not seen their first token: its prefill queue.",
    ),
    ("worker_prefill_requests", "gauge", "Leases held on the worker that have not seen their first token."),
)

# The worker conditions, in the library's order (docs/contract.md, "Worker failures").
CONDITIONS = ("available", "half_open", "ejected", "unhealthy_probe", "unhealthy_user")

# The feeds' families (bounded_router.feeds), written only when some router has a running feed.
_FEED_FAMILIES: Tuple[Tuple[str, str, str], ...] = (
    ("kv_events_batches_total", "counter", "KV event batches from the worker's engine applied to cache_aware's index."),
    (
        "kv_events_problems_total",
        "counter",
        "KV events not applied, by kind: malformed, unknown_tag, unknown_parent, adapter; gaps, lost, restarts of the sequence.",
    ),
    ("kv_events_stale", "gauge", "1 if no KV event batch came from the worker lately: its index rests on this router's routes."),
    ("engine_load_reports_total", "counter", "Polls of the worker's load endpoint whose load was reported to the router."),
    ("engine_load_failures_total", "counter", "Polls of the worker's load endpoint that gave no load, by kind: unreachable, status, garbage."),
    ("engine_load_standing", "gauge", "1 if a load report of the worker's engine stands, 0 if none (or it expired)."),
    ("peer_routes_published_total", "counter", "Routes this router took and sent to its peers."),
    ("peer_routes_dropped_total", "counter", "Routes this router took that its publisher's queue had no room for."),
    ("peer_routes_received_total", "counter", "Routes of the peer applied to this router's loads and index."),
    (
        "peer_routes_problems_total",
        "counter",
        "Routes or messages of the peer not applied, by kind: unknown_worker, invalid, malformed; gaps of its sequence.",
    ),
)
_KV_PROBLEMS = ("malformed", "unknown_tag", "unknown_parent", "adapter", "gaps", "lost", "restarts")
_PEER_PROBLEMS = ("unknown_worker", "invalid", "malformed", "gaps")

Sample = Tuple[Dict[str, str], float]


class HasStatistics(Protocol):
    """What the exposition reads from a router: one snapshot of its counters."""

    def statistics(self) -> Statistics: ...


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join('%s="%s"' % (name, _escape(str(value))) for name, value in labels.items()) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _check_labels(labels: Optional[Mapping[str, str]]) -> Dict[str, str]:
    result: Dict[str, str] = {}
    for name, value in (labels or {}).items():
        if not isinstance(name, str) or not _NAME.match(name) or name.startswith("__"):
            raise ValueError("metric label name %r is not a valid Prometheus label name" % (name,))
        if name in ("branch", "worker", "outcome", "condition", "result", "kind", "peer"):
            raise ValueError("metric label name %r is used by the router's own metrics; choose another" % name)
        if not isinstance(value, str):
            raise TypeError("metric label %r must have a str value, got %s" % (name, type(value).__name__))
        result[name] = value
    return result


def _collect(stats: Statistics, labels: Dict[str, str]) -> Dict[str, List[Sample]]:
    samples: Dict[str, List[Sample]] = {suffix: [] for suffix, _, _ in _FAMILIES}
    for branch, count in stats.branches.items():
        samples["requests_total"].append((dict(labels, branch=branch), count))
    for worker in stats.workers:
        worker_labels = dict(labels, worker=worker.url)
        samples["worker_load"].append((worker_labels, worker.load))
        samples["worker_active_keys"].append((worker_labels, worker.active_keys))
        samples["worker_healthy"].append((worker_labels, 1 if worker.healthy else 0))
        samples["worker_indexed_blocks"].append((worker_labels, worker.indexed_blocks))
        samples["worker_routed_total"].append((worker_labels, worker.routed))
        for outcome, count in worker.outcomes.items():
            samples["worker_outcomes_total"].append((dict(worker_labels, outcome=outcome), count))
        for condition in CONDITIONS:
            samples["worker_condition"].append((dict(worker_labels, condition=condition), 1 if worker.condition == condition else 0))
        samples["worker_ejections_total"].append((worker_labels, worker.ejections))
        samples["worker_probes_total"].append((dict(worker_labels, result="passed"), worker.probes_passed))
        samples["worker_probes_total"].append((dict(worker_labels, result="failed"), worker.probes_failed))
        samples["worker_prefill_load"].append((worker_labels, worker.prefill_load))
        samples["worker_prefill_requests"].append((worker_labels, worker.prefill_requests))
    samples["active_leases"].append((labels, stats.active_leases))
    samples["leaked_leases_total"].append((labels, stats.leaked_leases))
    samples["prefix_blocks_total"].append((labels, stats.prefix_blocks))
    samples["prefix_blocks_matched_total"].append((labels, stats.prefix_blocks_matched))
    samples["indexed_blocks"].append((labels, stats.indexed_blocks))
    return samples


def _collect_feeds(router: HasStatistics, labels: Dict[str, str]) -> Dict[str, List[Sample]]:
    samples: Dict[str, List[Sample]] = {suffix: [] for suffix, _, _ in _FEED_FAMILIES}
    feed_statistics = getattr(router, "feed_statistics", None)
    for kind, rows in feed_statistics() if feed_statistics is not None else []:
        for key, counts in rows.items():
            _FEED_SAMPLES[kind](samples, labels, key, counts)
    return samples


def _kv_event_samples(samples: Dict[str, List[Sample]], labels: Dict[str, str], url: str, counts: Dict[str, Any]) -> None:
    worker = dict(labels, worker=url)
    samples["kv_events_batches_total"].append((worker, counts["batches"]))
    for problem in _KV_PROBLEMS:
        samples["kv_events_problems_total"].append((dict(worker, kind=problem), counts[problem]))
    samples["kv_events_stale"].append((worker, 1 if counts["stale"] else 0))


def _load_poll_samples(samples: Dict[str, List[Sample]], labels: Dict[str, str], url: str, counts: Dict[str, Any]) -> None:
    worker = dict(labels, worker=url)
    samples["engine_load_reports_total"].append((worker, counts["reports"]))
    for failure in ("unreachable", "status", "garbage"):
        samples["engine_load_failures_total"].append((dict(worker, kind=failure), counts["failures"].get(failure, 0)))
    samples["engine_load_standing"].append((worker, 1 if counts["standing"] else 0))


def _peer_samples(samples: Dict[str, List[Sample]], labels: Dict[str, str], endpoint: str, counts: Dict[str, Any]) -> None:
    peer = dict(labels, peer=endpoint)
    samples["peer_routes_received_total"].append((peer, counts["routes"]))
    for problem in _PEER_PROBLEMS:
        samples["peer_routes_problems_total"].append((dict(peer, kind=problem), counts[problem]))


def _publisher_samples(samples: Dict[str, List[Sample]], labels: Dict[str, str], endpoint: str, counts: Dict[str, Any]) -> None:
    samples["peer_routes_published_total"].append((labels, counts["published"]))
    samples["peer_routes_dropped_total"].append((labels, counts["dropped"]))


# The samples of each kind of feed row (bounded_router.feeds, Router.feed_statistics).
_FEED_SAMPLES: Dict[str, Callable[[Dict[str, List[Sample]], Dict[str, str], str, Dict[str, Any]], None]] = {
    "kv_events": _kv_event_samples,
    "load_poll": _load_poll_samples,
    "peer_routes": _peer_samples,
    "peer_routes_publisher": _publisher_samples,
}


def render_all(routers: Iterable[Tuple[HasStatistics, Optional[Mapping[str, str]]]], namespace: str = "bounded_router") -> str:
    """The exposition of several routers, each with its own constant labels.

    Args:
        routers: ``(router, labels)`` pairs; labels (a mapping of label names to str values, or
            None) tell the routers apart and must differ between them.
        namespace: the prefix of every metric name.

    Raises:
        ValueError: a label or namespace is not a valid Prometheus name, a label is named
            as one of the router's own (``branch``, ``worker``, ``kind``, ``peer``, ...), or two
            routers have the same labels.
        RouterClosedError: a router is closed.
    """
    if not _NAME.match(namespace):
        raise ValueError("metrics namespace %r is not a valid Prometheus metric name prefix" % (namespace,))
    checked = [(router, _check_labels(labels)) for router, labels in routers]
    label_sets = [tuple(sorted(labels.items())) for _, labels in checked]
    if len(set(label_sets)) != len(label_sets):
        raise ValueError("render_all: two routers have the same labels %r; give each its own (e.g. {'router': name})"
                         % (dict(next(s for s in label_sets if label_sets.count(s) > 1)),))
    collected = [_collect(router.statistics(), labels) for router, labels in checked]
    feeds = [_collect_feeds(router, labels) for router, labels in checked]
    lines = _families(namespace, _FAMILIES, collected)
    if any(samples for collected_feeds in feeds for samples in collected_feeds.values()):
        lines += _families(namespace, _FEED_FAMILIES, feeds)
    return "\n".join(lines) + "\n"


def _families(namespace: str, families: Sequence[Tuple[str, str, str]], collected: Sequence[Dict[str, List[Sample]]]) -> List[str]:
    lines: List[str] = []
    for suffix, kind, help_text in families:
        name = "%s_%s" % (namespace, suffix)
        lines.append("# HELP %s %s" % (name, help_text))
        lines.append("# TYPE %s %s" % (name, kind))
        for samples in collected:
            for labels, value in samples[suffix]:
                lines.append("%s%s %s" % (name, _labels(labels), _number(value)))
    return lines


def render(router: HasStatistics, labels: Optional[Mapping[str, str]] = None, namespace: str = "bounded_router") -> str:
    """The Prometheus text exposition of one router (see the module documentation).

    Args:
        router: the router.
        labels: constant labels added to every sample, e.g. ``{"router": "chat"}``.
        namespace: the prefix of every metric name.
    """
    return render_all([(router, labels)], namespace)


_UNESCAPE = re.compile(r"\\(.)")


def _unescape_one(match: "re.Match[str]") -> str:
    return "\n" if match.group(1) == "n" else match.group(1)


def parse(text: str) -> Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]:
    """Parse an exposition written by :func:`render` back into ``{(name, labels): value}``.

    A small reader for tests and scripts (label values must not contain ``,`` or ``}``);
    ``labels`` is a sorted tuple of ``(name, value)`` pairs.
    """
    result: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, brace, rest = head.partition("{")
        pairs: Sequence[Tuple[str, str]] = ()
        if brace:
            items = [item for item in rest.rstrip("}").split(",") if item]
            split = (item.partition("=") for item in items)
            pairs = tuple(sorted((k, _UNESCAPE.sub(_unescape_one, v[1:-1])) for k, _, v in split))
        result[(name, tuple(pairs))] = float(value)
    return result
