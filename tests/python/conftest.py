from __future__ import annotations

from typing import Any, Callable, Iterator, List

import pytest

from echo_worker import EchoWorker

from bounded_router import Router
from support import urls


@pytest.fixture
def make_router() -> Iterator[Callable[..., Router]]:
    """Build routers over w0..w(n-1) that are closed at the end of the test."""
    made: List[Router] = []

    def make(n: int = 4, **kwargs: Any) -> Router:
        router = Router(urls(n), **kwargs)
        made.append(router)
        return router

    yield make
    for router in made:
        router.close()


@pytest.fixture
def worker() -> Iterator[EchoWorker]:
    """An echo worker on loopback (echo_worker.py), stopped at the end of the test; modules with
    a worker of another kind define their own."""
    started = EchoWorker().start()
    try:
        yield started
    finally:
        started.stop()
