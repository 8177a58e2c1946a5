"""The differential harness: run the same operations on the library and on the reference model
(tests/reference_model.py) and fail on the first decision, error or load they disagree on.

Operations are plain tuples so that hypothesis can generate and shrink them and a seeded
``random.Random`` can produce long sequences:

    ("route", key[, weight])         route(key, weight=weight); key None means no key, weight
                                     None (or absent) the key-only path
    ("route_h", key, headers)        route(key, headers=headers)
    ("route_many", keys[, weights])  route_many(keys, weights=weights): as successive routes, in
                                     one step; weights None: the key-only batch
    ("select", key, headers)         select(key, headers=headers); headers may be None
    ("release", i)                   release held lease number i (mod the number held)
    ("rerelease", i)                 release an already released lease again (a no-op)
    ("release_many", indices)        release_many of those held leases (and a released one)
    ("acquire", url, key[, weight])  acquire(url, key, weight=weight or 1)
    ("first_token", i)               mark held lease number i (mod the number held) past its
                                     first token (a second mark is a no-op on both sides)
    ("add", url) / ("remove", url)   add_worker / remove_worker
    ("set", urls)                    set_workers(urls) (may hold duplicates: an error)
    ("health", url, healthy)         set_healthy
    ("route_p", key, headers, blocks, weight)   route with prefix blocks and a weight
    ("route_many_p", keys, blocks)   route_many(keys, prefix_blocks=blocks)
    ("select_p", key, blocks)        select(key, prefix_blocks=blocks)
    ("store", url, blocks, named)    store_blocks(url, blocks, engine names of the blocks or None)
    ("unstore", url, blocks, named)  remove_blocks(url, the blocks' engine names or the blocks)
    ("clear", url)                   clear_blocks(url)
    ("report", url, load, waiting, waiting_requests)   report_load(url, ...), None: a figure left out
    ("forget", url)                  forget_load(url)
    ("peer", url, weight, blocks)    peer_route(url, weight=weight, prefix_blocks=blocks)

A configuration is (worker_urls, policy, max_load_skew, min_load_gap, virtual_nodes) and, for
the options, (hash_ring, spill_target, key_memory), each passed only to the policies that have
it (contract: "The ring", "Spill target", "Key memory"). Weights are the contract's "Weighted
leases": every load compared is a weighted sum, and the lease counts (in_flight) are compared too.

The prefix blocks are drawn from PREFIXES, chained sequences that share beginnings, so that
``cache_aware`` finds matches of every depth.
"""

from __future__ import annotations

import random
from typing import Any, List, Optional, Sequence, Tuple

from bounded_router import Lease, NoWorkerAvailableError, Router
from reference_model import NoWorkerAvailableError as ModelNoWorker
from reference_model import ReferenceRouter

URLS = ["http://w%d:8000" % i for i in range(8)]
# Other spellings of members (the same workers in their normal form) and URLs every entry point
# refuses (contract: "Workers and membership").
SPELLINGS = ["HTTP://W1:8000/", "http://w2:8000/", "w3:8000", "http://w4:8000?x", "http://a:1,http://b:2"]
KEYS: List[Any] = ["k0", "k1", "k2", "k3", "k4", "session-17", b"\x00\xff\xfe", "cl\u00e9", "a\tb", b"k1"]
# Figures of engine load reports: left out, small, and one past the limit (refused by both).
REPORTED: List[Any] = [None, None, 0, 1, 2, 3, 5, 8, 20, (1 << 40) + 1]
HEADER_NAMES = [
    "X-SMG-Target-Worker",
    "X-SMG-Routing-Key",
    "Authorization",
    "X-Forwarded-For",
    "Cookie",
    "Content-Type",
    "X-Session-Id",
]
HEADER_VALUES: List[Any] = [
    "",
    "0",
    "1",
    "+2",
    "3",
    " 1",
    "-0",
    "7",
    "18446744073709551617",
    "k0",
    "k1",
    "k2",
    "session-17",
    "a\tb",
    "bad\x01",
    "caf\u00e9",
    b"\xff",
    "Bearer abc",
]
# A policy name, or name/assignment_mode/max_keys for manual; "+session" makes the router read
# the key from X-Session-Id, then X-SMG-Routing-Key (routing_key_headers).
# cache_aware/T sets its cache_threshold to T (else the default, 0.3); "@prefill" sets balance_by
# to prefill (contract: "Prefill load"), "@prefill~F" its hit_wait_factor to F too (rule 5).
POLICIES = ["bounded_consistent_hashing"] * 3 + ["cache_aware", "cache_aware/0", "cache_aware/0.6"] + [
    "bounded_consistent_hashing@prefill",
    "cache_aware@prefill",
    "cache_aware@prefill~2",
    "consistent_hashing",
    "random",
    "round_robin",
    "power_of_two",
    "least_load",
    "manual/random/3",
    "manual/min_load/3",
    "manual/min_load/64+session",
    "consistent_hashing+session",
]
#: cache_aware's blocks_per_worker in the differential tests: small, so that indexes fill up.
BLOCKS_PER_WORKER = 6


def _prefix_tree(n: int, depth: int) -> List[List[int]]:
    """n chained prefixes of up to depth blocks; each extends an earlier one or starts afresh."""
    rng = random.Random(2026)
    out: List[List[int]] = []
    while len(out) < n:
        base = list(rng.choice(out)) if out and rng.random() < 0.75 else []
        for _ in range(rng.randint(1, 3)):
            if len(base) < depth:
                base.append(rng.choice([len(out) * 16 + len(base), rng.getrandbits(64)]))
        out.append(base)
    return out


PREFIXES: List[List[int]] = [[]] + _prefix_tree(16, 8)
SKEWS = [1.0, 1.1, 1.25, 1.5, 2.0, 3.0]
VIRTUAL_NODES = [1, 3, 20, 150]
HASH_RINGS = ["xxh64", "smg"]
SPILL_TARGETS = ["clockwise", "least_loaded"]
KEY_MEMORIES = [0, 0, 1, 3, 16]
# Weights: mostly small, sometimes large enough to dwarf every gap, and the largest accepted.
WEIGHTS = [None, None, 1, 2, 3, 5, 8, 40, 1000, 1 << 30]
# Branches whose worker may be a random draw: the model checks the library's is allowed, then uses it.
# least_load and min_load draw only keyless ties (contract: "Ties by the key"); the model ignores the
# library's worker when the request has a key.
RANDOM_BRANCHES = {"random_fallback", "random", "power_of_two", "least_load", "manual_vacant", "manual_occupied_miss", "manual_no_routing_key"}
SESSION_HEADERS = ["X-Session-Id", "X-SMG-Routing-Key"]


def engine_names(blocks: Sequence[int]) -> List[int]:
    """The names an engine with a hash of its own gives the blocks (any bijection will do)."""
    return [(block * 0x9E3779B97F4A7C15 + 1) % (1 << 64) for block in blocks]


class Mismatch(AssertionError):
    pass


class Differential:
    """A library router and a model router fed the same operations."""

    def __init__(
        self,
        worker_urls: Sequence[str],
        policy: str,
        skew: float,
        gap: int,
        virtual_nodes: int,
        hash_ring: str = "xxh64",
        spill_target: str = "clockwise",
        key_memory: int = 0,
    ) -> None:
        kwargs: dict = {}
        policy, _, session = policy.partition("+")
        policy, _, measure = policy.partition("@")
        measure, _, hit_wait = measure.partition("~")
        if measure:
            kwargs["balance_by"] = measure
        if hit_wait:
            kwargs["hit_wait_factor"] = float(hit_wait)
        if session:
            kwargs["routing_key_headers"] = SESSION_HEADERS
        if policy == "bounded_consistent_hashing":
            kwargs.update(max_load_skew=skew, min_load_gap=gap, spill_target=spill_target, key_memory=key_memory)
        if policy.startswith("cache_aware"):
            policy, _, threshold = policy.partition("/")
            kwargs.update(max_load_skew=skew, min_load_gap=gap, blocks_per_worker=BLOCKS_PER_WORKER)
            if threshold:
                kwargs["cache_threshold"] = float(threshold)
        if policy in ("consistent_hashing", "bounded_consistent_hashing", "cache_aware"):
            kwargs["hash_ring"] = hash_ring
        if policy.startswith("manual/"):
            policy, mode, max_keys = policy.split("/")
            kwargs.update(assignment_mode=mode, max_keys=int(max_keys))
        self.lib = Router(list(worker_urls), policy=policy, virtual_nodes=virtual_nodes, **kwargs)
        self.model = ReferenceRouter(list(worker_urls), policy=policy, virtual_nodes=virtual_nodes, **kwargs)
        self.held: List[Tuple[Lease, int]] = []
        self.released: List[Tuple[Lease, int]] = []
        self.operations = 0
        self.log: List[str] = []

    def close(self) -> None:
        self.lib.close()

    def check(self, condition: bool, what: str) -> None:
        if not condition:
            raise Mismatch("%s\nafter operations:\n  %s" % (what, "\n  ".join(self.log[-30:])))

    # -- one operation -------------------------------------------------------------------------

    def run(self, op: Tuple[Any, ...]) -> None:
        self.operations += 1
        self.log.append(repr(op))
        kind = op[0]
        if kind == "route":
            self._route(op[1], None, op[2] if len(op) > 2 else None)
        elif kind == "route_h":
            self._route(op[1], op[2])
        elif kind == "route_many":
            self._route_many(op[1], weights=op[2] if len(op) > 2 else None)
        elif kind == "route_p":
            self._route(op[1], op[2], weight=op[4], blocks=op[3])
        elif kind == "route_many_p":
            self._route_many(op[1], blocks=op[2])
        elif kind == "select_p":
            self._select(op[1], None, op[2])
        elif kind == "release_many":
            self._release_many(op[1])
        elif kind == "select":
            self._select(op[1], op[2])
        elif kind == "release":
            if self.held:
                lease, model_id = self.held.pop(op[1] % len(self.held))
                self.check(lease.release() is True, "release of a held lease did not release it")
                self.check(self.model.release(model_id) is True, "model: release of a held lease")
                self.released.append((lease, model_id))
                del self.released[:-20]
        elif kind == "rerelease":
            if self.released:
                lease, model_id = self.released[op[1] % len(self.released)]
                self.check(lease.release() is False, "a second release reported it released")
                self.check(self.model.release(model_id) is False, "model: a second release")
        elif kind == "first_token":
            if self.held:
                lease, model_id = self.held[op[1] % len(self.held)]
                marked = lease.first_token()
                self.check(marked == self.model.first_token(model_id), "first_token: library %r, model differs" % marked)
        elif kind == "acquire":
            weight = op[3] if len(op) > 3 and op[3] is not None else 1
            self._both(lambda r: r.acquire(op[1], op[2], weight=weight), lambda m: m.acquire(op[1], op[2], weight), keep=True)
        elif kind == "add":
            self._both(lambda r: r.add_worker(op[1]), lambda m: m.add_worker(op[1]))
        elif kind == "remove":
            self._both(lambda r: r.remove_worker(op[1]), lambda m: m.remove_worker(op[1]))
        elif kind == "set":
            self._both(lambda r: r.set_workers(op[1]), lambda m: m.set_workers(op[1]))
        elif kind == "health":
            self._both(lambda r: r.set_healthy(op[1], op[2]), lambda m: m.set_healthy(op[1], op[2]))
        elif kind == "store":
            names = engine_names(op[2]) if op[3] else None
            self._both(lambda r: r.store_blocks(op[1], op[2], names), lambda m: m.store_blocks(op[1], op[2], names))
        elif kind == "unstore":
            names = engine_names(op[2]) if op[3] else op[2]
            self._both(lambda r: r.remove_blocks(op[1], names), lambda m: m.remove_blocks(op[1], names))
        elif kind == "clear":
            self._both(lambda r: r.clear_blocks(op[1]), lambda m: m.clear_blocks(op[1]))
        elif kind == "report":
            figures = dict(zip(("load", "waiting", "waiting_requests"), op[2:]))
            self._both(lambda r: r.report_load(op[1], **figures), lambda m: m.report_load(op[1], **figures))
        elif kind == "forget":
            self._both(lambda r: r.forget_load(op[1]), lambda m: m.forget_load(op[1]))
        elif kind == "peer":
            self._both(lambda r: r.peer_route(op[1], weight=op[2], prefix_blocks=op[3]), lambda m: m.peer_route(op[1], op[2], op[3]))
        else:  # pragma: no cover
            raise ValueError("unknown operation %r" % (op,))
        self.compare_state()

    def _both(self, lib_call: Any, model_call: Any, keep: bool = False) -> None:
        lib_error = model_error = None
        try:
            lib_result = lib_call(self.lib)
        except (ValueError, KeyError, TypeError) as e:
            lib_error = e
        try:
            model_result = model_call(self.model)
        except (ValueError, KeyError, TypeError) as e:
            model_error = e
        self.check(
            type(lib_error) is type(model_error),
            "library raised %r, model raised %r" % (lib_error, model_error),
        )
        if keep and lib_error is None:
            self.check(lib_result.branch is None, "an acquired lease has a branch")
            self.held.append((lib_result, model_result))

    def _route(self, key: Any, headers: Optional[list], weight: Optional[int] = None, blocks: Optional[Sequence[int]] = None) -> None:
        try:
            lease: Optional[Lease] = self.lib.route(key, headers=headers, weight=weight, prefix_blocks=blocks)
            lib = (lease.worker_url, lease.preferred_url, lease.branch)
        except NoWorkerAvailableError as e:
            lease, lib = None, (None, None, e.branch)
        choice = lib[0] if lib[2] in RANDOM_BRANCHES else None
        try:
            decision = self.model.route(key, headers, random_choice=choice, prefix_blocks=blocks or (), weight=weight or 1)
            model = (decision.worker_url, decision.preferred_url, decision.branch)
        except ModelNoWorker as e:
            decision, model = None, (None, None, e.branch)
        self.check(lib == model, "route(%r, headers=%r, blocks=%r): library %r, model %r" % (key, headers, blocks, lib, model))
        if lease is not None:
            self.check(lease.spilled == (lib[2] == "explicit_routing_key_spillover"), "spilled flag")
            self.held.append((lease, decision.lease_id))

    def _route_many(self, keys: List[Any], weights: Optional[List[int]] = None, blocks: Optional[List[List[int]]] = None) -> None:
        try:
            leases: List[Lease] = self.lib.route_many(keys, weights=weights, prefix_blocks=blocks)
            lib_error = None
        except NoWorkerAvailableError as e:
            leases, lib_error = [], e.branch
        decisions = []
        for i, key in enumerate(keys):
            lib = (leases[i].worker_url, leases[i].preferred_url, leases[i].branch) if leases else None
            choice = lib[0] if lib is not None and lib[2] in RANDOM_BRANCHES else None
            try:
                weight = 1 if weights is None else weights[i]
                decisions.append(self.model.route(key, random_choice=choice, weight=weight, prefix_blocks=blocks[i] if blocks else ()))
            except ModelNoWorker as e:
                self.check(lib_error == e.branch, "route_many(%r): key %d: model found no worker (%s), library %r" % (keys, i, e.branch, lib or lib_error))
                continue
            model = (decisions[-1].worker_url, decisions[-1].preferred_url, decisions[-1].branch)
            self.check(lib == model, "route_many(%r): key %d: library %r, model %r" % (keys, i, lib or lib_error, model))
        self.check(len(leases) == len(decisions), "route_many(%r): %d leases, model %d" % (keys, len(leases), len(decisions)))
        self.held.extend((lease, d.lease_id) for lease, d in zip(leases, decisions))

    def _release_many(self, indices: List[int]) -> None:
        if not self.held:
            return
        chosen = sorted({i % len(self.held) for i in indices}, reverse=True)
        batch = [self.held.pop(i) for i in chosen]
        extra = self.released[-1:]  # an already released lease: skipped, not counted
        released = self.lib.release_many([lease for lease, _ in batch + extra])
        self.check(released == len(batch), "release_many released %d of %d held leases" % (released, len(batch)))
        for lease, model_id in batch:
            self.check(self.model.release(model_id) is True, "model: release of a held lease")
            self.check(lease.release() is False, "a lease released by release_many released again")
        self.released.extend(batch)
        del self.released[:-20]

    def _select(self, key: Any, headers: Optional[list], blocks: Sequence[int] = ()) -> None:
        d = self.lib.select(key, headers=headers, prefix_blocks=blocks) if blocks else self.lib.select(key, headers=headers)
        lib = (d.worker_url, d.preferred_url, d.branch)
        choice = d.worker_url if d.branch in RANDOM_BRANCHES else None
        m = self.model.select(key, headers, random_choice=choice, prefix_blocks=blocks)
        model = (m.worker_url, m.preferred_url, m.branch)
        self.check(lib == model, "select(%r, headers=%r): library %r, model %r" % (key, headers, lib, model))

    # -- state -----------------------------------------------------------------------------------

    def compare_state(self) -> None:
        lib = [(w.url, w.healthy, w.load, w.active_keys) for w in self.lib.workers()]
        model = self.model.workers()
        self.check(lib == model, "workers (url, healthy, load, active keys): library %r, model %r" % (lib, model))
        self.check(self.lib.in_flight() == self.model.in_flight(), "in flight: library %r, model %r" % (self.lib.in_flight(), self.model.in_flight()))
        stats = self.lib.statistics()
        prefill = [(w.prefill_load, w.prefill_requests) for w in stats.workers]
        self.check(prefill == self.model.prefill(), "prefill load, requests: library %r, model %r" % (prefill, self.model.prefill()))
        indexed = [w.indexed_blocks for w in stats.workers]
        self.check(indexed == self.model.indexed_blocks(), "indexed blocks: library %r, model %r" % (indexed, self.model.indexed_blocks()))
        self.check(all(n <= BLOCKS_PER_WORKER for n in indexed), "an index holds more than blocks_per_worker: %r" % indexed)
        lib_prefix = (stats.prefix_blocks, stats.prefix_blocks_matched, stats.indexed_blocks)
        model_prefix = (self.model.prefix_blocks, self.model.prefix_blocks_matched, sum(self.model.indexed_blocks()))
        self.check(lib_prefix == model_prefix, "prefix blocks, matched, indexed: library %r, model %r" % (lib_prefix, model_prefix))
        self.check(
            self.lib.active_leases() == self.model.active_leases() == len(self.held),
            "active leases: library %d, model %d, held %d"
            % (self.lib.active_leases(), self.model.active_leases(), len(self.held)),
        )

    def finish(self) -> None:
        """Compare the branch counts, release everything, and check nothing is left."""
        lib_counts = self.lib.branch_counts()
        self.check(lib_counts == self.model.branch_counts, "branch counts: %r vs %r" % (lib_counts, self.model.branch_counts))
        while self.held:
            self.run(("release", 0))
        self.check(all(load == 0 for load in self.lib.loads().values()), "loads after releasing all: %r" % self.lib.loads())
        self.check(self.lib.active_leases() == 0, "active leases after releasing all")
        self.check(self.lib.leaked_leases() == 0, "a lease was counted as leaked")


# -- a seeded generator of long sequences (hypothesis generates the short, shrinkable ones) ------


def random_config(rng: random.Random) -> Tuple[Any, ...]:
    workers = rng.sample(URLS, rng.randint(0, 6))
    return (
        workers, rng.choice(POLICIES), rng.choice(SKEWS), rng.randint(0, 4), rng.choice(VIRTUAL_NODES),
        rng.choice(HASH_RINGS), rng.choice(SPILL_TARGETS), rng.choice(KEY_MEMORIES),
    )  # fmt: skip


def random_headers(rng: random.Random) -> list:
    headers = []
    for _ in range(rng.randint(0, 4)):
        name = rng.choice(HEADER_NAMES)
        name = rng.choice([name, name.lower(), name.upper()])
        headers.append((name, rng.choice(HEADER_VALUES)))
    return headers


def random_operation(rng: random.Random) -> Tuple[Any, ...]:
    kind = rng.choices(
        ["route", "route_h", "route_many", "select", "release", "release_many", "rerelease", "acquire", "add", "remove", "set", "health",
         "route_p", "route_many_p", "select_p", "store", "unstore", "clear", "first_token", "report", "forget", "peer"],
        weights=[30, 12, 4, 8, 24, 3, 2, 3, 4, 3, 2, 8, 40, 4, 6, 8, 5, 1, 30, 8, 1, 8],
    )[0]
    key = rng.choice(KEYS + [None])
    url = rng.choice(URLS + [""] + SPELLINGS)  # "" is never a member: an error everywhere
    if kind == "route":
        return ("route", key, rng.choice(WEIGHTS))
    if kind == "route_p":
        headers = random_headers(rng) if rng.random() < 0.2 else None
        return ("route_p", rng.choice([None, None, key]), headers, rng.choice(PREFIXES), rng.choice([1, 1, 1, 2, 5]))
    if kind == "route_many_p":
        n = rng.randint(0, 6)
        return ("route_many_p", [rng.choice(KEYS + [None]) for _ in range(n)], [rng.choice(PREFIXES) for _ in range(n)])
    if kind == "select_p":
        return ("select_p", rng.choice([None, key]), rng.choice(PREFIXES))
    if kind in ("store", "unstore"):
        return (kind, rng.choice(URLS[:6] + [""]), rng.choice(PREFIXES), rng.random() < 0.5)
    if kind == "clear":
        return ("clear", rng.choice(URLS[:6] + [""]))
    if kind == "report":
        return ("report", url) + tuple(rng.choice(REPORTED) for _ in range(3))
    if kind == "forget":
        return ("forget", url)
    if kind == "peer":
        return ("peer", url, rng.choice([None, 1, 3]), rng.choice(PREFIXES + [()]))
    if kind == "route_h":
        return ("route_h", rng.choice([None, None, key]), random_headers(rng))
    if kind == "select":
        return ("select", key, rng.choice([None, random_headers(rng)]))
    if kind == "route_many":
        keys = [rng.choice(KEYS + [None]) for _ in range(rng.randint(0, 8))]
        return ("route_many", keys, None if rng.random() < 0.5 else [rng.choice(WEIGHTS) or 1 for _ in keys])
    if kind == "release_many":
        return ("release_many", [rng.randrange(1000) for _ in range(rng.randint(0, 6))])
    if kind in ("release", "rerelease", "first_token"):
        return (kind, rng.randrange(1000))
    if kind == "acquire":
        return ("acquire", url, key, rng.choice(WEIGHTS))
    if kind in ("add", "remove"):
        return (kind, url)
    if kind == "set":
        urls = rng.sample(URLS, rng.randint(0, 6))
        if urls and rng.random() < 0.1:
            urls.append(urls[0])  # a duplicate: rejected by both
        return ("set", urls)
    return ("health", url, rng.random() < 0.6)
