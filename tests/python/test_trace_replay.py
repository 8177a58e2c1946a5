"""The trace replay: the trace parser, the routing key, the batching worker, the oracle, the command line."""

from __future__ import annotations

import json
import pathlib
import random
import re
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import pytest

from bounded_router import MAX_LEASE_WEIGHT
from bounded_router.simulate import (
    DEFAULT_REPLAY_POLICIES,
    PrefixCache,
    ReplayConfig,
    ReplayPolicy,
    ReplayResult,
    StepCosts,
    TraceError,
    load_trace,
    replay,
)
from bounded_router.simulate.__main__ import main
from bounded_router.simulate.batching import BatchingWorker, Job
from bounded_router.simulate.oracle import oracle_choice
from bounded_router.simulate.replay import arrival_scale, arrival_times
from bounded_router.simulate.trace import Trace, build_trace, parse_trace, routing_keys, shared_leading_blocks

FIXTURE = str(pathlib.Path(__file__).resolve().parent.parent / "testdata" / "conversation_trace_sample.jsonl")

# A worker whose steps are easy to add up: 1 ms per step, 1 ms per prefilled token, 0.5 ms per
# request in the batch, chunks of 4 tokens.
SIMPLE = StepCosts(step_ms=1, prefill_ms_per_token=1, decode_ms_per_request=0.5, context_ms_per_token=0, chunk_tokens=4)


def _line(timestamp: float, input_length: int, output_length: object, hash_ids: Sequence[object], **extra: object) -> str:
    record = {"timestamp": timestamp, "input_length": input_length, "output_length": output_length, "hash_ids": list(hash_ids)}
    record.update(extra)
    return json.dumps(record)


def _trace(lines: List[str], block_size: int = 2, key_field: Optional[str] = None) -> Trace:
    return build_trace(parse_trace(lines, block_size), block_size, key_field)


def _replay(
    lines: List[str],
    workers: int = 1,
    policy: str = "consistent_hashing",
    margin: Optional[int] = None,
    costs: StepCosts = SIMPLE,
) -> ReplayResult:
    """Replay ``lines`` (blocks of 2 tokens) as recorded, with 16 cached blocks per worker."""
    config = ReplayConfig(workers=workers, load=None, cache_blocks=16, costs=costs)
    spec = ReplayPolicy(policy, margin=margin)
    return replay(spec, _trace(lines), config)


# -- the trace ---------------------------------------------------------------------------------


def test_the_fixture_parses_with_its_conversations() -> None:
    trace = load_trace(FIXTURE)
    assert len(trace.requests) == 35 and trace.block_size == 512
    assert shared_leading_blocks(trace.requests) == 1  # block 0: the system prompt every request shares
    assert trace.key_source == "first non-shared block (after 1 shared)"
    assert len(set(trace.keys)) == 7 + 12  # seven conversations of several turns, twelve single turns
    assert all(key == "block-%s" % r.blocks[1] for key, r in zip(trace.keys, trace.requests))
    assert load_trace(FIXTURE, limit=5).requests == trace.requests[:5]


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "t line 2: not JSON"),
        ("[1, 2]", "t line 2: expected a JSON object, got list"),
        ('{"input_length": 4, "output_length": 1, "hash_ids": [1, 2]}', "t line 2: field 'timestamp' is missing"),
        (_line(-1, 4, 1, [1, 2]), "t line 2: field 'timestamp' must be a number of milliseconds >= 0, got -1"),
        (_line(5, 4, 1, [1, 2]).replace("5", '"5"', 1), "t line 2: field 'timestamp' must be a number"),
        (_line(5, 0, 1, []), "t line 2: field 'input_length' must be an integer >= 1, got 0"),
        (_line(5, 4, 1.5, [1, 2]), "t line 2: field 'output_length' must be an integer >= 1, got 1.5"),
        (_line(5, 4, 1, [1, "x"]), "t line 2: field 'hash_ids' must be a list of integers"),
        (_line(5, 5, 1, [1, 2]), "t line 2: field 'hash_ids' has 2 blocks but input_length 5 needs 3 of 2 tokens"),
        (_line(0.5, 4, 1, [1, 2]), "t line 2: field 'timestamp' goes back in time (0.5 after 1.0)"),
    ],
)
def test_a_bad_line_is_named_with_its_field(line: str, message: str) -> None:
    first = _line(1, 4, 1, [1, 2])
    with pytest.raises(TraceError, match=re.escape(message)):
        parse_trace([first, line], block_size=2, name="t")


def test_blank_lines_are_skipped_and_an_empty_trace_is_refused() -> None:
    assert len(parse_trace(["", _line(0, 4, 1, [1, 2]), "  "], block_size=2)) == 1
    with pytest.raises(TraceError, match="no requests"):
        parse_trace(["", "\n"], block_size=2)
    with pytest.raises(ValueError, match="block_size must be an integer >= 1"):
        parse_trace([], block_size=0)


def test_routing_key_is_the_first_block_after_the_shared_ones() -> None:
    lines = [_line(0, 8, 1, [7, 8, 1, 2]), _line(0, 6, 1, [7, 8, 3]), _line(1, 8, 1, [7, 8, 1, 5]), _line(2, 4, 1, [7, 8])]
    requests = parse_trace(lines, block_size=2)
    assert shared_leading_blocks(requests) == 2
    # The last request has no block of its own after the shared two: it uses its last block.
    assert routing_keys(requests) == ["block-1", "block-3", "block-1", "block-8"]
    assert shared_leading_blocks(parse_trace([_line(0, 2, 1, [1]), _line(0, 2, 1, [2])], block_size=2)) == 0


def test_routing_key_from_a_named_field() -> None:
    lines = [_line(0, 2, 1, [1], session="a"), _line(1, 2, 1, [2], session=42)]
    assert _trace(lines, key_field="session").keys == ("a", "42")
    with pytest.raises(TraceError, match="line 2: routing key field 'user' is missing"):
        _trace([_line(0, 2, 1, [1], user="u"), _line(1, 2, 1, [2])], key_field="user")


# -- the block cache ---------------------------------------------------------------------------


def test_lru_cache_never_exceeds_its_capacity_and_evicts_the_least_recently_used() -> None:
    cache = PrefixCache(capacity_tokens=3 * 512, block_size=512)
    cache.insert([1, 2])
    cache.insert([9])
    assert len(cache) == 3
    cache.insert([1, 2])  # touches 1 and 2: block 9 is now the least recently used
    cache.insert([5])
    assert cache.lookup([9]) == 0 and cache.lookup([1, 2]) == 1024 and cache.lookup([5]) == 512
    cache.insert([6, 7])  # 2 and 1 are now the least recently used
    assert cache.lookup([1]) == 0 and cache.lookup([5]) == 512 and cache.lookup([6, 7]) == 1024
    # A prompt's blocks are touched last-first: its first block is the last of them to go, so a
    # prompt longer than the cache keeps its beginning.
    cache.insert([11, 12, 13, 14])
    assert len(cache) == 3 and cache.lookup([11, 12, 13, 14]) == 3 * 512
    rng = random.Random(3)
    for _ in range(500):
        cache.insert([rng.randrange(40) for _ in range(rng.randrange(1, 6))])
        assert len(cache) <= 3


# -- the batching worker, by hand ----------------------------------------------------------------


def test_two_requests_with_a_shared_prefix_by_hand() -> None:
    # A: 4 tokens prefilled in one step (1 + 4 = 5 ms), first token at 5.
    # B (same blocks) starts after A's blocks are cached: 3 tokens cached (the last token is
    # always computed), 1 prefilled while A decodes: 1 + 1 + 0.5 = 2.5 ms, first token at 7.5.
    # Then both decode (1 + 2 x 0.5 = 2 ms): A's third and last token at 9.5; B alone (1.5 ms) at 11.
    result = _replay([_line(0, 4, 3, [1, 2]), _line(0, 4, 3, [1, 2])])
    assert result.ttft_ms == [5.0, 7.5]
    assert result.mean_ttft_ms == 6.25 and result.p99_ttft_ms == 7.5
    assert (result.cached_tokens, result.prompt_tokens) == (3, 8)
    assert result.duration_ms == 11.0
    assert result.busy_fraction == 1.0
    assert result.utilisation == pytest.approx(7.5 / 11)  # the two steps that prefill
    assert result.leaked_leases == 0 and result.final_loads == {"http://replay-worker-0": 0}


def test_a_long_prompt_is_prefilled_in_chunks_that_a_chunk_may_share() -> None:
    # A (10 tokens) takes chunks of 4, 4 and 2; C (3 tokens) gets the last 2 tokens of the third
    # chunk and 1 more in a fourth: steps of 5, 5, 5 (2 + 2 tokens) and 2 ms.
    result = _replay([_line(0, 10, 1, [1, 2, 3, 4, 5]), _line(0, 3, 1, [8, 9])])
    assert result.ttft_ms == [15.0, 17.0]
    assert result.duration_ms == 17.0


def test_requests_arriving_together_at_an_idle_worker_share_its_first_step() -> None:
    # Regression (found by a review): the first of two arrivals at an idle worker started a step
    # alone and the second waited for it. Both 2-token prompts fit one chunk of 4: one step of
    # 1 + 4 = 5 ms gives both their first token (batching.py: an arrival at a step's start joins it).
    result = _replay([_line(0, 2, 1, [1]), _line(0, 2, 1, [2])])
    assert result.ttft_ms == [5.0, 5.0]


@pytest.mark.parametrize("arrival, ttft", [(5.5, 4.0), (6.0, 3.5), (3.0, 3.5)])
def test_an_arrival_cuts_a_decode_segment_at_the_step_in_progress(arrival: float, ttft: float) -> None:
    # A: prefill 2 tokens (3 ms), then decodes its 4 remaining tokens in steps of 1.5 ms from 3 ms
    # (boundaries at 4.5, 6, 7.5). B arrives during the step from 4.5 to 6 (5.5), exactly at a
    # boundary (6), or as A's prefill ends (3): its prefill starts at the next boundary, with A's
    # decode: 1 + 2 + 0.5 = 3.5 ms. A's remaining steps end at 11 in every case.
    result = _replay([_line(0, 2, 5, [1]), _line(arrival, 2, 1, [2])])
    assert result.ttft_ms == [3.0, ttft]
    assert result.duration_ms == 11.0


def test_context_and_batch_slow_every_step() -> None:
    costs = StepCosts(step_ms=1, prefill_ms_per_token=0, decode_ms_per_request=1, context_ms_per_token=0.25, chunk_tokens=100)
    # A: prefill (1 ms). Then A decodes: 1 + 1 + 0.25 x 4 = 3 ms per step, twice.
    result = _replay([_line(0, 4, 3, [1, 2])], costs=costs)
    assert result.ttft_ms == [1.0] and result.duration_ms == 7.0


# -- load, determinism ---------------------------------------------------------------------------


def test_arrivals_are_scaled_to_the_offered_load() -> None:
    trace = _trace([_line(0, 4, 1, [1, 2]), _line(100, 4, 1, [3, 4])])
    # 8 prompt tokens at (1 ms / 4 tokens + 1 ms per token) = 10 ms of prefill; 2 workers at load
    # 0.5 take it in 10 ms: the 100 ms of the trace become 10.
    config = ReplayConfig(workers=2, load=0.5, costs=SIMPLE)
    assert arrival_scale(trace, config) == pytest.approx(0.1)
    assert replay(ReplayPolicy("round_robin"), trace, config).arrival_span_ms == pytest.approx(10.0)
    with pytest.raises(ValueError, match="all arrive at the same time"):
        arrival_scale(_trace([_line(0, 4, 1, [1, 2])]), config)


def test_spread_ticks_place_a_ticks_requests_between_it_and_the_next_in_order() -> None:
    # Three requests at 100, one at 130, two at 190 (the last tick): scaled by 0.5 from the first.
    stamps = [100, 100, 100, 130, 190, 190]
    trace = _trace([_line(t, 4, 1, [2 * i, 2 * i + 1]) for i, t in enumerate(stamps)])
    assert arrival_times(trace, 0.5) == [0.0, 0.0, 0.0, 15.0, 45.0, 45.0]
    spread = arrival_times(trace, 0.5, spread_ticks=True, seed=7)
    assert spread == sorted(spread)  # the trace's order stays
    assert all(0.0 <= at < 15.0 for at in spread[:3]) and len(set(spread[:3])) == 3
    assert 15.0 <= spread[3] < 45.0
    assert spread[4:] == [45.0, 45.0]  # no next timestamp to spread them to
    assert arrival_times(trace, 0.5, spread_ticks=True, seed=7) == spread
    assert arrival_times(trace, 0.5, spread_ticks=True, seed=8) != spread


def test_a_replay_with_spread_ticks_serves_every_request_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    trace = load_trace(FIXTURE)
    together = ReplayConfig(workers=4, load=0.8, cache_blocks=64)
    spread = ReplayConfig(workers=4, load=0.8, cache_blocks=64, spread_ticks=True)
    a, b = replay(ReplayPolicy("round_robin"), trace, together), replay(ReplayPolicy("round_robin"), trace, spread)
    assert a.requests == b.requests == len(trace.requests)
    assert a.ttft_ms != b.ttft_ms
    with pytest.raises(ValueError, match="spread_ticks must be True or False"):
        ReplayConfig(spread_ticks=1)  # type: ignore[arg-type]
    assert main(["--trace", FIXTURE, "--workers", "4", "--spread-ticks"]) == 0
    assert ", ticks spread" in capsys.readouterr().out


def test_replay_is_repeatable_for_a_seed() -> None:
    trace = load_trace(FIXTURE)
    config = ReplayConfig(workers=4, load=0.8, cache_blocks=64, seed=3)
    for policy in DEFAULT_REPLAY_POLICIES:
        a, b = replay(policy, trace, config), replay(policy, trace, config)
        assert a.row() == b.row() and a.ttft_ms == b.ttft_ms and a.placements == b.placements
    other = ReplayConfig(workers=4, load=0.8, cache_blocks=64, seed=4)
    assert replay(ReplayPolicy("random"), trace, config).placements != replay(ReplayPolicy("random"), trace, other).placements


def test_a_ring_layout_renames_the_workers_and_redraws_the_ring() -> None:
    trace = load_trace(FIXTURE)

    def run(policy: str, layout: int) -> ReplayResult:
        return replay(ReplayPolicy(policy), trace, ReplayConfig(workers=4, load=0.8, cache_blocks=64, ring_layout=layout))

    hashed = {layout: run("consistent_hashing", layout) for layout in (0, 1)}
    assert sorted(hashed[0].final_loads) == ["http://replay-worker-%d" % i for i in range(4)]
    assert sorted(hashed[1].final_loads) == ["http://replay-worker-%d.1" % i for i in range(4)]
    assert hashed[0].placements != hashed[1].placements  # the keys land elsewhere on another ring
    assert run("round_robin", 0).placements == run("round_robin", 1).placements  # no ring, no change
    assert hashed[1].row()["config"]["ring_layout"] == 1
    with pytest.raises(ValueError, match="ring_layout"):
        ReplayConfig(ring_layout=-1)


def test_every_row_serves_every_request_and_releases_every_lease() -> None:
    trace = load_trace(FIXTURE)
    config = ReplayConfig(workers=3, load=0.9, cache_fraction=0.1)
    weighted = ReplayPolicy("bounded_consistent_hashing", 5000, 1.35, spill_target="least_loaded", key_memory=64, weights="tokens")
    results = {p.label: replay(p, trace, config) for p in DEFAULT_REPLAY_POLICIES + (weighted,)}
    for result in results.values():
        assert result.requests == len(result.ttft_ms) == 35
        assert -1 not in result.placements
        assert result.leaked_leases == 0 and set(result.final_loads.values()) == {0}
        assert 0 < result.utilisation <= result.max_utilisation <= 1
    # The seven conversations' later turns find their prefix where strict hashing sent the first.
    assert results["consistent_hashing"].cached_token_fraction > results["random"].cached_token_fraction
    assert results["consistent_hashing"].spill_fraction == 0
    bounded = results["bounded gap=2 skew=1.5"]
    assert bounded.branches["explicit_routing_key_spillover"] == bounded.spilled == len(bounded.spill_excess) > 0
    assert min(bounded.spill_excess) >= 0 and 0 <= bounded.spills_to_least_loaded <= 1


# -- the oracle and token weights ------------------------------------------------------------------


def test_oracle_choice_longest_prefix_within_the_margin() -> None:
    assert oracle_choice([0, 3, 5], [0, 1, 2], margin=2) == 2  # all within 0 + 2: the longest prefix
    assert oracle_choice([0, 3, 5], [0, 1, 3], margin=2) == 1  # worker 2 is past the margin
    assert oracle_choice([4, 4, 1], [2, 1, 1], margin=2) == 1  # a tie on prefix: the least loaded
    assert oracle_choice([0, 0, 0], [1, 1, 1], margin=0) == 0  # a tie on both: the lowest index
    with pytest.raises(ValueError, match="one cached-prefix length per worker"):
        oracle_choice([1], [0, 0])


def test_oracle_sends_a_request_where_its_prefix_is_cached() -> None:
    # A goes to worker 0 (nothing cached, equal loads); B, arriving while A runs, to the less
    # loaded worker 1; C, with B's prefix and another key, arrives when both are idle and goes
    # to worker 1, which holds 2 of its blocks, although the tie on load would pick worker 0.
    lines = [_line(0, 4, 50, [1, 2]), _line(1, 4, 1, [9, 10]), _line(1000, 6, 1, [9, 10, 11])]
    result = _replay(lines, workers=2, policy="oracle", margin=1)
    assert result.placements == [0, 1, 1]
    assert result.cached_tokens == 4  # C reuses B's two blocks


def _weighted_rows(weights: str) -> ReplayResult:
    # Three requests of one key on two workers: a long prompt that stays in flight, a short one
    # arriving while it runs, and another once both have finished.
    lines = [_line(0, 40, 50, range(20), session="a"), _line(1, 4, 1, [90, 91], session="a"), _line(1000, 4, 1, [90, 91], session="a")]
    config = ReplayConfig(workers=2, load=None, cache_blocks=64, costs=SIMPLE)
    policy = ReplayPolicy("bounded_consistent_hashing", 10, 1.35, spill_target="least_loaded", key_memory=8, weights=weights)
    return replay(policy, _trace(lines, key_field="session"), config)


def test_token_weights_spill_a_request_that_request_counts_keep() -> None:
    by_requests, by_tokens = _weighted_rows("requests"), _weighted_rows("tokens")
    # Counted in requests, the key's worker carries 1 against 0, within the gap of 10: it stays.
    first = by_requests.placements[0]
    assert by_requests.placements == [first] * 3 and by_requests.spilled == 0
    # In tokens it carries 40 against 0: more than 10 above the least and 1.35 x the mean (20).
    # The second request spills; the third goes where the key was last placed, not a spill.
    assert by_tokens.placements == [first, 1 - first, 1 - first] and by_tokens.spilled == 1
    assert by_tokens.row()["weights"] == "tokens" and by_requests.row()["weights"] == "requests"
    assert by_tokens.leaked_leases == 0 and set(by_tokens.final_loads.values()) == {0}


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            dict(policy="bounded_consistent_hashing", min_load_gap=2, max_load_skew=1.5, weights="bytes"),
            "weights must be one of requests, tokens",
        ),
        (dict(policy="consistent_hashing", weights="tokens"), "weights apply only to bounded_consistent_hashing and cache_aware"),
    ],
)
def test_bad_weights_are_refused_naming_the_setting(settings: Dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReplayPolicy(**settings)  # type: ignore[arg-type]


# -- the command line ----------------------------------------------------------------------------


def test_cli_trace_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--trace", FIXTURE, "--workers", "4", "--load", "0.8"]) == 0
    out = capsys.readouterr().out
    assert "35 requests" in out and "4 workers, offered prefill load 0.8" in out
    header = next(line for line in out.splitlines() if line.startswith("policy"))
    for column in ("mean TTFT", "p99 TTFT", "cached", "spill", "util"):
        assert column in header
    names = [line.split()[0] for line in out.splitlines()[5:]]
    assert names == ["random", "round_robin", "consistent_hashing", "bounded_consistent_hashing", "oracle"]


def test_cli_trace_json_and_plot(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--trace", FIXTURE, "--workers", "3", "--cache-blocks", "40", "--oracle-margin", "1,4", "--json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in rows][-2:] == ["oracle margin=1", "oracle margin=4"]
    for row in rows:
        assert row["requests"] == 35 and row["cache_blocks_per_worker"] == 40
        for key in ("mean_ttft_ms", "p99_ttft_ms", "cached_token_fraction", "spill_fraction", "utilisation"):
            assert isinstance(row[key], float)
    assert main(["--trace", FIXTURE, "--as-recorded", "--json"]) == 0
    recorded = json.loads(capsys.readouterr().out)
    assert recorded[0]["config"]["load"] is None
    assert recorded[0]["arrival_span_s"] == 792.0  # the fixture's own timestamps: 0 to 792,000 ms
    assert main(["--trace", FIXTURE, "--limit", "10", "--plot", str(tmp_path / "r.png")]) == 0
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_seeds_summarise_the_replays_of_each_seed(capsys: pytest.CaptureFixture[str]) -> None:
    # Each seed replayed alone (the replicas' draw and the random row depend on it), then the
    # three at once: the summary is the mean and range of the single runs' figures.
    argv = ["--trace", FIXTURE, "--workers", "4", "--replicas", "2", "--json"]
    single = []
    for seed in (3, 4, 5):
        assert main(argv + ["--seed", str(seed)]) == 0
        single.append(json.loads(capsys.readouterr().out))
    assert main(argv + ["--seed", "3", "--seeds", "3"]) == 0
    together = json.loads(capsys.readouterr().out)
    assert together == single[0] + single[1] + single[2]
    assert [row["config"]["seed"] for row in together] == [3] * len(single[0]) + [4] * len(single[0]) + [5] * len(single[0])

    assert main(argv[:-1] + ["--seed", "3", "--seeds", "3"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("policy"))
    assert header.split() == ["policy", "gap", "skew", "mean", "TTFT", "p99", "TTFT", "cached", "seeds"]
    rows = out.splitlines()[out.splitlines().index(header) + 1 :]
    random_row = next(line for line in rows if line.startswith("random"))
    means = [run[0]["mean_ttft_ms"] for run in single]
    assert single[0][0]["label"].startswith("random") and len(set(means)) > 1  # the seed matters to this row
    expected = "%.0f ms (%.0f-%.0f)" % (sum(means) / 3, min(means), max(means))
    assert expected in random_row and random_row.endswith("3-5")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--seeds", "0"], "--seeds must be >= 1"),
        (["--seeds", "2", "--plot", "x.png"], "--plot draws one replay"),
        (["--load", "0"], "load must be > 0"),
        (["--skew", "0.5"], "max_load_skew must be a finite number >= 1.0"),
        (["--block-size", "16"], "field 'hash_ids' has 14 blocks but input_length 6758 needs 423"),
        (["--routing-key-field", "session"], "line 1: routing key field 'session' is missing"),
        (["--limit", "0"], "--limit must be >= 1"),
        (["--chunk-tokens", "0"], "chunk_tokens must be >= 1"),
        (["--weights", "tokens", "--token-skew", "0.5"], "max_load_skew must be a finite number >= 1.0"),
        (["--weights", "tokens", "--token-gaps", "-1"], "min_load_gap"),
    ],
)
def test_cli_trace_errors_name_the_setting(extra: List[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--trace", FIXTURE] + extra)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_trace_bad_file(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_line(0, 600, 1, [1, 2]) + "\n" + '{"timestamp": 1, "input_length": 600, "hash_ids": [1, 2]}\n')
    with pytest.raises(SystemExit):
        main(["--trace", str(bad)])
    assert "bad.jsonl line 2: field 'output_length' is missing" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--trace", str(tmp_path / "absent.jsonl")])
    assert "cannot read the trace" in capsys.readouterr().err


def test_the_library_options_add_bounded_rows_that_build_routers_with_them():
    from bounded_router.simulate.replay_cli import replay_policies

    rows = replay_policies([2], 1.5, [8], spill_target="least_loaded", key_memory=64)
    optioned = [r for r in rows if r.key_memory]
    assert [(r.policy, r.min_load_gap, r.spill_target, r.key_memory) for r in optioned] == [
        ("bounded_consistent_hashing", 2, "least_loaded", 64)
    ]
    spec = optioned[0].library_spec()
    assert spec is not None and spec.label == "bounded gap=2 skew=1.5 spill=least_loaded memory=64"
    with spec.make_router(["http://a", "http://b"]) as router:
        assert (router.policy.spill_target, router.policy.key_memory) == ("least_loaded", 64)
    assert [r.key_memory for r in replay_policies([2], 1.5, [8])] == [0] * 5  # no option, no extra row


def test_cli_token_weights_add_rows_with_their_gaps_in_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--trace", FIXTURE, "--workers", "3", "--spill-target", "least_loaded", "--key-memory", "64", "--json"]
    assert main(argv + ["--weights", "tokens"]) == 0
    rows = json.loads(capsys.readouterr().out)
    weighted = [r for r in rows if r["weights"] == "tokens"]
    mean_prompt = sum(r.input_tokens for r in load_trace(FIXTURE).requests) / 35
    # One row by default, its gap 4 mean prompts of the trace, beside the same options in requests.
    assert [(r["min_load_gap"], r["max_load_skew"], r["key_memory"]) for r in weighted] == [(round(4 * mean_prompt), 1.35, 64)]
    assert [r["label"] for r in rows if r["key_memory"]] == [
        "bounded gap=2 skew=1.5 spill=least_loaded memory=64",
        "bounded gap=%d skew=1.35 spill=least_loaded memory=64 weights=tokens" % round(4 * mean_prompt),
    ]
    assert main(argv + ["--weights", "tokens", "--token-gaps", "1000,8000", "--token-skew", "1.2"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["min_load_gap"], r["max_load_skew"]) for r in rows if r["weights"] == "tokens"] == [(1000, 1.2), (8000, 1.2)]
    assert main(argv + ["--token-gaps", "1000"]) == 0  # without --weights tokens: no weighted row
    assert all(r["weights"] == "requests" for r in json.loads(capsys.readouterr().out))


def test_cli_token_weights_refuse_a_prompt_over_the_largest_weight(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "big.jsonl"
    block = MAX_LEASE_WEIGHT  # two blocks hold a prompt one token over the largest weight
    big.write_text(_line(0, 4, 1, [1]) + "\n" + _line(1, MAX_LEASE_WEIGHT + 1, 1, [3, 4]) + "\n")
    argv = ["--trace", str(big), "--block-size", str(block), "--weights", "tokens", "--json"]
    with pytest.raises(SystemExit):
        main(argv)
    message = "--weights tokens: a prompt of %d tokens is over the largest lease weight, %d"
    assert message % (MAX_LEASE_WEIGHT + 1, MAX_LEASE_WEIGHT) in capsys.readouterr().err


def test_replay_runs_smg_policies(capsys: pytest.CaptureFixture[str]) -> None:
    trace = load_trace(FIXTURE)
    config = ReplayConfig(workers=3, load=0.9, cache_fraction=0.1)
    for name in ("power_of_two", "least_load", "manual"):
        result = replay(ReplayPolicy(name), trace, config)
        assert result.requests == 35 and result.leaked_leases == 0 and set(result.final_loads.values()) == {0}
        assert sum(result.branches.values()) == 35
    assert main(["--trace", FIXTURE, "--workers", "3", "--smg-policies", "manual"]) == 0
    assert any(line.startswith("manual") for line in capsys.readouterr().out.splitlines())


# -- cache_aware -------------------------------------------------------------------------------


def test_cache_aware_rows_build_the_library_policy_with_the_simulated_cache_as_its_index():
    from bounded_router.simulate.replay_cli import replay_policies

    rows = replay_policies([2], 1.5, [8], cache_aware=True, cache_aware_keyed=True, cache_aware_gaps=[4, 8], cache_aware_skew=1.25)
    aware = [r for r in rows if r.policy == "cache_aware"]
    assert [(r.min_load_gap, r.max_load_skew, r.keyed) for r in aware] == [(4, 1.25, False), (8, 1.25, False), (4, 1.25, True), (8, 1.25, True)]
    assert [r.label for r in aware][::2] == ["cache_aware gap=4 skew=1.25", "cache_aware gap=4 skew=1.25 keyed"]
    assert rows[-1].policy == "oracle"
    with aware[0].make_router(["http://a", "http://b"], cache_blocks=123) as router:  # type: ignore[union-attr]
        assert router.policy.to_dict()["blocks_per_worker"] == 123
    fixed = ReplayPolicy("cache_aware", 2, 1.5, blocks_per_worker=7)
    with fixed.make_router(["http://a"], cache_blocks=123) as router:  # type: ignore[union-attr]
        assert router.policy.to_dict()["blocks_per_worker"] == 7
    assert ReplayPolicy("oracle", margin=1).make_router(["http://a"], 1) is None
    assert [r.policy for r in replay_policies([2], 1.5, [8])].count("cache_aware") == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(policy="cache_aware"), "cache_aware needs min_load_gap and max_load_skew"),
        (dict(policy="bounded_consistent_hashing", min_load_gap=2, max_load_skew=1.5, blocks_per_worker=4), "apply only to cache_aware"),
        (dict(policy="consistent_hashing", keyed=True), "apply only to cache_aware"),
        (dict(policy="consistent_hashing", balance_by="prefill"), "balance_by applies only to bounded_consistent_hashing and cache_aware"),
    ],
)
def test_cache_aware_settings_are_checked(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReplayPolicy(**kwargs)  # type: ignore[arg-type]


def test_cache_aware_sends_a_request_where_the_router_sent_its_prefix() -> None:
    # A and B (other prefixes) go to the two workers; C, with A's two blocks and one more,
    # arrives when both are idle and goes where A went, a prefix hit, whatever its key.
    lines = [_line(0, 4, 50, [1, 2]), _line(1, 4, 50, [9, 10]), _line(1000, 6, 1, [1, 2, 11])]
    config = ReplayConfig(workers=2, load=None, cache_blocks=16, costs=SIMPLE)
    result = replay(ReplayPolicy("cache_aware", 0, 1.0), _trace(lines), config)
    assert result.placements[0] != result.placements[1]
    assert result.placements[2] == result.placements[0]
    assert result.branches["cache_aware_prefix_hit"] == 1 and result.branches["cache_aware_no_match"] == 2
    assert result.cached_tokens == 4  # C reuses A's two blocks
    assert result.leaked_leases == 0 and set(result.final_loads.values()) == {0}


@pytest.mark.parametrize("balance_by, same_worker, branch", [("in_flight", False, "cache_aware_balance"), ("prefill", True, "cache_aware_prefix_hit")])
def test_the_replay_marks_first_tokens_for_the_prefill_load(balance_by: str, same_worker: bool, branch: str) -> None:
    # A has its first token at 5 ms and decodes 50 tokens until about 80 ms; B, with A's two
    # blocks, arrives at 20 ms. In flight (gap 0) A's worker carries 1 against 0 and B leaves A's
    # cache; with the prefill load A is past its first token and B goes where its prefix is.
    lines = [_line(0, 4, 50, [1, 2]), _line(20, 6, 1, [1, 2, 11])]
    config = ReplayConfig(workers=2, load=None, cache_blocks=16, costs=SIMPLE)
    result = replay(ReplayPolicy("cache_aware", 0, 1.0, balance_by=balance_by), _trace(lines), config)
    assert (result.placements[1] == result.placements[0]) is same_worker
    assert result.branches[branch] == 1
    assert result.leaked_leases == 0 and set(result.final_loads.values()) == {0}


def test_cache_aware_rows_with_the_prefill_load_and_token_weights() -> None:
    from bounded_router.simulate.replay_cli import replay_policies

    rows = replay_policies([2], 1.5, [8], cache_aware=True, cache_aware_gaps=[131072], cache_aware_skew=1.0,
                           cache_aware_balance_by="prefill", cache_aware_weights="tokens")  # fmt: skip
    (row,) = [r for r in rows if r.policy == "cache_aware"]
    assert row.label == "cache_aware gap=131072 skew=1 load=prefill weights=tokens"
    router = row.make_router(["http://127.0.0.1:9"], 4)
    assert router is not None and router.policy.balance_by == "prefill"
    router.close()
    rows = replay_policies([2], 1.5, [8], token_gaps=[131072], token_skew=1.5, spill_target="least_loaded", balance_by="prefill")
    bounded = [r for r in rows if r.policy == "bounded_consistent_hashing" and r.balance_by == "prefill"]
    assert [r.label for r in bounded] == [
        "bounded gap=2 skew=1.5 spill=least_loaded load=prefill",
        "bounded gap=131072 skew=1.5 spill=least_loaded load=prefill weights=tokens",
    ]
    router = bounded[1].make_router(["http://127.0.0.1:9"], 4)
    assert router is not None and router.policy.balance_by == "prefill"
    router.close()


def test_keyed_cache_aware_routes_an_unmatched_request_by_its_key() -> None:
    lines = [_line(0, 4, 1, [1, 2]), _line(1000, 4, 1, [5, 6])]
    config = ReplayConfig(workers=2, load=None, cache_blocks=16, costs=SIMPLE)
    result = replay(ReplayPolicy("cache_aware", 2, 1.5, keyed=True), _trace(lines), config)
    assert result.branches["cache_aware_key_hit"] == 2
    assert result.row()["keyed"] is True and result.row()["blocks_per_worker"] is None


def test_cli_cache_aware_rows(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--trace", FIXTURE, "--workers", "3", "--cache-blocks", "40", "--cache-aware", "--cache-aware-gaps", "2,8", "--json"]
    assert main(argv) == 0
    rows = [r for r in json.loads(capsys.readouterr().out) if r["policy"] == "cache_aware"]
    assert [(r["min_load_gap"], r["max_load_skew"], r["keyed"]) for r in rows] == [(2, 1.0, False), (8, 1.0, False)]
    assert all(r["requests"] == 35 and r["leaked_leases"] == 0 for r in rows)
    assert main(["--trace", FIXTURE, "--cache-aware", "--blocks-per-worker", "9", "--limit", "10"]) == 0
    assert "cache_aware (blocks 9)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--trace", FIXTURE, "--cache-aware", "--blocks-per-worker", "0"])
    assert "blocks_per_worker" in capsys.readouterr().err


# -- router replicas and KV cache events (issue 21) ----------------------------------------------


def test_the_cache_reports_what_it_stored_and_evicted() -> None:
    cache = PrefixCache(capacity_tokens=3 * 512, block_size=512)
    assert cache.insert([1, 2]) == ([1, 2], [])
    assert cache.insert([1, 2, 3]) == ([3], [])  # 1 and 2 were held: only 3 is new
    # 4 and 5 are new; the least recently used go: 3 (touched first in [1, 2, 3], so oldest), then 2.
    assert cache.insert([1, 4, 5]) == ([4, 5], [3, 2])
    # Now 5, 4, 1 from the least recent (touched last-first); a prompt longer than the cache
    # loses its end too.
    assert cache.insert([6, 7, 8, 9]) == ([6, 7, 8, 9], [5, 4, 1, 9])


def test_replicas_each_count_their_own_requests() -> None:
    from bounded_router.simulate.replay import _Run

    trace = load_trace(FIXTURE, 512)
    config = ReplayConfig(workers=3, load=0.8, cache_blocks=40, replicas=4, seed=2)
    state = _Run(ReplayPolicy("cache_aware", 8, 1.0), trace, config)
    routers = state.routing.routers
    assert len(routers) == 4 and len({id(r) for r in routers}) == 4
    state.run()
    routed = [sum(router.branch_counts().values()) for router in routers]
    assert sum(routed) == len(trace.requests) and all(routed), "every request routed once, by one of the replicas"
    for router in routers:
        router.close()
    result = replay(ReplayPolicy("cache_aware", 8, 1.0), trace, config)
    assert sum(result.branches.values()) == len(trace.requests)
    assert result.leaked_leases == 0 and set(result.final_loads.values()) == {0}
    assert result.row()["config"]["replicas"] == 4


def test_with_events_every_replica_learns_each_workers_cache() -> None:
    from bounded_router.simulate.replay import _Run

    trace = load_trace(FIXTURE, 512)
    # The index is larger than the cache, so the routers forget nothing the engines hold: once
    # every request is done and every event delivered, each replica's index of a worker is
    # exactly that worker's cache, whichever replica routed there.
    config = ReplayConfig(workers=3, load=0.8, cache_blocks=40, replicas=3, events_delay_ms=20.0)
    state = _Run(ReplayPolicy("cache_aware", 8, 1.0, blocks_per_worker=400, events=True), trace, config)
    state.run()
    held = [len(worker.cache) for worker in state.workers]
    assert sum(held) > 40, "the fixture fills the caches"
    for router in state.routing.routers:
        assert [w.indexed_blocks for w in router.workers()] == held
        router.close()
    # Without events a replica knows only what it routed itself, and never what was evicted.
    state = _Run(ReplayPolicy("cache_aware", 8, 1.0, blocks_per_worker=400), trace, config)
    state.run()
    held = [len(worker.cache) for worker in state.workers]
    assert all([w.indexed_blocks for w in router.workers()] != held for router in state.routing.routers)
    for router in state.routing.routers:
        router.close()


@pytest.mark.parametrize("delay", [0.0, 5.0])
def test_with_peer_routes_every_replica_learns_every_route(delay: float) -> None:
    from bounded_router.simulate.replay import _Run

    trace = load_trace(FIXTURE, 512)
    # No events, an index larger than every route: a replica's index of a worker is then the
    # blocks routed there, by any replica (docs/contract.md, "Peer routes"), once all arrived.
    config = ReplayConfig(workers=3, load=0.8, cache_blocks=40, replicas=3, peer_routes_ms=delay, load_interval_ms=100.0)
    state = _Run(ReplayPolicy("cache_aware", 8, 1.0, blocks_per_worker=4000), trace, config)
    state.run()
    routed: List[set] = [set() for _ in state.workers]
    for request, worker in zip(trace.requests, state.placements):
        routed[worker].update(request.blocks)
    assert all(routed)
    for router in state.routing.routers:
        assert [w.indexed_blocks for w in router.workers()] == [len(blocks) for blocks in routed]
        assert sum(router.branch_counts().values()) < len(trace.requests), "each routed its share alone"
        router.close()
    assert config.to_dict()["peer_routes_ms"] == delay


def test_cli_replicas_and_events(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--trace", FIXTURE, "--workers", "3", "--cache-blocks", "40", "--cache-aware", "--replicas", "2", "--events-delay-ms", "20", "--json"]
    assert main(argv) == 0
    rows = [r for r in json.loads(capsys.readouterr().out) if r["policy"] == "cache_aware"]
    assert [r["events"] for r in rows] == [False, True]
    assert all(r["config"]["replicas"] == 2 and r["config"]["events_delay_ms"] == 20.0 for r in rows)
    assert all(r["config"]["events_at"] == "step-end" for r in rows)
    assert main(argv + ["--events-at", "schedule", "--limit", "10"]) == 0
    assert {r["config"]["events_at"] for r in json.loads(capsys.readouterr().out)} == {"schedule"}
    with pytest.raises(SystemExit):
        main(["--trace", FIXTURE, "--events-at", "never"])
    assert "--events-at" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--trace", FIXTURE, "--replicas", "0"])
    assert "replicas" in capsys.readouterr().err
    assert main(argv + ["--peer-routes-ms", "5", "--limit", "10"]) == 0
    assert {r["config"]["peer_routes_ms"] for r in json.loads(capsys.readouterr().out)} == {5.0}
    with pytest.raises(ValueError, match="peer_routes_ms"):
        ReplayConfig(replicas=2, peer_routes_ms=-1.0)
    with pytest.raises(ValueError, match="peer_routes_ms needs replicas > 1"):
        ReplayConfig(peer_routes_ms=5.0)
    with pytest.raises(ValueError, match="apply only to cache_aware"):
        ReplayPolicy("random", events=True)


def test_load_reports_reach_every_replica() -> None:
    from bounded_router.simulate.replay import _Run

    trace = load_trace(FIXTURE, 512)
    config = ReplayConfig(workers=3, load=0.8, cache_blocks=40, replicas=2, load_interval_ms=100.0)
    state = _Run(ReplayPolicy("bounded_consistent_hashing", 2, 1.5), trace, config)
    reported: List[Dict[str, int]] = []
    real = state.report_loads

    def spy(now: float) -> None:
        reported.append(dict(zip(state.urls, state.in_flight)))
        real(now)

    state.report_loads = spy  # type: ignore[method-assign]
    state.run()
    assert len(reported) > 10 and any(sum(r.values()) for r in reported), "polled while requests were in flight"
    assert sum(reported[-1].values()) == 0, "the last poll comes after the last request finished"
    for router in state.routing.routers:
        router.close()
    result = replay(ReplayPolicy("bounded_consistent_hashing", 2, 1.5), trace, config)
    assert result.requests == len(trace.requests) and result.leaked_leases == 0
    assert result.row()["config"]["load_interval_ms"] == 100.0
    with pytest.raises(ValueError, match="load_interval_ms"):
        ReplayConfig(load_interval_ms=0)


def _reports_over_time(events_at: str, cache_blocks: int = 16) -> List[tuple]:
    """(time, stored, evicted) of a worker's KV cache events (SIMPLE: chunks of 4 tokens, a step
    of c tokens takes 1 + c ms, blocks of 2 tokens) for a prompt [1..5] then, once it is done, a
    prompt sharing its first 3 blocks, [1, 2, 3, 6, 7]: 10 tokens each, one output token."""
    worker = BatchingWorker(SIMPLE, cache_blocks, 2)
    worker.reports, worker.events_at = [], events_at
    seen: List[tuple] = []

    def take(now: float) -> None:
        assert worker.reports is not None
        seen.extend((now, stored, evicted) for stored, evicted in worker.reports)
        worker.reports.clear()

    now = 0.0
    for ident, blocks in enumerate(([1, 2, 3, 4, 5], [1, 2, 3, 6, 7])):
        worker.add(Job(ident, now, 10, 1, blocks), now)
        end = worker.start(now)
        while end is not None:
            take(now)
            now = end
            worker.complete(now)
            take(now)
            end = worker.start(now)
    return seen


def test_events_report_each_chunk_when_its_step_ends() -> None:
    # The first prompt: steps of 4, 4 and 2 tokens end at 5, 10 and 13 ms. The second finds
    # blocks 1-3 cached (6 tokens), prefills 4 in one step ending at 18 ms, and reports only its
    # new blocks; with room for 6 blocks its entry into the cache evicts 5, the least recent.
    assert _reports_over_time("step-end", cache_blocks=6) == [
        (5.0, [1, 2], []),
        (10.0, [3, 4], []),
        (13.0, [5], []),
        (18.0, [6, 7], []),
        (18.0, [], [5]),
    ]


def test_events_at_schedule_report_a_chunk_when_its_step_starts() -> None:
    assert _reports_over_time("schedule") == [(0.0, [1, 2], []), (5.0, [3, 4], []), (10.0, [5], []), (13.0, [6, 7], [])]


def test_events_at_prefill_end_report_the_prompt_at_once() -> None:
    assert _reports_over_time("prefill-end", cache_blocks=6) == [(13.0, [1, 2, 3, 4, 5], []), (18.0, [6, 7], [5])]
    with pytest.raises(ValueError, match="events_at must be one of step-end, schedule, prefill-end, got 'later'"):
        ReplayConfig(events_at="later")


@pytest.mark.parametrize(
    "events_at, times",
    [("schedule", [0.0, 5.0, 10.0]), ("step-end", [5.0, 10.0, 13.0]), ("prefill-end", [13.0])],
)
def test_the_replay_delivers_each_report_when_the_worker_makes_it(events_at: str, times: List[float]) -> None:
    from bounded_router.simulate.replay import _Run

    # One prompt of 10 tokens in blocks of 2, prefilled 4 tokens a step (steps end at 5, 10, 13 ms).
    trace = _trace([_line(0, 10, 1, [1, 2, 3, 4, 5])])
    config = ReplayConfig(workers=1, load=None, cache_blocks=16, costs=SIMPLE, events_delay_ms=0.0, events_at=events_at)
    state = _Run(ReplayPolicy("cache_aware", 8, 1.0, events=True), trace, config)
    delivered: List[float] = []
    real = state.publish

    def spy(w: int, now: float) -> None:
        delivered.extend(now for _ in state.workers[w].reports or ())
        real(w, now)

    state.publish = spy  # type: ignore[method-assign]
    state.run()
    assert delivered == times
    assert state.routing.routers[0].workers()[0].indexed_blocks == 5
    state.routing.routers[0].close()


@pytest.mark.parametrize("waiting", ["tokens", "uncached", "requests"])
def test_load_reports_carry_the_prefill_queue(waiting: str) -> None:
    """Each report says what an engine would of its prefill queue (docs/trace-replay.md, "The
    prefill load across replicas"): the requests arrived and not yet past their first token,
    as their number, their prompt tokens (from the trace) or the uncached part of those."""
    from bounded_router.simulate.replay import _Run

    trace = load_trace(FIXTURE, 512)
    config = ReplayConfig(workers=3, load=0.8, cache_blocks=40, replicas=2, load_interval_ms=100.0, load_waiting=waiting)
    policy = ReplayPolicy("cache_aware", 131072, 1.0, weights="tokens", balance_by="prefill", events=True)
    state = _Run(policy, trace, config)
    queued: List[Set[int]] = [set() for _ in range(3)]  # trace requests on each worker before their first token
    real_arrive, real_first_token, real_report = state.arrive, state.routing.first_token, state.engine_report
    seen: List[Tuple[Dict[str, int], int, int]] = []

    def arrive(i: int, now: float) -> None:
        real_arrive(i, now)
        queued[state.placements[i]].add(i)

    def first_token(w: int, job: Any) -> None:
        queued[w].remove(job.ident)
        real_first_token(w, job)

    def engine_report(w: int) -> Dict[str, int]:
        report = real_report(w)
        seen.append((report, len(queued[w]), sum(trace.requests[i].input_tokens for i in queued[w])))
        return report

    state.arrive, state.engine_report = arrive, engine_report  # type: ignore[method-assign]
    state.routing.first_token = first_token  # type: ignore[method-assign]
    state.run()
    for router in state.routing.routers:
        router.close()
    assert any(count for _, count, _ in seen), "reported while prompts were queued"
    for report, count, tokens in seen:
        if waiting == "requests":
            assert report == {"waiting_requests": count}
        elif waiting == "tokens":
            assert report == {"waiting": tokens}
        else:
            assert set(report) == {"waiting"} and count <= report["waiting"] <= tokens
    with pytest.raises(ValueError, match="load_waiting must be one of tokens, uncached, requests"):
        ReplayConfig(load_waiting="bytes")
