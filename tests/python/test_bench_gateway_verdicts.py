"""scripts/bench_gateway.py's verdicts on issue 24's targets and its ratio tables, on figures
made by hand (the script itself needs SMG, HAProxy and minutes of load; these functions do not)."""

import importlib.util
import pathlib
import types
from typing import Dict, List, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_script() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("bench_gateway", ROOT / "scripts" / "bench_gateway.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = load_script()

NAMES = ["direct", "gateway", "gateway, GOMAXPROCS=1", "haproxy"]


def figures(p99: Dict[str, float]) -> Tuple[Dict[Tuple[str, bool], List[float]], Dict[Tuple[str, int], List[float]], Dict[str, List[float]]]:
    """100 latencies per target: 99 at its median (the direct baseline's is 1.0 ms) and one, its
    p99, as given; one throughput and one CPU figure each."""
    median = {"direct": 1.0, "gateway": 1.2, "gateway, GOMAXPROCS=1": 1.15, "haproxy": 1.1}
    latency = {}
    for name in NAMES:
        values = [median[name]] * 99 + [p99[name]]
        latency[(name, False)] = latency[(name, True)] = values
    throughput = {(n, c): [{"direct": 10000.0, "gateway": 6000.0, "gateway, GOMAXPROCS=1": 5000.0, "haproxy": 10000.0}[n]] for n in NAMES for c in (16, 64)}
    cpu = {"direct": [], "gateway": [0.09], "gateway, GOMAXPROCS=1": [0.072], "haproxy": [0.045]}
    return latency, throughput, cpu


def rows_by_target(rows: List[str]) -> Dict[str, List[str]]:
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]
    return {c[0]: c[1:] for c in cells}


def test_the_targets_are_judged_on_the_default_gateway_with_hand_computed_ratios() -> None:
    latency, throughput, cpu = figures({"direct": 2.0, "gateway": 2.5, "gateway, GOMAXPROCS=1": 2.3, "haproxy": 2.2})
    table = rows_by_target(bench.targets_table(NAMES, latency, throughput, cpu))
    assert table["CPU per request against HAProxy"][1:] == ["2.00x", "**not met**"]  # 0.09 / 0.045
    assert table["added median against HAProxy"][1:] == ["2.00x", "**not met**"]  # 0.2 / 0.1
    assert table["added p99 against HAProxy"][1:] == ["2.50x", "**not met**"]  # 0.5 / 0.2
    assert table["req/s at c=64 against HAProxy"][1:] == ["0.60x", "**not met**"]  # 6000 / 10000


def test_an_added_p99_at_or_below_zero_is_noise_not_a_target_met() -> None:
    # The gateway's p99 below the direct baseline's: its added p99 is -0.5 ms, which says nothing.
    latency, throughput, cpu = figures({"direct": 2.0, "gateway": 1.5, "gateway, GOMAXPROCS=1": 2.3, "haproxy": 2.2})
    verdict = rows_by_target(bench.targets_table(NAMES, latency, throughput, cpu))["added p99 against HAProxy"]
    assert "met" not in verdict[-1] and "noise" in verdict[1], verdict


def test_each_gateway_row_gets_its_own_ratios_to_the_peers() -> None:
    latency, throughput, cpu = figures({"direct": 2.0, "gateway": 2.5, "gateway, GOMAXPROCS=1": 2.3, "haproxy": 2.2})
    default = rows_by_target(bench.ratio_table(NAMES, "gateway", latency, throughput, cpu))
    one = rows_by_target(bench.ratio_table(NAMES, "gateway, GOMAXPROCS=1", latency, throughput, cpu))
    assert list(default) == list(one) == ["haproxy"]  # neither baseline nor the other gateway row
    assert default["haproxy"] == ["2.00x", "2.50x", "0.60x", "2.00x"]
    assert one["haproxy"] == ["1.50x", "1.50x", "0.50x", "1.60x"]  # 0.15/0.1, 0.3/0.2, 5000/10000, 0.072/0.045
