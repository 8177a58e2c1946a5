"""SMG's worker API on the native gateway (docs/contract.md, "The worker API") as slime uses it:
engines register with POST /workers, rollouts route by X-SMG-Routing-Key, an engine leaves
through GET /workers + DELETE /workers/{id}; launch_router started the way slime starts
sglang_router's. The bad inputs one by one are in gateway/workers_api_test.go. Every process is
on 127.0.0.1 and stopped by its PID."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import subprocess
import sys
from typing import Dict, Iterator, List

import httpx
import pytest
from integration_support import WAIT_S, wait_for

from bounded_router import Router
from bounded_router.launch_router import RouterArgs, launch_router, unsupported_settings
from bounded_router.testing.fleet import ServerProcess, start_mock_worker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCHER = os.path.join(ROOT, "examples", "slime_style_launcher.py")


@pytest.fixture(scope="module")
def engines() -> Iterator[List[ServerProcess]]:
    started = [start_mock_worker("engine-%d" % i, time_scale=0.001, lifetime=300) for i in range(3)]
    try:
        yield started
    finally:
        for engine in started:
            engine.stop()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rollout(client: httpx.Client, base: str, session: str) -> str:
    """One turn of a session, with its key as slime's agent adapters send it (its SGLang rollouts
    only under its --router-policy consistent_hashing: README, "slime"); the engine that answered."""
    body = {"model": "mock-model", "prompt": "turn of " + session, "max_tokens": 2}
    response = client.post(base + "/v1/completions", json=body, headers={"X-SMG-Routing-Key": session})
    assert response.status_code == 200, response.text
    return response.headers["X-Mock-Worker"]


def test_a_launcher_written_like_slimes(engines: List[ServerProcess]) -> None:
    port = free_port()
    argv = [sys.executable, LAUNCHER, "--sglang-router-port", str(port), "--router-worker-api-on-proxy-port"]
    launcher = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = "http://127.0.0.1:%d" % port
    try:
        with httpx.Client(trust_env=False, timeout=WAIT_S) as client:
            wait_for(lambda: _answers(client, base + "/liveness"), "the gateway to listen")
            assert client.get(base + "/readiness").status_code == 503  # no engine yet
            for engine in engines:  # slime's SGLangEngine.init: POST /workers on the router port
                response = client.post(base + "/workers", json={"url": engine.url, "worker_type": "regular"})
                response.raise_for_status()
            assert client.get(base + "/readiness").json()["healthy_workers"] == 3
            sessions = ["session-%d" % i for i in range(12)]
            placed: Dict[str, str] = {s: rollout(client, base, s) for s in sessions}
            for _ in range(3):  # every later turn of a session goes where its first went
                assert {s: rollout(client, base, s) for s in sessions} == placed
            assert len(set(placed.values())) > 1, "twelve sessions all on one engine: %r" % placed
            # slime's SGLangEngine.shutdown: find the engine's id by its URL, then DELETE it.
            leaving = engines[0]
            listed = client.get(base + "/workers").json()["workers"]
            (worker_id,) = [w["id"] for w in listed if w["url"] == leaving.url]
            client.delete(base + "/workers/" + worker_id).raise_for_status()
            assert sorted(w["url"] for w in client.get(base + "/workers").json()["workers"]) == sorted(e.url for e in engines[1:])
            after = {s: rollout(client, base, s) for s in sessions}
            assert "engine-0" not in after.values()
            assert all(after[s] == placed[s] for s in sessions if placed[s] != "engine-0"), "sessions on engines that stayed moved"
    finally:
        launcher.send_signal(signal.SIGTERM)
        _, stderr = launcher.communicate(timeout=WAIT_S)
    assert launcher.returncode == 0, stderr
    # The launcher writes these; those that are not RouterArgs fields are named once, together.
    fields = {field.name for field in dataclasses.fields(RouterArgs)}
    unsupported = [w for w in ("disable_circuit_breaker=True", "request_timeout_secs=14400") if w.split("=")[0] not in fields]
    warnings = [line for line in stderr.splitlines() if "has no equivalent" in line]
    assert len(warnings) == (1 if unsupported else 0), stderr
    assert all(written in warnings[0] for written in unsupported)


def _answers(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.TransportError:
        return False


def test_the_readmes_slime_flags_make_slimes_rollouts_send_the_key() -> None:
    # Regression (found by a review): the README had slime's rollouts route by the key whatever
    # the policy, but slime (THUDM/slime 624b824a, slime/rollout/sglang_rollout.py:199-200 and
    # sglang_streaming_rollout.py:90-91) sends X-SMG-Routing-Key only when its
    # args.router_policy == "consistent_hashing". The README's flags for slime must pass that
    # test and give slime the router's address, so that slime starts none of its own
    # (slime/ray/rollout.py:923).
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read().replace("\n  ", " ")
    found = re.search(r"and to slime `([^`]*)`", readme)
    assert found, "the README's flags for slime"
    parser = argparse.ArgumentParser()
    parser.add_argument("--sglang-router-ip")
    parser.add_argument("--sglang-router-port", type=int)
    RouterArgs.add_cli_args(parser, use_router_prefix=True, exclude_host_port=True)
    args = parser.parse_args(found.group(1).split())
    assert args.sglang_router_ip is not None and args.sglang_router_port is not None
    assert getattr(args, "router_policy", None) == "consistent_hashing"


@pytest.mark.parametrize("prefix", [False, True])
def test_router_args_take_smgs_prometheus_port_flag(prefix: bool) -> None:
    # Regression (found by a review): RouterArgs had the field but no flag, so a launcher built
    # on add_cli_args and from_cli_args could not set the admin port, as it can with SMG's.
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=prefix)
    args = parser.parse_args(["--router-prometheus-port" if prefix else "--prometheus-port", "29000"])
    assert RouterArgs.from_cli_args(args, use_router_prefix=prefix).gateway_options()["metrics_port"] == 29000


def test_python_m_launch_router_serves_as_smgs_does(engines: List[ServerProcess]) -> None:
    # Regression (found by a review): python -m bounded_router.launch_router did nothing and exited
    # 0, where python -m smg.launch_router --worker-urls ... serves (smg/launch_router.py, main).
    done = subprocess.run([sys.executable, "-m", "bounded_router.launch_router", "--help"], capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0 and "--worker-urls" in done.stdout and "--prometheus-port" in done.stdout
    args = ["--port", "0", "--prometheus-port", "0", "--disable-health-check", "--worker-urls", engines[1].url]
    with ServerProcess("launch_router", "bounded_router.launch_router", args) as router:
        with httpx.Client(trust_env=False, timeout=WAIT_S) as client:
            assert rollout(client, router.url, "session-1") == "engine-1"
            assert client.get(router.metrics_url + "/workers").json()["workers"][0]["url"] == engines[1].url
        router.process.terminate()
        assert router.process.wait(WAIT_S) == 0


def test_unsupported_settings_are_the_attributes_that_are_not_fields() -> None:
    args = RouterArgs(worker_urls=["http://127.0.0.1:9"])
    args.prometheus_port = 4000  # a field: it takes effect
    args.pd_disaggregation = True  # type: ignore[attr-defined]
    args.disable_circuit_breaker = True  # a field since the worker-failure settings: it takes effect
    args.enable_igw = True  # type: ignore[attr-defined]
    assert unsupported_settings(args) == ["enable_igw", "pd_disaggregation"]
    assert args.circuit_breaker_config() is False
    assert args.gateway_options()["metrics_port"] == 4000


def test_slimes_flags_parse_with_the_router_prefix() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sglang-router-port", type=int)
    RouterArgs.add_cli_args(parser, use_router_prefix=True, exclude_host_port=True)
    args = parser.parse_args(["--router-policy", "manual", "--router-control-plane-api-keys", "k1:ops:admin:s3cret", "k2:ro:user:other"])
    router_args = RouterArgs.from_cli_args(args, use_router_prefix=True)
    assert router_args.policy == "manual" and router_args.worker_urls == []
    assert router_args.control_plane_keys() == ["s3cret"]
    assert router_args.worker_api_on_proxy_port is False


@pytest.mark.parametrize(
    "entries, says",
    [
        (["secret"], "control_plane_api_keys[0] must be ID:NAME:ROLE:KEY"),
        (["k:n:root:secret"], "with ROLE admin or user"),
        (["k:n:admin:"], "control_plane_api_keys[0]"),
        (["k:n:user:secret"], "no key has the role admin"),
    ],
)
def test_bad_control_plane_keys_are_refused_naming_them(entries: List[str], says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        RouterArgs(control_plane_api_keys=entries).control_plane_keys()
    with pytest.raises(ValueError, match=re.escape(says)):
        launch_router(RouterArgs(control_plane_api_keys=entries))


def test_serve_with_a_key_starts_without_workers_and_refuses_without_it(engines: List[ServerProcess]) -> None:
    args = ["serve", "--port", "0", "--control-plane-api-keys", "ops:Operators:admin:s3cret"]
    with ServerProcess("serve", "bounded_router", args) as serve, httpx.Client(trust_env=False, timeout=WAIT_S) as client:
        registration = {"url": engines[1].url}
        refused = client.post(serve.url + "/workers", json=registration)
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == 'Bearer realm="control-plane"'
        wrong = client.post(serve.url + "/workers", json=registration, headers={"Authorization": "Bearer other"})
        assert wrong.status_code == 401
        key = {"Authorization": "Bearer s3cret"}
        assert client.post(serve.url + "/workers", json=registration, headers=key).status_code == 202
        assert client.get(serve.url + "/workers").status_code == 401
        assert [w["url"] for w in client.get(serve.url + "/workers", headers=key).json()["workers"]] == [engines[1].url]
        assert rollout(client, serve.url, "s") == "engine-1"


@pytest.mark.parametrize("flag", ["--prometheus-port", "--metrics-port"])
def test_serve_with_only_an_admin_port_starts_without_workers(flag: str, engines: List[ServerProcess]) -> None:
    # Regression (found by a review): after --metrics-port became an alias of --prometheus-port,
    # the check read the old destination, and serve refused to start (contract, "The worker API":
    # the admin listener always serves it).
    with ServerProcess("serve", "bounded_router", ["serve", "--port", "0", flag, "0"]) as serve, httpx.Client(trust_env=False, timeout=WAIT_S) as client:
        assert client.post(serve.metrics_url + "/workers", json={"url": engines[1].url}).status_code == 202
        assert rollout(client, serve.url, "s") == "engine-1"


def test_serve_without_workers_needs_a_way_to_register_them() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bounded_router", "serve", "--port", "0"],
        capture_output=True, text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2 and "--worker-urls" in done.stderr and "worker API" in done.stderr


def test_the_worker_api_changes_the_routers_own_membership(engines: List[ServerProcess]) -> None:
    """The gateway's membership is the Python router's: a registration shows in router.workers(),
    and Python's remove_worker shows in GET /workers."""
    with Router([engines[2].url]) as router, router.serve(metrics_port=0) as gateway, httpx.Client(trust_env=False) as client:
        admin = "http://%s" % gateway.metrics_address
        assert client.post(gateway.url + "/workers", json={"url": engines[0].url}).status_code != 202, "not on the proxy port"
        assert [w.url for w in router.workers()] == [engines[2].url]
        assert client.post(admin + "/workers", json={"url": engines[0].url}).status_code == 202
        assert [w.url for w in router.workers()] == [engines[2].url, engines[0].url]
        router.remove_worker(engines[2].url)
        assert [w["url"] for w in client.get(admin + "/workers").json()["workers"]] == [engines[0].url]
        assert client.get(admin + "/metrics").status_code == 200


def test_serve_refuses_a_key_of_the_wrong_form_naming_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bounded_router", "serve", "--port", "0", "--control-plane-api-keys", "just-a-secret"],
        capture_output=True, text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2 and "--control-plane-api-keys[0] must be ID:NAME:ROLE:KEY" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan")])
def test_a_request_timeout_below_or_not_above_0_is_refused(timeout: float) -> None:
    # Regression (found by a review): launch_router(RouterArgs(request_timeout_secs=0)) served with
    # the library's default (0 means it there), and nan failed in the JSON parser.
    args = RouterArgs(worker_urls=["http://127.0.0.1:9"], request_timeout_secs=timeout)
    with pytest.raises(ValueError, match="request_timeout_secs must be a number of seconds above 0"):
        args.gateway_options()
