"""The demo's workload (bounded_router.testing.sessions) at a small size, over real HTTP: mock
worker processes on the replay's clock, a native gateway per policy, multi-turn sessions. No
timing is asserted: what the workload must show is in the caches and the routing, which the
schedule and the replay's clock fix."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

import pytest

import bounded_router.testing.sessions as sessions
from bounded_router.testing.e2e import RequestRecord
from bounded_router.testing.mock_worker import expected_text
from bounded_router.testing.sessions import COLUMNS, POLICIES, Outcome, Run, Sessions, conclusion, format_table, problems, run, session_prompts

SMALL = Sessions(
    workers=2, sessions=6, turns=3, arrival_s=0.2, think_s=0.05, document_tokens=(64,), fanouts=(1, 3), question_tokens=16,
    own_tokens=8, time_scale=0.01, worker_ports=(0,), draws=2,
)  # fmt: skip


@pytest.fixture(scope="module")
def outcomes() -> Dict[str, Outcome]:
    return {o.policy.policy: o for o in run(SMALL, POLICIES)}


def test_a_turn_repeats_the_session_before_it_and_siblings_share_it() -> None:
    turns = session_prompts(SMALL, 3, 64, 3)
    assert [len(t) for t in turns] == [3, 3, 3]
    question = " ".join("s3.q0.%d" % i for i in range(16))
    first = " ".join("s3.doc.%d" % i for i in range(64)) + " " + question
    assert turns[0] == [first + " " + " ".join("s3.t0.k%d.%d" % (k, i) for i in range(8)) for k in range(3)]
    second = first + expected_text(turns[0][0], SMALL.answer_tokens) + " " + " ".join("s3.q1.%d" % i for i in range(16))
    assert all(p.startswith(second + " s3.t1.k") for p in turns[1])
    assert session_prompts(SMALL, 3, 64, 3) == turns, "seeded: the same prompts every time"


def test_the_schedule_is_seeded_and_every_seed_sends_as_many_requests() -> None:
    assert SMALL.schedule() == SMALL.schedule()
    assert sorted(s.fanout for s in SMALL.schedule()) == [1, 1, 1, 3, 3, 3]
    assert SMALL.requests == 3 * (1 + 1 + 1 + 3 + 3 + 3)
    other = replace(SMALL, seed=7)
    assert other.schedule() != SMALL.schedule() and other.requests == SMALL.requests
    assert SMALL.draw(1) == replace(SMALL, seed=1, draws=1) and SMALL.draw(1).schedule() != SMALL.schedule()


def test_every_request_succeeds_and_affinity_caches_the_history(outcomes: Dict[str, Outcome]) -> None:
    assert problems(list(outcomes.values())) == []
    for o in outcomes.values():
        assert len(o.records) == SMALL.draws * SMALL.requests and len(o.runs) == SMALL.draws
        assert all(r.worker_ttft_ms >= 0 for r in o.records)
    strict = outcomes["consistent_hashing"]
    # Turns after the first find the session's history cached on the worker they return to.
    assert all(r.cached_tokens >= 64 for r in strict.records if r.sibling > 0)
    assert strict.figures.cached > outcomes["round_robin"].figures.cached
    assert outcomes["round_robin"].spill is None and strict.spill is None
    assert outcomes["bounded_consistent_hashing"].spill is not None


def test_the_table_fits_and_defines_every_column(outcomes: Dict[str, Outcome]) -> None:
    table = format_table(list(outcomes.values()))
    assert max(len(line) for line in table.splitlines()) < 100
    header = table.splitlines()[0]
    for name, meaning in COLUMNS:
        assert name in header and "  %-9s  %s" % (name, meaning) in table
    affinity, bound = conclusion(list(outcomes.values())).splitlines()
    assert affinity.startswith("Affinity:") and "round robin" in affinity and "p99" in bound
    assert max(len(affinity), len(bound)) <= 100


def _placements(r: Run) -> List[Tuple[Any, ...]]:
    """Each request's session, turn, worker, model TTFT and cached tokens, in one order."""
    return sorted((x.group, x.sibling, x.worker, x.worker_ttft_ms, x.cached_tokens) for x in r.records)


def test_the_replay_routes_alike_however_late_the_client_sends(monkeypatch: pytest.MonkeyPatch) -> None:
    # Least load and the bound decide on the requests in flight at each arrival: the two
    # policies a busy machine moved before the replay kept the clock. Run again on the same
    # workers (the same ring), every request leaving the client up to 20 ms late at seeded
    # random, each request lands where it did, with the same time to first token. Turns of 8
    # siblings make the bound spill.
    workload = replace(SMALL, fanouts=(1, 8))
    late = random.Random(1)
    stream = sessions.stream_completion

    async def delayed(*args: Any, **kwargs: Any) -> RequestRecord:
        await asyncio.sleep(late.uniform(0.0, 0.02))
        return await stream(*args, **kwargs)

    workers = sessions.start_workers(workload, 300.0)
    try:
        for policy in (p for p in POLICIES if p.policy in ("least_load", "bounded_consistent_hashing")):
            first = sessions.run_policy(policy, workload, workers)
            with monkeypatch.context() as patch:
                patch.setattr(sessions, "stream_completion", delayed)
                again = sessions.run_policy(policy, workload, workers)
            assert _placements(again) == _placements(first) and again.branches == first.branches
            assert len({x.worker for x in first.records}) == workload.workers
    finally:
        for worker in workers:
            worker.stop()
    assert first.branches.get("explicit_routing_key_spillover", 0) > 0, "the bound spilled: the loads it saw mattered"


def _run(ttfts: List[float], cached: int, branches: Optional[Dict[str, int]] = None) -> Run:
    records = [RequestRecord(0, 0, ok=True, worker_ttft_ms=t, ttft_ms=t + 1, prompt_tokens=100, cached_tokens=cached) for t in ttfts]
    return Run(records, branches or {}, 1.0)


def _outcome(policy: str, ttfts: List[float], cached: int, branches: Optional[Dict[str, int]] = None) -> Outcome:
    return Outcome(next(p for p in POLICIES if p.policy == policy), [_run(ttfts, cached, branches)])


def test_the_figures_pool_the_draws() -> None:
    bounded = next(p for p in POLICIES if p.policy == "bounded_consistent_hashing")
    o = Outcome(bounded, [_run([10.0, 30.0], 50, {"explicit_routing_key_spillover": 1}), _run([100.0, 900.0], 90)])
    # Four requests of 100 prompt tokens: mean (10 + 30 + 100 + 900) / 4 = 260; p99 the largest;
    # the client 1 ms later each; cached (2 x 50 + 2 x 90) / 400; spilled 1 of 4.
    assert o.figures == (260.0, 900.0, 261.0, 0.7, 0.25) and o.spill == 0.25
    assert len(o.records) == 4


@pytest.mark.parametrize(
    "bounded_tail, verdict",
    [(300.0, "The bound cuts strict hashing's p99 TTFT: 300 ms against 400 ms (x0.75), 50.0% spilled."),
     (500.0, "The bound does not cut strict hashing's p99 TTFT: 500 ms against 400 ms (x1.25), 50.0% spilled.")],
)  # fmt: skip
def test_the_conclusion_follows_the_figures(bounded_tail: float, verdict: str) -> None:
    # Two requests each: p99 of two values is the larger; the means are (a + b) / 2.
    outcomes = [
        _outcome("round_robin", [100.0, 300.0], 50),
        _outcome("consistent_hashing", [20.0, 400.0], 80),
        _outcome("bounded_consistent_hashing", [0.0, bounded_tail], 75, {"explicit_routing_key_spillover": 1}),
    ]
    affinity, bound = conclusion(outcomes).splitlines()
    speedup = "1.3x sooner" if bounded_tail == 300.0 else "1.2x later"
    assert affinity == "Affinity: bounded hashing caches 75%% of prompt tokens (round robin 50%%), first tokens %s." % speedup
    assert bound == verdict
