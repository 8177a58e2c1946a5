"""``launch_router(args)``: start the native gateway the way ``sglang_router.launch_router`` starts SMG.

For launchers written against ``sglang_router`` (slime's ``_start_router``, for one)::

    from bounded_router.launch_router import RouterArgs, launch_router

    RouterArgs.add_cli_args(parser, use_router_prefix=True, exclude_host_port=True)
    args = parser.parse_args()
    router_args = RouterArgs.from_cli_args(args, use_router_prefix=True)
    router_args.host, router_args.port = "127.0.0.1", 3000
    router_args.prometheus_port = 4000          # the admin listener: /metrics and the worker API
    router_args.disable_circuit_breaker = True  # SMG settings this package may not have: see below
    launch_router(router_args)                  # blocks until SIGTERM or SIGINT

Engines then register with ``POST /workers`` (on ``prometheus_port``, or on ``port`` with
``--router-worker-api-on-proxy-port`` or ``--router-control-plane-api-keys``) and requests
route by ``X-SMG-Routing-Key`` (docs/contract.md, "The worker API").

Attributes a launcher sets on the :class:`RouterArgs` that are not among its fields (SMG
settings this package has no equivalent of, such as ``pd_disaggregation``) do not take effect;
:func:`launch_router` names them all in one warning instead of dropping them silently. Which
attributes have an equivalent is read from :class:`RouterArgs`' own fields.

As a command, like ``python -m smg.launch_router``: ``python -m bounded_router.launch_router
--worker-urls URL ... [--port PORT] [--prometheus-port PORT]`` serves with the router's flags
(``bounded-router serve`` has the gateway's other options).
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import threading
import warnings
from typing import Any, List, Optional, Union

from ._cli import SERVE_HINT, CommandParser
from .args import RouterArgs
from .router import Router

__all__ = ["RouterArgs", "launch_router", "main", "serve_until_signalled", "unsupported_settings"]


def unsupported_settings(args: RouterArgs) -> List[str]:
    """The attributes set on ``args`` that are not fields of :class:`RouterArgs`, sorted."""
    fields = {field.name for field in dataclasses.fields(RouterArgs)}
    return sorted(name for name in vars(args) if name not in fields)


def launch_router(args: Union[argparse.Namespace, RouterArgs]) -> None:
    """Start a router and its native gateway from ``args`` and serve until SIGTERM or SIGINT.

    Args:
        args: a :class:`RouterArgs`, or parsed flags of :meth:`RouterArgs.add_cli_args` (read
            with ``use_router_prefix=False``, as ``sglang_router`` does).

    Raises:
        ValueError: a setting breaks its rule (the message names it), or the address cannot be
            listened on.
    """
    router_args = args if isinstance(args, RouterArgs) else RouterArgs.from_cli_args(args)
    ignored = unsupported_settings(router_args)
    if ignored:
        warnings.warn(
            "launch_router: bounded-router has no equivalent of %s; %s no effect"
            % (", ".join("%s=%r" % (name, getattr(router_args, name)) for name in ignored), "it has" if len(ignored) == 1 else "they have"),
            UserWarning,
            stacklevel=2,
        )
    options = router_args.gateway_options()  # checks the keys before the router starts
    router = Router.from_args(router_args, probe=True)
    try:
        serve_until_signalled(router, **options)
    except BaseException:
        router.close()
        raise


def serve_until_signalled(router: Router, lifetime: Optional[float] = None, **options: Any) -> None:
    """Serve ``router`` through the gateway until SIGTERM or SIGINT (or ``lifetime`` seconds),
    then drain it and close the router: the body of ``bounded-router serve`` and of
    :func:`launch_router`. Prints ``gateway listening on URL``
    (and the metrics address) once it accepts requests. Call it from the main thread."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    gateway = router.serve(**options)
    if gateway.metrics_address:
        print("metrics listening on http://%s" % gateway.metrics_address, flush=True)
    print("gateway listening on %s" % gateway.url, flush=True)
    stop.wait(lifetime)
    gateway.stop()
    router.close()


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m bounded_router.launch_router``: :func:`launch_router` with the router's flags."""
    parser = CommandParser(
        prog="python -m bounded_router.launch_router",
        hint=SERVE_HINT,
        description="Start the router and its native gateway, as python -m smg.launch_router starts SMG's.",
    )
    RouterArgs.add_cli_args(parser)
    args = parser.parse_args(argv)
    try:
        launch_router(RouterArgs.from_cli_args(args))
    except ValueError as e:
        parser.error(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
