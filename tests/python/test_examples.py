"""The examples in examples/ run as documented: a proxy process in front of a mock worker,
streaming through and serving /metrics."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any

import httpx
import pytest
from integration_support import completion, fast_worker, streamed_text, wait_for  # noqa: F401
from support import parse_metrics as parse

from bounded_router.testing.mock_worker import expected_text

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("example", ["fastapi_proxy.py", "aiohttp_proxy.py"])
def test_example_proxies_and_serves_metrics(example: str, fast_worker: Any) -> None:  # noqa: F811
    port = _free_port()
    url = "http://127.0.0.1:%d" % port
    # `timeout` ends the example by itself should this test die before its finally.
    command = ["timeout", "120", sys.executable, os.path.join(EXAMPLES, example), "--port", str(port)]
    command += ["--worker-urls", fast_worker.url, "--policy", "bounded_consistent_hashing", "--min-load-gap", "1"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with httpx.Client(trust_env=False, timeout=60.0) as client:

            def up() -> bool:
                assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
                try:
                    return client.get(url + "/metrics").status_code == 200
                except httpx.TransportError:
                    return False

            wait_for(up, "%s to answer on /metrics" % example)
            r = client.post(url + "/v1/completions", json=completion("e x", 4), headers={"X-SMG-Routing-Key": "g"})
            assert r.status_code == 200
            assert streamed_text(r.text.splitlines()) == expected_text("e x", 4)

            def settled() -> bool:
                m = parse(client.get(url + "/metrics").text)
                return m[("bounded_router_active_leases", ())] == 0

            wait_for(settled, "the example's lease to be released")
            m = parse(client.get(url + "/metrics").text)
            assert m[("bounded_router_requests_total", (("branch", "explicit_routing_key_hit"),))] == 1
            assert m[("bounded_router_worker_load", (("worker", fast_worker.url),))] == 0
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()
