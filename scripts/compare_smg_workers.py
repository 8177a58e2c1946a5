"""SMG's worker API side by side: one registration sequence sent to SMG 1.13.0 and to
``bounded-router serve``, printing both sides' status codes and the fields slime reads.

Not part of CI (it installs SMG into a scratch venv). Run from the repository root with the
package installed (``make install``)::

    .venv/bin/python scripts/compare_smg_workers.py                                # prints the table
    .venv/bin/python scripts/compare_smg_workers.py --write docs/smg-comparison.md  # and writes its section

The sequence, on 127.0.0.1, in front of four mock workers (each gateway started with none): add
the four with ``POST /workers``; list them (``GET /workers``: ``id``, ``url``); route keyed
requests; remove one with ``DELETE /workers/{id}`` while a request streams from it; list; route
again; then the bad inputs (a duplicate, a URL that is not one, an id that is not a UUID, an
unknown UUID). SMG registers in the background (``202`` first, a member later), so the script
waits for its list to show the change before it goes on; bounded-router's change is done when
it answers. ``--write`` puts the table and the differences by design into the section "The
worker API" of a report of scripts/compare_smg.py (which keeps that section when it rewrites the
rest). Every process it starts is stopped by its PID before it exits.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_smg_ring import SMG_VERSION, Gateway, smg_executable  # noqa: E402

from bounded_router.testing.fleet import ServerProcess, start_mock_worker  # noqa: E402

WAIT_S = 60.0
KEYS = ["session-%d" % i for i in range(8)]
UNKNOWN_ID = "01a230d4-5808-7263-b12f-922ed4d0f944"


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting for " + what)
        time.sleep(0.1)


def listed(client: httpx.Client, base: str) -> List[Tuple[str, str]]:
    return [(w["id"], w["url"]) for w in client.get(base + "/workers").json()["workers"]]


def route(client: httpx.Client, base: str) -> List[str]:
    """Each key once: the status, and the worker that answered (X-Mock-Worker)."""
    out = []
    for key in KEYS:
        r = client.post(base + "/v1/completions", json={"model": "mock-model", "prompt": key, "max_tokens": 2}, headers={"X-SMG-Routing-Key": key})
        out.append("%d %s" % (r.status_code, r.headers.get("X-Mock-Worker", "-")))
    return out


def sequence(base: str, urls: Sequence[str], names: Dict[str, str]) -> List[Tuple[str, Any]]:
    """The registration sequence against the gateway at base: (step, what it answered)."""
    rows: List[Tuple[str, Any]] = []
    with httpx.Client(trust_env=False, timeout=WAIT_S) as client:
        for url in urls:
            r = client.post(base + "/workers", json={"url": url, "worker_type": "regular"})
            body = r.json()
            rows.append(("POST /workers %s" % names[url], "%d url=%s worker_id=%s" % (r.status_code, names.get(body.get("url"), "-"), "uuid" if len(body.get("worker_id", "")) == 36 else "-")))
        wait_until(lambda: len(listed(client, base)) == len(urls), "four workers listed")
        members = listed(client, base)
        rows.append(("GET /workers", sorted(names[u] for _, u in members)))
        rows.append(("route 8 keys", route(client, base)))
        leaving = urls[-1]
        (leaving_id,) = [i for i, u in members if u == leaving]
        key = next(k for k in KEYS if _answered_by(client, base, k) == names[leaving])
        stream: Dict[str, Any] = {}
        streaming = threading.Thread(target=_stream, args=(base, key, stream))
        streaming.start()
        wait_until(lambda: "started" in stream, "the stream to start")
        r = client.delete(base + "/workers/" + leaving_id)
        rows.append(("DELETE /workers/{id} of %s while it streams" % names[leaving], "%d %s" % (r.status_code, r.json().get("status"))))
        streaming.join(WAIT_S)
        rows.append(("the stream from the removed worker", stream.get("result")))
        wait_until(lambda: len(listed(client, base)) == len(urls) - 1, "the removal listed")
        rows.append(("GET /workers", sorted(names[u] for _, u in listed(client, base))))
        rows.append(("route 8 keys", route(client, base)))
        for what, call in [
            ("POST /workers duplicate", lambda: client.post(base + "/workers", json={"url": urls[1]})),
            ("POST /workers bad url", lambda: client.post(base + "/workers", json={"url": "not a url"})),
            ("POST /workers no url", lambda: client.post(base + "/workers", json={})),
            ("GET /workers/not-a-uuid", lambda: client.get(base + "/workers/not-a-uuid")),
            ("GET /workers/{unknown uuid}", lambda: client.get(base + "/workers/" + UNKNOWN_ID)),
            ("DELETE /workers/{unknown uuid}", lambda: client.delete(base + "/workers/" + UNKNOWN_ID)),
            ("GET /readiness", lambda: client.get(base + "/readiness")),
            ("GET /liveness", lambda: client.get(base + "/liveness")),
        ]:
            r = call()
            code = r.json().get("code", r.json().get("status")) if r.headers.get("content-type", "").startswith("application/json") else r.text
            rows.append((what, "%d %s" % (r.status_code, code)))
    return rows


def _live(base: str) -> bool:
    try:
        return httpx.get(base + "/liveness", trust_env=False).status_code == 200
    except httpx.TransportError:
        return False


def _answered_by(client: httpx.Client, base: str, key: str) -> str:
    r = client.post(base + "/v1/completions", json={"model": "mock-model", "prompt": key, "max_tokens": 1}, headers={"X-SMG-Routing-Key": key})
    return r.headers.get("X-Mock-Worker", "")


def _stream(base: str, key: str, out: Dict[str, Any]) -> None:
    body = {"model": "mock-model", "prompt": key, "max_tokens": 400, "stream": True}
    with httpx.Client(trust_env=False, timeout=WAIT_S) as client:
        with client.stream("POST", base + "/v1/completions", json=body, headers={"X-SMG-Routing-Key": key}) as r:
            chunks = 0
            for _ in r.iter_lines():
                chunks += 1
                out["started"] = True
            out["result"] = "%d, %d lines, ends with [DONE]: %s" % (r.status_code, chunks, "yes" if chunks > 1 else "no")


HEADING = "## The worker API"

# What differs by design, written under the table (docs/contract.md, "The worker API", has the rules).
DIFFERENCES = """Differences by design:

- Registration is synchronous here: the worker is a member when `202` is answered, and the worker
  is not probed first. SMG queues it, probes the worker (`/get_server_info`, `/v1/models`, ...)
  and lists it once that succeeds; a `DELETE` of an id already queued for removal answers `202`
  again there, `404` here (it is gone).
- `GET /workers` lists `id`, `url`, `worker_type`, `connection_mode`, `is_healthy`, `status` and
  `load`; SMG adds what it discovered from the worker (`model_id`, `models`, `runtime_type`,
  `labels`, `priority`, `cost`, `engine_load`, ...). The `?model=` filter is ignored.
- Ids are UUIDs in both; SMG's are version 7 (time-ordered), these a random per-gateway prefix
  and the router's number of the worker (version 4 bits).
- Refused here, accepted by SMG: `worker_type` `prefill`, `decode` or `encode` (no disaggregation),
  `grpc://`, `grpcs://` and `ipc://` URLs, `PUT` and `PATCH /workers/{id}` (`405`).
- sglang-router's older `/add_worker?url=`, `/remove_worker?url=` and `/list_workers` are served
  here; SMG 1.13.0 answers `404` for all three.
- Who can reach it: SMG serves the worker API on its main port, open unless keys are set
  (`--control-plane-api-keys`, JWT, or the shared `--api-key`). Here it is always on the admin
  listener (`--prometheus-port`, SMG's flag, or `--metrics-port`; `prometheus_port` under
  `launch_router`), and on the proxy port
  only with `--control-plane-api-keys` or `--worker-api-on-proxy-port`. Keys have SMG's
  `id:name:role:key` form; only `admin` keys are accepted, as SMG's middleware requires the admin
  role on these routes (`check_admin_role`); here a `user` key gets `401` like an unknown one, and
  a list with no admin key is refused when the gateway starts. No JWT, no `--api-key` fallback, no audit flag: changes and refusals are
  always logged.
- Worker API bodies are limited to 64 KiB (`413`); SMG applies its `--max-payload-size`.
- Error bodies have SMG's form, `{"error": ..., "code": ...}`, with the same codes where both
  refuse; the messages differ."""


def section(rows_by_target: Dict[str, List[Tuple[str, Any]]]) -> str:
    """The report section: the two sides' answers step by step, then the differences."""
    (a, rows_a), (b, rows_b) = rows_by_target.items()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [HEADING, "", "Written by `scripts/compare_smg_workers.py` from one run on %s, CPython %s, 4 mock workers on 127.0.0.1." % (stamp, platform.python_version()), ""]
    out += ["| step | %s | %s |" % (a, b), "|---|---|---|"]
    for (step, left), (_, right) in zip(rows_a, rows_b):
        out.append("| %s | %s | %s |" % (step, _cell(left), _cell(right) if right != left else "same"))
    return "\n".join(out + ["", DIFFERENCES]) + "\n"


def _cell(value: Any) -> str:
    return ", ".join(value) if isinstance(value, list) else str(value)


def with_section(report: str, text: str) -> str:
    """report with its worker API section replaced by text (appended when it has none)."""
    start = report.find(HEADING)
    if start < 0:
        return report.rstrip("\n") + "\n\n" + text
    end = report.find("\n## ", start + len(HEADING))
    return report[:start] + text + ("" if end < 0 else report[end:])


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", default="/tmp/bounded-router-smg-" + SMG_VERSION, help="scratch venv for smg")
    parser.add_argument("--write", metavar="FILE.md", help="also put the section into this report")
    args = parser.parse_args(list(argv) or None)
    smg = smg_executable(args.venv)
    workers = [start_mock_worker("w%d" % i, time_scale=0.05, lifetime=600) for i in range(4)]
    try:
        urls = [w.url for w in workers]
        names = {w.url: "w%d" % i for i, w in enumerate(workers)}
        results: Dict[str, List[Tuple[str, Any]]] = {}
        smg_gateway = Gateway(smg, [])
        try:
            wait_until(lambda: _live(smg_gateway.url), "smg to listen")
            results["smg " + SMG_VERSION] = sequence(smg_gateway.url, urls, names)
        finally:
            smg_gateway.stop()
        with ServerProcess("serve", "bounded_router", ["serve", "--port", "0", "--worker-api-on-proxy-port", "--policy", "consistent_hashing", "--hash-ring", "smg"]) as serve:
            results["bounded-router serve"] = sequence(serve.url, urls, names)
    finally:
        for w in workers:
            w.stop()
    text = section(results)
    print(text)
    if args.write:
        with open(args.write) as f:
            report = f.read()
        with open(args.write, "w") as f:
            f.write(with_section(report, text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
