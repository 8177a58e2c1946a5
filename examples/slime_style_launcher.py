"""A rollout launcher written the way slime writes its own (``slime/ray/rollout.py``,
``_start_router``), with bounded-router's ``launch_router`` in place of ``sglang_router``'s.

slime's launcher adds the router's flags to its parser with the ``--router-`` prefix, builds the
``RouterArgs`` from the parsed namespace, writes the attributes it needs (address, Prometheus
port, SMG-only switches) and runs ``launch_router`` in a child process. Its engines then
register themselves with ``POST /workers`` on the router's port, and rollouts send
``X-SMG-Routing-Key: <session id>``: slime's agent adapters always, its SGLang rollouts only when
its ``--router-policy`` is ``consistent_hashing`` (README.md, "slime", says how to keep the
bound). Run it with ``--router-worker-api-on-proxy-port`` (slime's engines register on the proxy
port without a key) or ``--router-control-plane-api-keys``::

    python examples/slime_style_launcher.py --sglang-router-port 3000 --router-worker-api-on-proxy-port \\
        --router-policy bounded_consistent_hashing

It prints ``router ready on HOST:PORT`` and serves until SIGTERM.
"""

import argparse
import multiprocessing
import signal
import socket

from bounded_router.launch_router import RouterArgs, launch_router


def run_router(router_args: RouterArgs) -> None:
    """slime.utils.http_utils.run_router: the child process's target."""
    launch_router(router_args)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_router(args: argparse.Namespace) -> "tuple[str, int, multiprocessing.Process]":
    router_args = RouterArgs.from_cli_args(args, use_router_prefix=True)
    router_args.host = "127.0.0.1"
    router_args.port = args.sglang_router_port
    router_args.prometheus_port = free_port()
    router_args.request_timeout_secs = args.sglang_router_request_timeout_secs
    # slime: "Disable circuit breaker to prevent RDMA transfer timeouts from marking decode
    # workers as dead"; and "We will not use the health check from router".
    router_args.disable_circuit_breaker = True
    if hasattr(router_args, "disable_health_check"):
        router_args.disable_health_check = True
    process = multiprocessing.get_context("spawn").Process(target=run_router, args=(router_args,))
    process.start()
    return router_args.host, router_args.port, process


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sglang-router-port", type=int, required=True)
    parser.add_argument("--sglang-router-request-timeout-secs", type=int, default=14400)
    RouterArgs.add_cli_args(parser, use_router_prefix=True, exclude_host_port=True)
    args = parser.parse_args()
    host, port, process = start_router(args)
    signal.signal(signal.SIGTERM, lambda *_: process.terminate())
    print("router ready on %s:%d" % (host, port), flush=True)
    process.join()


if __name__ == "__main__":
    main()
