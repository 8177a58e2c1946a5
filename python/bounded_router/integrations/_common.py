"""What the framework helpers share: header filtering, URLs and error bodies (standard library only)."""

from __future__ import annotations

import json
from typing import Any, Iterable, List, Optional, Set, Tuple, TypeVar

from ..errors import NoWorkerAvailableError

S = TypeVar("S", str, bytes)

#: Hop-by-hop headers (RFC 9110 section 7.6.1) and those the proxy recomputes; never forwarded.
HOP_BY_HOP = frozenset(
    (
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    )
)

WORKER_HEADER = "x-bounded-router-worker"
BRANCH_HEADER = "x-bounded-router-branch"


def _lower(name: Any) -> str:
    return (name.decode("latin-1") if isinstance(name, bytes) else str(name)).lower()


def forward_headers(headers: Iterable[Tuple[S, S]]) -> List[Tuple[S, S]]:
    """``headers`` without hop-by-hop headers and those named in ``Connection``."""
    pairs = list(headers)
    named: Set[str] = set()
    for name, value in pairs:
        if _lower(name) == "connection":
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            named.update(token.strip().lower() for token in text.split(","))
    return [(n, v) for n, v in pairs if _lower(n) not in HOP_BY_HOP and _lower(n) not in named]


def worker_target(worker_url: str, path: str, query: str) -> str:
    """The URL to forward a request for ``path?query`` to on ``worker_url``."""
    base = worker_url.rstrip("/")
    if not path.startswith("/"):
        path = "/" + path
    return base + path + ("?" + query if query else "")


def no_worker_body(error: NoWorkerAvailableError) -> bytes:
    return json.dumps({"error": str(error), "branch": error.branch}).encode()


def worker_failed_body(worker_url: str, error: BaseException, branch: Optional[str]) -> bytes:
    detail = str(error) or type(error).__name__
    message = "worker %s did not answer: %s: %s" % (worker_url, type(error).__name__, detail)
    return json.dumps({"error": message, "worker": worker_url, "branch": branch}).encode()


class WorkerStreamError(Exception):
    """A worker's response stream broke after its first bytes were sent on to the client.

    The client's response is cut off (it cannot be turned into an error status any more); the
    lease has been released.
    """

    def __init__(self, worker_url: str, cause: BaseException) -> None:
        super().__init__("worker %s failed mid-stream: %s: %s" % (worker_url, type(cause).__name__, cause))
        self.worker_url = worker_url
