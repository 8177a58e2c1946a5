"""What every HTTP proxy of the package does the same way (standard library only): which headers
and paths it forwards, the requests it refuses, and the error bodies it answers with.

The rules are those of docs/contract.md, section "HTTP proxies".
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Sequence, Set, Tuple, TypeVar
from urllib.parse import unquote_to_bytes, urlsplit

from ..errors import NoWorkerAvailableError
from ..health import RetryConfig
from .options import ProxyOptions

if TYPE_CHECKING:  # pragma: no cover
    from ..lease import Lease
    from ..router import Router

S = TypeVar("S", str, bytes)

#: Where the proxies log: worker failures at WARNING (naming the worker, for operators), and
#: how each forwarded request ended at DEBUG.
log = logging.getLogger("bounded_router.integrations")

#: Hop-by-hop headers (RFC 9110 section 7.6.1), never forwarded in either direction.
HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer",
     "trailers", "transfer-encoding", "upgrade")
)  # fmt: skip
#: Request headers the proxy sets itself: the worker's host, and the length of the body it sends.
REQUEST_RESET = HOP_BY_HOP | {"host", "content-length"}

WORKER_HEADER = "x-bounded-router-worker"
BRANCH_HEADER = "x-bounded-router-branch"

# A path with only valid percent-escapes.
_ESCAPED = re.compile(rb"(?:[^%]|%[0-9A-Fa-f]{2})*")
_SEPARATORS = re.compile(rb"[/\\]")


class Refused(Exception):
    """A request the proxy answers itself, before any lease is taken."""

    def __init__(self, status: int, message: str, headers: Sequence[Tuple[str, str]] = (), **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.headers = list(headers)
        self.fields = fields

    def body(self) -> bytes:
        return json_error(str(self), **self.fields)


def _lower(name: Any) -> str:
    return (name.decode("latin-1") if isinstance(name, bytes) else str(name)).lower()


def forward_headers(headers: Iterable[Tuple[S, S]], dropped: Iterable[str] = HOP_BY_HOP) -> List[Tuple[S, S]]:
    """``headers`` without those in ``dropped`` and those named in a ``Connection`` header."""
    pairs = list(headers)
    named: Set[str] = set(dropped)
    for name, value in pairs:
        if _lower(name) == "connection":
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            named.update(token.strip().lower() for token in text.split(","))
    return [(n, v) for n, v in pairs if _lower(n) not in named]


def check_header_size(headers: Iterable[Tuple[S, S]], options: ProxyOptions) -> None:
    """Refuse (431) a request whose header lines add up to more than ``max_header_bytes``."""
    size = sum(len(n) + len(v) + 4 for n, v in headers)
    if size > options.max_header_bytes:
        raise Refused(431, "request headers are larger than max_header_bytes (%d bytes)" % options.max_header_bytes)


def check_declared_body(content_length: Optional[int], options: ProxyOptions) -> None:
    """Refuse (413) at once a request that declares a body over ``max_body_size``."""
    if content_length is not None and content_length > options.max_body_size:
        raise _too_large(options)


def count_body(size: int, options: ProxyOptions) -> None:
    """Refuse (413) a body that has grown past ``max_body_size`` while it was read."""
    if size > options.max_body_size:
        raise _too_large(options)


def _too_large(options: ProxyOptions) -> Refused:
    return Refused(413, "request body is larger than max_body_size (%d bytes)" % options.max_body_size)


def body_timed_out(options: ProxyOptions) -> Refused:
    return Refused(408, "request body did not arrive within body_timeout (%g s)" % options.body_timeout)


def check_path(raw_path: bytes) -> bytes:
    """``raw_path`` (without the query), refused (400) unless it stays below where it points.

    Refused: a path not starting with ``/``, an invalid percent-escape, a NUL byte, or a ``.``
    or ``..`` segment once decoded (``%2F`` and ``\\`` count as separators), since a worker that
    decodes and normalises the path would resolve it outside the prefix it was sent under.
    """
    if not raw_path.startswith(b"/"):
        raise Refused(400, "request path must start with '/'")
    if b"%" in raw_path:
        if not _ESCAPED.fullmatch(raw_path):
            raise Refused(400, "request path has an invalid percent-escape")
        decoded = unquote_to_bytes(raw_path)
    else:
        decoded = raw_path
    if b"\x00" in decoded:
        raise Refused(400, "request path contains a NUL byte")
    if b"." in decoded and any(s in (b".", b"..") for s in _SEPARATORS.split(decoded)):
        raise Refused(400, "request path has a '.' or '..' segment")
    return raw_path


def below_mount(raw_path: bytes, mount_path: str) -> bytes:
    """``raw_path`` relative to the (decoded) path an app is mounted at, e.g. ``/raw``."""
    mount = mount_path.rstrip("/")
    if not mount:
        return raw_path
    depth = mount.count("/")
    parts = raw_path.split(b"/", depth + 1)
    if unquote_to_bytes(b"/".join(parts[: depth + 1])) != mount.encode():
        raise Refused(400, "request path is not below the path the proxy is mounted at")
    return b"/" + parts[depth + 1] if len(parts) > depth + 1 else b"/"


def worker_path(worker_url: str, raw_path: bytes) -> str:
    """The path to ask ``worker_url`` for: the worker's own path (if any), then the client's,
    every byte as it came (docs/contract.md, "HTTP proxies", step 5). The HTTP clients would
    percent-encode what they find unsafe in it and cut it at a "#": the proxies hand it to them
    as it is (see ASGIProxy's _ClientTargetURL, AiohttpProxy's URL.build)."""
    own = urlsplit(worker_url).path.rstrip("/")
    return own + raw_path.decode("latin-1")


def json_error(message: str, **fields: Any) -> bytes:
    return json.dumps(dict(error=message, **fields)).encode()


def no_worker_body(error: NoWorkerAvailableError) -> bytes:
    return json_error(str(error), branch=error.branch)


def worker_failed(status: int, worker_url: str, error: BaseException, branch: Optional[str], options: ProxyOptions) -> Refused:
    """The 502 or 504 for a worker that failed before its response started, logged for operators.

    The client learns the worker's address and what went wrong only with
    ``expose_routing_headers``.
    """
    detail = "%s: %s" % (type(error).__name__, str(error) or "-")
    log.warning("worker %s failed before answering (%s): %s", worker_url, branch, detail)
    message = "worker did not answer" if status == 502 else "worker sent no response within first_byte_timeout (%g s)" % options.first_byte_timeout
    if options.expose_routing_headers:
        return Refused(status, message, routing_headers(worker_url, branch), worker=worker_url, branch=branch, detail=detail)
    return Refused(status, message)


def routing_headers(worker_url: str, branch: Optional[str]) -> List[Tuple[str, str]]:
    """The headers that name a request's worker and branch (with ``expose_routing_headers``)."""
    return [(WORKER_HEADER, worker_url), (BRANCH_HEADER, branch or "")]


class WorkerStreamError(Exception):
    """A worker's response stream broke after its first bytes were sent on to the client.

    The client's response is cut off (it cannot be turned into an error status any more); the
    lease has been released.
    """

    def __init__(self, worker_url: str, cause: BaseException) -> None:
        super().__init__("worker %s failed mid-stream: %s: %s" % (worker_url, type(cause).__name__, cause))
        self.worker_url = worker_url


#: Seconds a pooled connection to a worker may stay idle: below the 5 s after which SGLang and
#: vLLM close idle connections, so a proxy never sends on one the worker has closed
#: (docs/contract.md, "Worker failures").
WORKER_IDLE_TIMEOUT = 4.0

#: The worker statuses a proxy sends the request elsewhere on (docs/contract.md, "Worker failures").
RETRY_STATUSES = frozenset((429, 502, 503, 504))


def outcome_of_status(status: int) -> str:
    """How a worker's answer counts for its circuit breaker: 500, 502, 503, 504 fail, 429 pushes
    back, other 4xx and 5xx are neutral, the rest succeed."""
    if status in (500, 502, 503, 504):
        return "failure"
    if status == 429:
        return "pushback"
    return "neutral" if status >= 400 else "success"


def final_outcome(status: int, ending: str) -> str:
    """How a request ended for its worker: a finished one counts by its status, one that failed
    (no answer, or a broken stream) is the worker's failure, and one the client left or the
    server cancelled ("disconnected", "cancelled") says nothing of it."""
    if ending == "finished":
        return outcome_of_status(status)
    return "failure" if ending == "failed" else "neutral"


class Tries:
    """The leases of one proxied request: the first and its retries (docs/contract.md, "Worker
    failures", "Where a retry goes"). A retry goes to a worker not yet tried, the key's next
    ring worker for a keyed request, at most ``max_retries`` times."""

    def __init__(self, router: "Router", retries: RetryConfig, headers: Any, prefix_blocks: Any) -> None:
        self.router = router
        self.left = retries.max_retries
        self.headers = headers
        self.prefix_blocks = prefix_blocks
        self.tried: List[str] = []

    def first(self) -> "Lease":
        """The request's first lease (NoWorkerAvailableError when there is none)."""
        lease = self.router.route(headers=self.headers, prefix_blocks=self.prefix_blocks)
        self.tried.append(lease.worker_url)
        return lease

    def after_refusal(self, lease: "Lease", refused: Refused) -> "Optional[Lease]":
        """The retry's lease after ``lease``'s worker could not be reached (a 502 refusal; a 504,
        the first-byte timeout, is not retried), or None."""
        return self.again(lease, "failure") if refused.status == 502 else None

    def after_answer(self, lease: "Lease", status: int) -> "Optional[Lease]":
        """The retry's lease after ``lease``'s worker answered ``status`` (retried: 429, 502,
        503, 504), or None: the answer goes to the client."""
        return self.again(lease, outcome_of_status(status)) if status in RETRY_STATUSES else None

    def again(self, failed: "Lease", outcome: str) -> "Optional[Lease]":
        """A lease on another worker, having released ``failed`` with its outcome; None (and
        ``failed`` still held) when no retry is left or no untried worker can take it."""
        if self.left <= 0:
            return None
        try:
            lease = self.router.route(headers=self.headers, prefix_blocks=self.prefix_blocks, exclude=self.tried)
        except NoWorkerAvailableError:
            return None
        failed.release(outcome=outcome)
        self.left -= 1
        self.tried.append(lease.worker_url)
        log.info("request retried on %s after %s answered %s", lease.worker_url, failed.worker_url, outcome)
        return lease
