"""``python -m bounded_router.integrations.serve`` as a user runs it: its command line, its metrics
port, and its lifetime. The HTTP cases it shares with the proxies are in test_http_adversarial.py.
Every process is started on 127.0.0.1 and stopped by its PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import List, Set

import httpx
import pytest
from echo_worker import WAIT_S, EchoWorker

from bounded_router.testing.fleet import ServerProcess

SERVE = [sys.executable, "-m", "bounded_router.integrations.serve"]


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--port", "99999"], "--port"),
        (["--port", "-1"], "--port"),
        (["--metrics-port", "http"], "--metrics-port"),
        # An address this machine does not have: binding fails at once, no packet is sent (a name
        # would be looked up through the DNS server, which is not on loopback).
        (["--host", "192.0.2.1"], "192.0.2.1"),
        (["--log-level", "nonsense"], "--log-level"),
        (["--lifetime", "-5"], "--lifetime"),
        (["--lifetime", "nan"], "--lifetime"),
        (["--max-body-size", "0"], "--max-body-size"),
        (["--first-byte-timeout", "-1"], "--first-byte-timeout"),
        (["--max-load-skew", "0.5"], "--max-load-skew"),
        (["--routing-key-headers", "a b"], "--routing-key-headers"),
        (["--worker-urls", "127.0.0.1:18101"], "has no scheme"),
        (["--policy", "bucket"], "exists in SMG but is not implemented"),
        (["--policy", "manual", "--max-keys", "0"], "--max-keys"),
        (["--worker-api-on-proxy-port"], "only the native gateway"),
        (["--control-plane-api-keys", "k:n:admin:s"], "only the native gateway"),
        # Regression (found by an audit): a traceback and exit 1, the router left running.
        (["--retry-max-retries", "99"], "--retry-max-retries"),
        # Regressions (found by a review): a non-finite time failed with a JSON error naming no
        # flag, and --request-timeout-secs, which only the native gateway keeps, was taken and
        # ignored.
        (["--health-check-interval-secs", "nan"], "argument --health-check-interval-secs"),
        (["--request-timeout-secs", "60"], "--request-timeout-secs applies to the native gateway"),
        (["--request-timeout-secs", "1800"], "--request-timeout-secs applies to the native gateway"),  # its default too
        (["--policy", "random", "--random-seed", "-1"], "argument --random-seed"),
        # The engine feeds are the native gateway's flags (README, "integrations.serve").
        (["--load-poll-interval-secs", "5"], "--load-poll-interval-secs needs --load-poll"),
        (["--block-size", "0"], "--block-size must be a positive integer"),
        (["--max-payload-size", "0"], "--max-payload-size must be a positive integer"),
        (["--kv-events", "http://127.0.0.1:9=tcp://127.0.0.1:7"], "--kv-events apply only to cache_aware"),
    ],
)
def test_a_bad_flag_is_a_usage_error_naming_it(flags: List[str], named: str) -> None:
    done = subprocess.run(
        SERVE + ["--worker-urls", "http://127.0.0.1:9", "--port", "0"] + flags,
        capture_output=True, text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    error, hint = done.stderr.splitlines()
    assert error.startswith("python -m bounded_router.integrations.serve: error: ") and named in error
    assert hint.startswith("usage: python -m bounded_router.integrations.serve --worker-urls URL [URL ...]")


def test_it_has_the_native_gateways_flags_but_those_the_readme_names() -> None:
    # Regression (found by a review): the README said "the same flags as bounded-router serve",
    # and nine of them were unrecognized. The engine feeds and peer routes are shared now; the
    # README names the gateway's own, which this proxy lacks or refuses.
    import re

    def flags(module: List[str]) -> Set[str]:
        done = subprocess.run([sys.executable, "-m"] + module + ["--help"], capture_output=True, text=True, timeout=WAIT_S)
        assert done.returncode == 0, done.stderr
        return set(re.findall(r"--[a-z][a-z0-9-]*[a-z0-9]", done.stdout))

    native, python = flags(["bounded_router", "serve"]), flags(["bounded_router.integrations.serve"])
    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read().replace("\n", " ")
    said = re.search(r"the flags of `bounded-router serve` but the gateway's own, (.*?)\(its limits", readme)
    assert said, "the README's sentence on integrations.serve's flags"
    named = set(re.findall(r"`(--[a-z-]+)`", said.group(1)))
    refused = {"--control-plane-api-keys", "--worker-api-on-proxy-port", "--request-timeout-secs"}
    assert native - (python - refused) == named


def test_metrics_are_only_on_their_own_port(worker: EchoWorker) -> None:
    args = ["--port", "0", "--metrics-port", "0", "--worker-urls", worker.url]
    with ServerProcess("serve", "bounded_router.integrations.serve", args) as serve:
        on_proxy = httpx.get(serve.url + "/metrics", trust_env=False)
        assert on_proxy.json()["target"] == "/metrics", "the proxy port forwards /metrics like any path"
        metrics = httpx.get(serve.metrics_url + "/metrics", trust_env=False).text
        assert 'bounded_router_worker_load{worker="%s"} 0' % worker.url in metrics
        assert 'bounded_router_requests_total{branch="random_fallback"} 1' in metrics
    assert worker.paths() == [b"/metrics"]


def test_routing_key_headers_flag_reaches_the_proxy(worker: EchoWorker) -> None:
    args = ["--port", "0", "--metrics-port", "0", "--policy", "consistent_hashing", "--routing-key-headers", "X-Session-Id"]
    with ServerProcess("serve", "bounded_router.integrations.serve", args + ["--worker-urls", worker.url]) as serve:
        httpx.get(serve.url + "/a", headers={"X-Session-Id": "s"}, trust_env=False)
        httpx.get(serve.url + "/b", headers={"X-SMG-Routing-Key": "s"}, trust_env=False)
        metrics = httpx.get(serve.metrics_url + "/metrics", trust_env=False).text
        assert 'bounded_router_requests_total{branch="routing_key_hit"} 1' in metrics
        assert 'bounded_router_requests_total{branch="random_fallback"} 1' in metrics


def test_without_a_metrics_port_there_are_no_metrics(worker: EchoWorker) -> None:
    with ServerProcess("serve", "bounded_router.integrations.serve", ["--port", "0", "--worker-urls", worker.url]) as serve:
        assert serve.metrics_url == ""
        assert httpx.get(serve.url + "/metrics", trust_env=False).json()["target"] == "/metrics"


def test_it_keeps_serving_after_the_process_that_started_it_exits(worker: EchoWorker) -> None:
    # A shell starts serve in the background, prints its PID and exits at once.
    script = '%s --port 0 --worker-urls %s > "$1" 2>&1 & echo $!' % (" ".join(SERVE), worker.url)
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), "serve-orphan-%d.log" % os.getpid())
    pid = int(subprocess.run(["sh", "-c", script, "sh", out], capture_output=True, text=True, timeout=WAIT_S, check=True).stdout)
    try:
        deadline = time.monotonic() + WAIT_S
        url = ""
        while not url and time.monotonic() < deadline:
            with open(out) as log:
                url = next((line.rsplit(" ", 1)[1].strip() for line in log if line.startswith("proxy listening on")), "")
            time.sleep(0.05)
        assert url, "serve did not start"
        time.sleep(0.5)  # a parent-exit check would have fired by now: it polled every 0.2 s
        assert httpx.get(url + "/v1/models", trust_env=False).json()["target"] == "/v1/models"
    finally:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        os.remove(out)
