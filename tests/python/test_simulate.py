"""The simulator: its model, its default run (the upstream A/B), the sweep and the command line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from fractions import Fraction

import pytest

from bounded_router.simulate import DEFAULT_POLICIES, CostModel, PolicySpec, PrefixCache, Workload, run, run_all, sweep
from bounded_router.simulate.__main__ import main
from bounded_router.simulate.model import text_block_keys

SMALL = Workload(groups=40)


@pytest.fixture(scope="module")
def default_results() -> dict:
    return {spec.label: run(spec) for spec in DEFAULT_POLICIES}


def test_default_run_reproduces_the_upstream_mechanism(default_results: dict) -> None:
    strict = default_results["consistent_hashing"]
    assert strict.placement == {"8:0": 400}
    assert strict.spill_fraction == 0.0
    # One cold prefill per group; the 7 other siblings reuse the 1,760-token prefix.
    assert Fraction(strict.cached_tokens, strict.prompt_tokens) == Fraction(7 * 1760, 8 * 2048)
    for gap in (1, 2, 4):
        bounded = default_results["bounded gap=%d skew=1.5" % gap]
        assert bounded.placement == {"6:2": 400}
        assert bounded.spill_fraction == 0.25
        assert bounded.branches["explicit_routing_key_spillover"] == 800
        assert Fraction(bounded.cached_tokens, bounded.prompt_tokens) == Fraction(6 * 1760, 8 * 2048)
        assert bounded.mean_ttft_ms < strict.mean_ttft_ms
        assert bounded.p99_ttft_ms < strict.p99_ttft_ms
        assert bounded.throughput_rps > strict.throughput_rps
        assert bounded.computed_tokens > strict.computed_tokens
    assert default_results["round_robin"].placement == {"4:4": 400}
    assert sum(default_results["random"].placement.values()) == 400
    for result in default_results.values():
        assert result.requests == 3200 and len(result.ttft_ms) == 3200
        assert result.leaked_leases == 0
        assert set(result.final_loads.values()) == {0}


def test_time_to_first_token_follows_the_cost_model(default_results: dict) -> None:
    # Strict: sibling k waits for the cold prefill (2,048 tokens) and k-1 warm ones (288 each).
    strict = default_results["consistent_hashing"]
    expected = [2048 + 288 * k - k for k in range(8)]  # siblings arrive 1 ms apart
    assert sorted(set(round(t, 6) for t in strict.ttft_ms)) == sorted(expected)
    assert strict.p99_ttft_ms == max(expected)


def test_runs_are_deterministic() -> None:
    for spec in (PolicySpec("random"), PolicySpec("bounded_consistent_hashing", 2, 1.25)):
        a = run(spec, replace(SMALL, rate=0.2, seed=5))
        b = run(spec, replace(SMALL, rate=0.2, seed=5))
        assert a.row() == b.row()
        assert a.ttft_ms == b.ttft_ms
    assert run(PolicySpec("random"), replace(SMALL, seed=6)).row() != run(PolicySpec("random"), replace(SMALL, seed=7)).row()


@pytest.mark.parametrize("gap, placement", [(0, "6:2"), (4, "6:2"), (5, "7:1"), (6, "7:1"), (7, "8:0"), (9, "8:0")])
def test_burst_placement_matches_the_spec_vectors(gap: int, placement: str) -> None:
    # contract: "Reference vectors": the 8-sibling burst on two idle workers, skew 1.5.
    result = run(PolicySpec("bounded_consistent_hashing", gap, 1.5), replace(SMALL, groups=10))
    assert result.placement == {placement: 10}


def test_open_loop_and_several_groups_in_flight_finish_every_request() -> None:
    for workload in (replace(SMALL, rate=0.3), replace(SMALL, concurrency=4), replace(SMALL, workers=3, siblings=5)):
        for spec in DEFAULT_POLICIES:
            result = run(spec, workload)
            assert result.requests == len(result.ttft_ms) == workload.requests
            assert sum(result.placement.values()) == workload.groups
            assert set(result.final_loads.values()) == {0}


def test_a_small_cache_keeps_the_start_of_a_prompt() -> None:
    # 1,024 tokens of cache hold the first half of a 2,048-token prompt (blocks are touched
    # last-first, so a prompt's tail is evicted before its prefix): each warm sibling reuses 1,024.
    result = run(PolicySpec("consistent_hashing"), SMALL, CostModel(cache_tokens=1024))
    assert result.cached_tokens == 40 * 7 * 1024
    result = run(PolicySpec("consistent_hashing"), SMALL, CostModel(cache_tokens=0))
    assert result.cached_tokens == 0


def test_prefix_cache_is_an_lru_of_block_chains() -> None:
    cache = PrefixCache(capacity_tokens=4 * 2, block_size=2)  # 4 blocks
    a = text_block_keys("a b c d e".split(), 2)  # 2 whole blocks; "e" is not cached
    assert len(a) == 2
    assert cache.lookup(a) == 0
    cache.insert(a)
    assert cache.lookup(a) == 4
    assert cache.lookup(text_block_keys("a b c x".split(), 2)) == 2  # shares the first block only
    assert cache.lookup(text_block_keys("x b c d".split(), 2)) == 0  # a block matches only after an equal prefix
    b = text_block_keys("p q r s t u".split(), 2)  # 3 more blocks: the least recently used, a's tail, goes
    cache.insert(b)
    assert len(cache) == 4
    assert cache.lookup(a) == 2 and cache.lookup(b) == 6
    cache.clear()
    assert len(cache) == 0 and cache.lookup(a) == 0


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: CostModel(prefill_ms_per_token=-1), "prefill_ms_per_token must be >= 0"),
        (lambda: CostModel(block_size=0), "block_size must be >= 1"),
        (lambda: CostModel(cache_tokens=1.5), "cache_tokens must be an integer"),
        (lambda: Workload(groups=0), "groups must be >= 1"),
        (lambda: Workload(rate=0), "rate must be > 0"),
        (lambda: Workload(shared_prefix_tokens=0, own_tokens=0), "at least one token"),
        (lambda: Workload(concurrency=True), "concurrency must be an integer"),
        (lambda: PolicySpec("bounded_consistent_hashing"), "needs min_load_gap and max_load_skew"),
        (lambda: PolicySpec("random", min_load_gap=1), "apply only to bounded_consistent_hashing"),
        (lambda: PolicySpec("least_loaded"), "unknown policy 'least_loaded'"),
        (lambda: PolicySpec("round_robin", hash_ring="smg"), "hash_ring applies only to consistent_hashing and bounded"),
        (lambda: PolicySpec("consistent_hashing", hash_ring="blake3").make_router(["http://w"]), "hash_ring must be one of"),
    ],
)
def test_bad_settings_are_named(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


@pytest.mark.parametrize("spec", [PolicySpec("consistent_hashing", hash_ring="smg"), PolicySpec("bounded_consistent_hashing", 2, 1.5, "smg")])
def test_policy_spec_hash_ring(spec: PolicySpec) -> None:
    with spec.make_router(["http://w0", "http://w1"]) as router:
        assert router.policy.hash_ring == "smg"  # type: ignore[union-attr]
    assert spec.label.endswith(" ring=smg")
    row = run(spec, replace(SMALL, groups=5)).row()
    assert row["hash_ring"] == "smg" and row["label"] == spec.label


def test_sweep_covers_the_grid_at_each_load() -> None:
    cells = sweep(replace(SMALL, groups=20), gaps=(0, 5, 7), skews=(1.5, 2.0), rates=(0.2,))
    assert len(cells) == 2 * 3 * 2
    assert {c.load for c in cells} == {"closed loop, 1 group in flight", "open loop, 0.2 groups/s"}
    closed = {(c.gap, c.skew): c.result for c in cells if c.load.startswith("closed")}
    assert closed[(0, 1.5)].placement == {"6:2": 20}
    assert closed[(5, 1.5)].placement == {"7:1": 20}
    assert closed[(7, 1.5)].placement == {"8:0": 20}
    # Two workers: the preferred one would need more than twice the mean, i.e. more than everything.
    assert all(closed[(g, 2.0)].spill_fraction == 0 for g in (0, 5, 7))
    row = cells[0].row()
    assert row["load"] and "mean_ttft_vs_strict" in row


def test_run_all_default_policies() -> None:
    results = run_all(replace(SMALL, groups=5))
    assert [r.spec for r in results] == list(DEFAULT_POLICIES)


def test_cli_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--groups", "20"]) == 0
    out = capsys.readouterr().out
    assert "2 workers, 20 groups x 8 siblings" in out
    header = next(line for line in out.splitlines() if line.startswith("policy"))
    for column in ("8:0", "7:1", "6:2", "5:3", "4:4", "spill", "cached", "prefill tok", "mean TTFT", "p99 TTFT", "req/s"):
        assert column in header
    rows = [line.split() for line in out.splitlines() if line.startswith(("consistent", "bounded", "round", "random"))]
    assert [r[0] for r in rows] == ["consistent_hashing"] + ["bounded_consistent_hashing"] * 3 + ["round_robin", "random"]
    assert rows[0][3] == "20" and rows[1][5] == "20"  # strict: 20 x 8:0; bounded gap 1: 20 x 6:2


def test_the_default_run_prints_the_table_of_docs_ab_reproduction(capsys: pytest.CaptureFixture[str]) -> None:
    # Regression (found by a review): the doc calls its table the exact output, and its random
    # row had gone stale when the random policy became seeded.
    import pathlib
    import re

    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "ab-reproduction.md").read_text()
    documented = re.search(r"## Simulated .*?```\n(.*?)```", doc, re.S)
    assert documented is not None
    assert main([]) == 0
    assert capsys.readouterr().out == documented.group(1)


def test_cli_json_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--groups", "10", "--json", "--gaps", "2", "--skew", "1.25"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["consistent_hashing", "bounded_consistent_hashing", "round_robin", "random"]
    for row in rows:
        for key in (
            "policy",
            "min_load_gap",
            "max_load_skew",
            "spill_fraction",
            "placement",
            "cached_token_fraction",
            "mean_ttft_ms",
            "p99_ttft_ms",
            "throughput_rps",
        ):
            assert key in row
        assert sum(row["placement"].values()) == 10
    assert rows[1]["min_load_gap"] == 2 and rows[1]["max_load_skew"] == 1.25
    assert rows[0]["min_load_gap"] is None


def test_cli_sweep_json_and_plots(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    import pathlib

    out = pathlib.Path(str(tmp_path))
    assert main(["--sweep", "--groups", "5", "--sweep-gaps", "1,5", "--sweep-skews", "1.5", "--sweep-rates", "0.3", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 4 and {r["load"] for r in rows} == {"closed loop, 1 group in flight", "open loop, 0.3 groups/s"}
    assert main(["--sweep", "--groups", "5", "--sweep-gaps", "1,5", "--sweep-skews", "1.5,2", "--no-sweep-rates", "--plot", str(out / "s.png")]) == 0
    assert main(["--groups", "5", "--plot", str(out / "r.png")]) == 0
    for name in ("s.png", "r.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--gaps", "1,x"], "--gaps must be a comma-separated list of numbers"),
        (["--skew", "0.5"], "max_load_skew must be a finite number >= 1.0"),
        (["--groups", "0"], "groups must be >= 1"),
        (["--rate", "-1"], "rate must be > 0"),
    ],
)
def test_cli_errors_name_the_setting(argv: list, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


_BLOCK_EXTRAS = textwrap.dedent(
    """
    import sys
    BLOCKED = ("fastapi", "starlette", "httpx", "anyio", "uvicorn", "aiohttp", "matplotlib")
    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError("No module named %r (blocked by the test)" % name)
            return None
    sys.meta_path.insert(0, Blocker())
    """
)


def _run_without_extras(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _BLOCK_EXTRAS + textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


def test_package_works_without_any_extra() -> None:
    done = _run_without_extras(
        """
        import bounded_router, bounded_router.integrations, bounded_router.simulate, bounded_router.metrics
        import bounded_router.testing, bounded_router.testing.mock_worker
        from bounded_router.simulate.__main__ import main
        assert main(["--groups", "3"]) == 0
        for module in ("bounded_router.integrations.asgi", "bounded_router.integrations.aiohttp"):
            try:
                __import__(module)
            except ImportError as e:
                print("IMPORT-ERROR", module, e)
        try:
            main(["--groups", "3", "--plot", "never.png"])
        except SystemExit as e:
            print("PLOT", e.code)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "consistent_hashing" in done.stdout
    assert "IMPORT-ERROR bounded_router.integrations.asgi" in done.stdout
    assert "pip install 'bounded-router[fastapi]'" in done.stdout
    assert "pip install 'bounded-router[aiohttp]'" in done.stdout
    assert "PLOT --plot needs matplotlib, which is not installed: pip install 'bounded-router[plot]'" in done.stdout


def test_smg_policies_place_a_burst_as_their_rules_say() -> None:
    # manual keeps the group's key on one worker; least_load fills the idle workers in turn.
    assert run(PolicySpec("manual"), replace(SMALL, groups=10)).placement == {"8:0": 10}
    assert run(PolicySpec("least_load"), replace(SMALL, groups=10)).placement == {"4:4": 10}
    result = run(PolicySpec("power_of_two"), replace(SMALL, groups=10))
    assert result.placement == {"4:4": 10}  # two workers: both are always drawn, the lighter wins
    assert PolicySpec("manual", assignment_mode="min_load", max_keys=4).label == "manual min_load keys=4"


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: PolicySpec("least_load", max_keys=3), "apply only to manual, not least_load"),
        (lambda: PolicySpec("manual", assignment_mode="delegate").make_router(["http://w"]), "exists in SMG but is not implemented"),
        (lambda: PolicySpec("bucket"), "unknown policy 'bucket'"),
    ],
)
def test_smg_policy_settings_are_named(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_cli_runs_smg_policies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--groups", "5", "--smg-policies", "least_load,manual"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith(("least_load", "manual"))]
    assert names == ["least_load", "manual"]
