"""The demo's workload (bounded_router.testing.sessions) at a small size, over real HTTP: mock
worker processes, a native gateway per policy, multi-turn sessions. No timing is asserted:
what the workload must show is in the caches and the routing, which the schedule fixes."""

from __future__ import annotations

from typing import Dict

import pytest

from bounded_router.testing.mock_worker import expected_text
from bounded_router.testing.sessions import COLUMNS, POLICIES, Outcome, Sessions, conclusion, format_table, problems, run, session_prompts

SMALL = Sessions(workers=2, sessions=6, turns=3, arrival_s=0.2, think_s=0.05, document_tokens=64, question_tokens=16, time_scale=0.01)


@pytest.fixture(scope="module")
def outcomes() -> Dict[str, Outcome]:
    return {o.policy.policy: o for o in run(SMALL, POLICIES)}


def test_a_turn_repeats_the_whole_session_before_it() -> None:
    first, second, third = session_prompts(SMALL, 3, 64)
    assert len(first.split()) == 64 + 16
    assert second == first + expected_text(first, SMALL.answer_tokens) + " " + " ".join("s3.q1.%d" % i for i in range(16))
    assert third.startswith(second + expected_text(second, SMALL.answer_tokens))
    assert session_prompts(SMALL, 3, 64) == [first, second, third], "seeded: the same prompts every time"
    assert SMALL.schedule() == SMALL.schedule()


def test_every_request_succeeds_and_affinity_caches_the_history(outcomes: Dict[str, Outcome]) -> None:
    assert problems(list(outcomes.values())) == []
    for o in outcomes.values():
        assert len(o.records) == SMALL.requests
    strict = outcomes["consistent_hashing"]
    # Turns after the first find the session's earlier prompt cached on the worker they return to;
    # the first turns, with no history yet, find nothing (64 + 16 tokens of a session's own).
    assert all(r.cached_tokens == 0 for r in strict.records if r.sibling == 0)
    assert all(r.cached_tokens > 0 for r in strict.records if r.sibling > 0)
    assert strict.cached > outcomes["round_robin"].cached
    assert outcomes["round_robin"].spill is None and strict.spill is None
    assert outcomes["bounded_consistent_hashing"].spill is not None


def test_the_table_fits_and_defines_every_column(outcomes: Dict[str, Outcome]) -> None:
    table = format_table(list(outcomes.values()))
    assert max(len(line) for line in table.splitlines()) < 100
    header = table.splitlines()[0]
    for name, meaning in COLUMNS:
        assert name in header and "  %-9s  %s" % (name, meaning) in table
    line = conclusion(list(outcomes.values()))
    assert line.startswith("In one glance:") and "round robin" in line and "p99" in line
