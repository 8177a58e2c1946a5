"""The peers' rules and the prefill-queue rules of the trace replay, against hand-computed cases."""

from __future__ import annotations

import json
import pathlib
import random
from typing import List

import pytest

from bounded_router.simulate import ReplayConfig, ReplayPolicy, StepCosts, replay
from bounded_router.simulate.__main__ import main
from bounded_router.simulate.batching import BatchingWorker, Job
from bounded_router.simulate.peer_rules import (
    PeerPolicy,
    WorkerView,
    bounded_choice,
    cache_aware_choice,
    dynamo_logits,
    llm_d_scores,
    parse_prototype,
    peer_rows,
    replicated_llm_d,
    pick_highest,
    pick_lowest,
)
from bounded_router.simulate.trace import build_trace, parse_trace

FIXTURE = str(pathlib.Path(__file__).resolve().parent.parent / "testdata" / "conversation_trace_sample.jsonl")
SIMPLE = StepCosts(step_ms=1, prefill_ms_per_token=1, decode_ms_per_request=0.5, context_ms_per_token=0, chunk_tokens=4)


# -- the rules, computed by hand ---------------------------------------------------------------


def test_llm_d_scores_weigh_prefix_3_queue_2_kv_2() -> None:
    # w0: 3 x 2/4 + 2 x (3-1)/(3-1) + 2 x (1-0.5) = 4.5; w1: 0 + 0 + 2 x 1 = 2; w2: 3 x 4/4 + 0 + 2 x 0.75 = 4.5
    assert llm_d_scores([2, 0, 4], 4, [1, 3, 3], [0.5, 0.0, 0.25]) == [4.5, 2.0, 4.5]
    # equal queues all score 1 (the queue-scorer's neutral score), no blocks score no prefix
    assert llm_d_scores([0, 0], 0, [2, 2], [0.0, 1.0]) == [4.0, 2.0]


def test_ties_are_drawn_at_random_and_only_among_the_best() -> None:
    rng = random.Random(7)
    picks = {pick_highest([4.5, 2.0, 4.5], rng) for _ in range(200)}
    assert picks == {0, 2}
    assert {pick_lowest([7.5, 5.5, 5.5, 9.0], rng) for _ in range(200)} == {1, 2}


def test_dynamo_cost_is_overlap_weighted_prefill_blocks_plus_decode_blocks() -> None:
    # blocks of 4 tokens, a prompt of 10: w0 (0 + 10)/4 + 5 = 7.5; w1 (8 + 10 - 8)/4 + 3 = 5.5;
    # w2 holds 3 blocks (12 tokens, more than the prompt): (0 + 0)/4 + 7 = 7
    assert dynamo_logits([0, 2, 3], 10, 4, [0, 8, 0], [5, 3, 7]) == [7.5, 5.5, 7.0]
    assert dynamo_logits([0, 2, 3], 10, 4, [0, 8, 0], [5, 3, 7], overlap_weight=2.0) == [10.0, 8.0, 7.0]


def test_bounded_choice_spills_to_the_least_loaded_fewest_in_flight() -> None:
    # mean 2.5, bound 3.75: w0 is 5 over the least and over the bound; w2 and w3 tie at 1, w3 has fewer in flight
    assert bounded_choice(0, [6, 2, 1, 1], [0, 0, 5, 3], gap=2, skew=1.5) == 3
    assert bounded_choice(0, [3, 2, 1, 1], [0, 0, 5, 3], gap=2, skew=1.5) == 0  # 3 - 1 is not over the gap
    assert bounded_choice(1, [6, 2, 1, 1], [0, 0, 5, 3], gap=2, skew=1.5) == 1


def test_cache_aware_choice_keeps_the_longest_prefix_among_passing_workers() -> None:
    # w0 holds 3 of 4 blocks but is overloaded (5 > 1.25 and 5 - 0 > 2): w1 holds them too and passes
    assert cache_aware_choice([3, 3, 1, 0], 4, [5, 0, 0, 0], [0, 0, 0, 0], gap=2, skew=1.0) == 1
    # a match of 1 block in 4 is not over 0.3 of them: the least loaded, then the fewest in flight
    assert cache_aware_choice([1, 1, 1, 1], 4, [0, 2, 0, 1], [4, 0, 2, 0], gap=2, skew=1.0) == 2


# -- the workers' prefill queue and what a rule sees of it -------------------------------------


def test_the_worker_counts_the_requests_waiting_for_their_first_token() -> None:
    worker = BatchingWorker(SIMPLE, 16, 2)
    worker.add(Job(0, 0.0, 6, 3, (1, 2, 3)), 0.0)
    worker.add(Job(1, 0.0, 2, 3, (4,)), 0.0)
    assert (worker.waiting, worker.waiting_tokens) == (2, 8)
    end = worker.start(0.0)  # a chunk of 4 of the first prompt's 6 tokens: both still wait
    assert end is not None
    worker.complete(end)
    assert (worker.waiting, worker.waiting_tokens) == (2, 8)
    end = worker.start(end)  # the last 2 tokens of the first, the 2 of the second
    assert end is not None
    first, _ = worker.complete(end)
    assert [job.ident for job in first] == [0, 1] and (worker.waiting, worker.waiting_tokens) == (0, 0)


def test_a_delayed_view_is_the_last_report_plus_what_the_router_sent_since() -> None:
    workers = [BatchingWorker(SIMPLE, 16, 2) for _ in range(2)]
    view = WorkerView(workers, 16, report_ms=100)
    view.observe(0.0)
    workers[1].add(Job(0, 0.0, 4, 2, (1, 2)), 0.0)  # sent by another router: unseen until the next report
    view.routed(0, 6)
    view.observe(99.0)
    assert (view.waiting(), view.waiting_tokens()) == ([1, 0], [6, 0])
    view.observe(100.0)
    assert (view.waiting(), view.waiting_tokens()) == ([0, 1], [0, 4])
    live = WorkerView(workers, 16, report_ms=0)
    assert live.waiting() == [0, 1] and live.kv_usage() == [0.0, 0.0]


# -- the rows in a replay ------------------------------------------------------------------------


def _placements(policy: ReplayPolicy) -> List[int]:
    """Two workers, blocks of 2 tokens, 16 blocks of cache each. Request 0 (prompt [1, 2], 100 output
    tokens) lands on w0 (unless a rule draws ties at random) and has its first token at 5 ms (one step of 1 + 4 ms); at 10 ms, still
    decoding there, request 1 brings the same prompt."""
    lines = [
        json.dumps({"timestamp": 0, "input_length": 4, "output_length": 100, "hash_ids": [1, 2]}),
        json.dumps({"timestamp": 10, "input_length": 4, "output_length": 1, "hash_ids": [1, 2]}),
    ]
    trace = build_trace(parse_trace(lines, 2), 2)
    result = replay(policy, trace, ReplayConfig(workers=2, load=None, cache_blocks=16, costs=SIMPLE))
    assert result.leaked_leases == 0 and result.requests == 2
    return result.placements


def test_rules_that_see_the_prefill_queue_keep_the_cached_worker_that_is_only_decoding() -> None:
    # In flight, w0 carries 1 and w1 0: the oracle with margin 0 gives the cache up.
    assert _placements(ReplayPolicy("oracle", margin=0)) == [0, 1]
    # Waiting for a first token, both carry 0: the prefill-queue oracle keeps the cache.
    assert _placements(PeerPolicy("oracle_prefill", margin=0)) == [0, 0]
    # llm-d and Dynamo draw request 0's worker at random (all tie); call it w. Then for request 1,
    # llm-d: w scores 3 x 1 + 2 x 1 + 2 x (1 - 4/32) = 6.75, the other 0 + 2 + 2 = 4;
    # Dynamo: w costs (0 + 0)/2 + (2 + 0) = 2, the other (0 + 4)/2 + (0 + 2) = 4.
    for policy in (PeerPolicy("llm_d"), PeerPolicy("dynamo")):
        first, second = _placements(policy)
        assert first == second, policy.label
    assert _placements(PeerPolicy("prefill_cache_aware", min_load_gap=0, max_load_skew=1.0)) == [0, 0]
    assert _placements(PeerPolicy("prefill_cache_aware", load="in_flight", min_load_gap=0, max_load_skew=1.0)) == [0, 1]


def test_a_reported_queue_counts_what_the_router_sent_since_the_report() -> None:
    # The report at 0 ms saw nothing; request 0 sent since counts as waiting until the report at 100 ms.
    assert _placements(PeerPolicy("oracle_prefill", margin=0, report_ms=100)) == [0, 1]


def test_every_peer_row_replays_the_fixture() -> None:
    trace_rows = peer_rows((0, 2)) + [
        PeerPolicy("prefill_bounded", min_load_gap=1, max_load_skew=1.0),
        PeerPolicy("prefill_cache_aware", load="mixed", waiting_weight=4, min_load_gap=4, max_load_skew=1.0, report_ms=50),
        PeerPolicy("prefill_cache_aware", load="waiting_tokens", min_load_gap=20000, max_load_skew=1.0),
    ]
    from bounded_router.simulate import load_trace

    trace = load_trace(FIXTURE)
    for policy in trace_rows:
        result = replay(policy, trace, ReplayConfig(workers=4, load=0.8))
        assert (result.requests, result.leaked_leases) == (35, 0), policy.label
        assert sum(result.final_loads.values()) == 0


def test_llm_d_as_replicas_sees_the_reports_and_its_own_routes() -> None:
    from bounded_router.simulate import load_trace

    trace = load_trace(FIXTURE)
    single = replay(PeerPolicy("llm_d", report_ms=200), trace, ReplayConfig(workers=4, load=0.8))
    one = replay(replicated_llm_d(200), trace, ReplayConfig(workers=4, load=0.8, replicas=1))
    assert one.placements == single.placements, "one replica is the single view with delayed reports"
    three = replay(replicated_llm_d(200), trace, ReplayConfig(workers=4, load=0.8, replicas=3))
    assert (three.requests, three.leaked_leases, sum(three.final_loads.values())) == (35, 0, 0)
    assert three.placements != single.placements, "three views, each blind to the others' routes since a report"
    assert replicated_llm_d(200).label == "llm-d (prefix 3, queue 2, kv 2) replicas report=200ms"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"policy": "nope"}, "unknown peer policy 'nope'"),
        ({"policy": "llm_d", "replicated": True}, "only llm_d runs replicated, and with report_ms > 0"),
        ({"policy": "dynamo", "replicated": True, "report_ms": 5}, "only llm_d runs replicated"),
        ({"policy": "llm_d", "load": "tokens"}, "load must be one of in_flight, waiting, waiting_tokens, mixed, got 'tokens'"),
        ({"policy": "llm_d", "report_ms": -1}, "report_ms must be a number of milliseconds >= 0, got -1"),
        ({"policy": "oracle_prefill"}, "oracle_prefill's margin must be an integer >= 0, got None"),
        ({"policy": "prefill_bounded", "max_load_skew": 1.0}, "prefill_bounded needs min_load_gap"),
        ({"policy": "prefill_bounded", "min_load_gap": 1, "max_load_skew": 0.5}, "needs max_load_skew, a number >= 1"),
        ({"policy": "prefill_bounded", "min_load_gap": 1, "max_load_skew": 1.0, "load": "mixed"}, "waiting_weight (> 0) goes with"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError) as e:
        PeerPolicy(**kwargs)
    assert message in str(e.value)


def test_cli_peers_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--trace", FIXTURE, "--workers", "4", "--peers", "--prefill-oracle-margins", "1,2", "--prefill-report-ms", "50"]) == 0
    out = capsys.readouterr().out
    for label in ("llm-d (prefix 3, queue 2, kv 2) report=50ms", "dynamo (overlap 1)", "oracle margin=1 load=waiting report=50ms"):
        assert label in out
    with pytest.raises(SystemExit):
        main(["--trace", FIXTURE, "--peers", "--prefill-report-ms", "-5"])
    assert "--prefill-report-ms must be a number of milliseconds >= 0, got -5" in capsys.readouterr().err


def test_prototypes_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    row = parse_prototype("cache_aware:mixed8:32:1", report_ms=50)
    assert (row.policy, row.load, row.waiting_weight, row.min_load_gap, row.max_load_skew, row.report_ms) == (
        "prefill_cache_aware",
        "mixed",
        8,
        32,
        1.0,
        50,
    )
    assert parse_prototype("bounded:waiting_tokens:131072:1.5").label == "prefill_bounded load=waiting_tokens gap=131072 skew=1.5"
    assert main(["--trace", FIXTURE, "--prefill-prototypes", "cache_aware:waiting:4:1,bounded:in_flight:2:1.5"]) == 0
    out = capsys.readouterr().out
    assert "prefill_cache_aware load=waiting gap=4 skew=1" in out and "prefill_bounded load=in_flight gap=2 skew=1.5" in out
    for spec, message in [
        ("cache:waiting:1:1", "expected RULE:LOAD:GAP:SKEW with RULE one of cache_aware, bounded, got 'cache:waiting:1:1'"),
        ("bounded:waiting:x:1", "GAP must be an integer and SKEW a number"),
        ("bounded:tokens:1:1", "--prefill-prototypes 'bounded:tokens:1:1': load must be one of"),
    ]:
        with pytest.raises(SystemExit):
            main(["--trace", FIXTURE, "--prefill-prototypes", spec])
        assert message in capsys.readouterr().err
