"""A FastAPI service in front of LLM workers: routes each request with bounded consistent hashing,
streams the answer back, and serves the router's Prometheus metrics on /metrics.

    pip install 'bounded-router[fastapi]'
    python examples/fastapi_proxy.py --port 8080 \
        --worker-urls http://127.0.0.1:8001 http://127.0.0.1:8002 --min-load-gap 2

    curl -N localhost:8080/v1/completions -H 'X-SMG-Routing-Key: group-17' \
        -d '{"prompt": "Once upon a time", "max_tokens": 16, "stream": true}'
    curl localhost:8080/metrics

Try it without GPUs: start two mock workers first (python -m bounded_router.testing.mock_worker
--port 8001, and --port 8002).
"""

from __future__ import annotations

import argparse
import contextlib
from typing import AsyncIterator

import uvicorn
from fastapi import FastAPI, Request, Response

from bounded_router import Router, RouterArgs
from bounded_router.integrations.asgi import ASGIProxy
from bounded_router.metrics import CONTENT_TYPE


def build_app(router: Router) -> FastAPI:
    proxy = ASGIProxy(router)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await proxy.aclose()
        router.close()

    app = FastAPI(lifespan=lifespan)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(router.metrics_text(), media_type=CONTENT_TYPE)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        # Routed from the request's headers (X-SMG-Routing-Key, ...); the lease is held until the
        # streamed answer ends, fails or the client goes away.
        return await proxy.forward(request)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await proxy.forward(request)

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    RouterArgs.add_cli_args(parser)  # with --host and --port (127.0.0.1, 8080)
    args = parser.parse_args()
    router = Router.from_args(RouterArgs.from_cli_args(args))
    uvicorn.run(build_app(router), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
