"""Start mock workers and routing proxies as real processes on loopback, and stop them.

Every process is started with a ``--lifetime`` (it exits by itself even if nobody stops it) and
also exits when the process that started it is gone; :meth:`ServerProcess.stop` (or leaving the
``with`` block) ends it at once.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import time
from types import TracebackType
from typing import List, Optional, Sequence, Tuple, Type

from ..simulate.model import CostModel
from .mock_worker import DEFAULT_MODEL_NAME

__all__ = ["ServerProcess", "kv_event_endpoints", "start_mock_worker", "start_proxy"]


class ServerProcess:
    """A server started with ``python -m MODULE ARGS`` that prints ``... listening on URL``.

    A ``metrics listening on URL`` line printed before it is kept in :attr:`lines`.
    """

    def __init__(self, name: str, module: str, args: Sequence[str], startup_timeout: float = 60.0) -> None:
        self.name = name
        self._log = tempfile.TemporaryFile(mode="w+", prefix="bounded-router-%s-" % name)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            [sys.executable, "-m", module] + list(args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            # Unbuffered: readline() then takes no more than one line, so select() sees the next.
            bufsize=0,
            env=env,
        )
        self.url = ""
        #: The lines the process printed before it said it was listening, that one included.
        self.lines: List[str] = []
        try:
            self.url = self._wait_ready(startup_timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.1)
            if ready:
                line = self.process.stdout.readline().decode("utf-8", "replace")
                self.lines.append(line)
                if " listening on " in line and not line.startswith("metrics "):
                    return line.rsplit(" listening on ", 1)[1].strip()
                if not line and self.process.poll() is not None:
                    break
            elif self.process.poll() is not None:
                break
        raise RuntimeError("%s did not start (exit status %s): %s" % (self.name, self.process.poll(), self.log() or "no output"))

    @property
    def metrics_url(self) -> str:
        """The URL of the ``metrics listening on URL`` line, or "" if the process printed none."""
        found = [line.rsplit(" ", 1)[1].strip() for line in self.lines if line.startswith("metrics listening on ")]
        return found[0] if found else ""

    def log(self) -> str:
        """What the process wrote to stderr so far."""
        self._log.seek(0)
        return self._log.read()

    def stop(self) -> None:
        """End the process (SIGTERM, then SIGKILL after 5 s) and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.stop()
        self._log.close()


def start_mock_worker(
    name: str,
    cost: CostModel = CostModel(),
    time_scale: float = 0.01,
    lifetime: float = 900.0,
    model_name: str = DEFAULT_MODEL_NAME,
    kv_events: bool = False,
    port: int = 0,
    clock: str = "wall",
) -> ServerProcess:
    """A mock worker process (see :mod:`bounded_router.testing.mock_worker`) on 127.0.0.1, on
    ``port`` (0: any free port; a port in use makes the start fail); ``kv_events`` publishes its
    cache's KV events on free ports (:func:`kv_event_endpoints`); ``clock`` is its ``--clock``."""
    args = [
        "--name", name,
        "--model-name", model_name,
        "--port", str(port),
        "--time-scale", repr(time_scale),
        "--lifetime", repr(lifetime),
        "--prefill-ms-per-token", repr(cost.prefill_ms_per_token),
        "--prefill-overhead-ms", repr(cost.prefill_overhead_ms),
        "--decode-ms-per-token", repr(cost.decode_ms_per_token),
        "--block-size", str(cost.block_size),
        "--cache-tokens", str(cost.cache_tokens),
        "--clock", clock,
    ]  # fmt: skip
    if kv_events:
        args += ["--kv-events-port", "0", "--kv-events-replay-port", "0"]
    return ServerProcess("mock worker %s" % name, "bounded_router.testing.mock_worker", args)


def kv_event_endpoints(worker: ServerProcess) -> Tuple[str, str]:
    """The KV event endpoint and replay endpoint a mock worker started with ``kv_events`` printed."""
    for line in worker.lines:
        if " publishing KV events on " in line:
            endpoint, _, replay = line.split(" publishing KV events on ", 1)[1].strip().partition(" (replay ")
            return endpoint, replay.rstrip(")")
    raise ValueError("%s publishes no KV events (start it with kv_events=True)" % worker.name)


def start_proxy(
    worker_urls: List[str],
    policy: str,
    min_load_gap: Optional[int] = None,
    max_load_skew: Optional[float] = None,
    lifetime: float = 900.0,
    native: bool = True,
    flags: Sequence[str] = (),
) -> ServerProcess:
    """A routing proxy process on 127.0.0.1, with its metrics on a port of their own
    (:attr:`ServerProcess.metrics_url`): the native gateway (``python -m bounded_router serve``),
    or with ``native=False`` the Python one (``python -m bounded_router.integrations.serve``);
    ``flags`` are more of its flags (``["--prefix-blocks", "text"]``)."""
    module, command = ("bounded_router", ["serve"]) if native else ("bounded_router.integrations.serve", [])
    args = command + ["--port", "0", "--metrics-port", "0", "--lifetime", repr(lifetime), "--policy", policy] + list(flags)
    args += ["--worker-urls"] + list(worker_urls)
    if min_load_gap is not None:
        args += ["--min-load-gap", str(min_load_gap)]
    if max_load_skew is not None:
        args += ["--max-load-skew", repr(max_load_skew)]
    return ServerProcess("proxy (%s)" % policy, module, args)
