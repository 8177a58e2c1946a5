"""The limits, timeouts and prefix option of the HTTP proxies, with their defaults (docs/contract.md, "HTTP proxies")."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Tuple

from ..args import positive_seconds
from ..prefix import DEFAULT_BLOCK_SIZE, DEFAULT_BYTES_PER_BLOCK

if TYPE_CHECKING:  # pragma: no cover
    from ..args import RouterArgs
    from ..router import Router

__all__ = ["ProxyOptions", "positive_seconds", "router_and_options"]

MIB = 1024 * 1024
#: How many bytes of a prompt prefix_blocks hashes by default (UTF-8 text, or 4 per token id).
DEFAULT_PREFIX_MAX_BYTES = MIB
#: The values of ``prefix_blocks``: off, blocks of the body's prompt text, or of its token ids.
PREFIX_BLOCK_MODES = ("off", "text", "tokens")


@dataclass(frozen=True)
class ProxyOptions:
    """What a proxy accepts from clients and how long it waits, validated on construction.

    Attributes:
        max_body_size: the largest request body accepted, in bytes; a larger one is answered
            with 413 before any lease is taken.
        max_header_bytes: the largest total size of a request's header lines; above it, 431.
        body_timeout: seconds allowed for a request body to arrive completely; then 408.
        connect_timeout: seconds allowed to connect to a worker; then 502.
        first_byte_timeout: seconds allowed for a worker to start its response (a
            non-streaming generation answers only when it is done); then 504.
        idle_timeout: seconds a worker's response stream may send nothing before it is cut.
        expose_routing_headers: name the chosen worker and branch to clients, in
            ``X-Bounded-Router-Worker``/``-Branch`` response headers and in error bodies.
        prefix_blocks: ``"text"`` derives prefix block hashes from an OpenAI-style JSON body
            (``messages`` or ``prompt``, see :func:`~bounded_router.text_prefix_blocks`) and
            routes with them, for the ``cache_aware`` policy; ``"tokens"`` derives them from the
            body's token ids (``input_ids``, or a ``prompt`` of integers; see
            :func:`~bounded_router.prefix_blocks`), the blocks the engines' KV events name;
            ``"off"`` (the default) does not read the body. A body without a prompt is routed
            without blocks.
        prefix_block_bytes: UTF-8 bytes per block with ``prefix_blocks="text"``.
        prefix_block_size: token ids per block with ``prefix_blocks="tokens"``: the engine's KV
            block (page) size, which its events report (vLLM's default 16).
        prefix_max_bytes: how many bytes of a prompt are hashed (its text's UTF-8 bytes, or 4 per
            token id; default 1 MiB): a longer prompt is routed by the blocks of its beginning.
    """

    max_body_size: int = 4 * MIB
    max_header_bytes: int = 64 * 1024
    body_timeout: float = 60.0
    connect_timeout: float = 10.0
    first_byte_timeout: float = 600.0
    idle_timeout: float = 300.0
    expose_routing_headers: bool = False
    prefix_blocks: str = "off"
    prefix_block_bytes: int = DEFAULT_BYTES_PER_BLOCK
    prefix_block_size: int = DEFAULT_BLOCK_SIZE
    prefix_max_bytes: int = DEFAULT_PREFIX_MAX_BYTES

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.type == "str":
                if value not in PREFIX_BLOCK_MODES:
                    raise ValueError("%s must be one of %s, not %r" % (field.name, ", ".join(PREFIX_BLOCK_MODES), value))
            elif field.type == "bool":
                if not isinstance(value, bool):
                    raise TypeError("%s must be True or False, not %r" % (field.name, value))
            elif field.type == "int":
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    unit = "token ids" if field.name == "prefix_block_size" else "bytes"
                    raise ValueError("%s must be a positive integer (%s), not %r" % (field.name, unit, value))
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError("%s must be a positive number of seconds, not %r" % (field.name, value))
        # The mode's block must fit in the bytes of a prompt that are hashed (4 per token id), as
        # the gateway checks.
        if self.prefix_blocks == "text" and self.prefix_block_bytes > self.prefix_max_bytes:
            raise ValueError("prefix_block_bytes must be at most prefix_max_bytes (%d), got %d" % (self.prefix_max_bytes, self.prefix_block_bytes))
        if self.prefix_blocks == "tokens" and self.prefix_block_size > self.prefix_max_bytes // 4:
            raise ValueError(
                "prefix_block_size must be at most prefix_max_bytes / 4 (%d token ids), got %d" % (self.prefix_max_bytes // 4, self.prefix_block_size)
            )

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        """Add ``--max-body-size``, ``--first-byte-timeout``, ... (one flag per option) to ``parser``."""
        defaults = ProxyOptions()
        for field in fields(ProxyOptions):
            flags = ["--" + field.name.replace("_", "-")] + ([_SMG_FLAGS[field.name]] if field.name in _SMG_FLAGS else [])
            default = getattr(defaults, field.name)
            if field.type == "bool":
                parser.add_argument(*flags, action="store_true", help=_HELP[field.name])
            elif field.type == "str":
                parser.add_argument(*flags, choices=PREFIX_BLOCK_MODES, default=default, help=_HELP[field.name] + " (default: %(default)s)")
            else:
                kind = int if field.type == "int" else float
                parser.add_argument(*flags, type=kind, default=default, help=_HELP[field.name] + " (default: %(default)s)")

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "ProxyOptions":
        """The options the flags of :meth:`add_cli_args` give; ValueError names a bad one."""
        return cls(**{field.name: getattr(args, field.name) for field in fields(cls)})


#: SMG 1.13.0's names of the same options, taken as well so that its users find them.
_SMG_FLAGS = {"max_body_size": "--max-payload-size", "prefix_block_size": "--block-size"}

_HELP = {
    "max_body_size": "largest request body accepted, in bytes; larger is a 413",
    "max_header_bytes": "largest total size of a request's headers, in bytes; larger is a 431",
    "body_timeout": "seconds for a request body to arrive; then 408",
    "connect_timeout": "seconds to connect to a worker; then 502",
    "first_byte_timeout": "seconds for a worker to start its response; then 504",
    "idle_timeout": "seconds a worker's response may stream nothing before it is cut",
    "expose_routing_headers": "name the chosen worker and branch in response headers and error bodies",
    "prefix_blocks": "'text': route with prefix block hashes of the JSON body's messages or prompt; 'tokens': of its token ids "
    "(input_ids, or a prompt of integers), as the engines' KV events name blocks (for cache_aware)",
    "prefix_block_bytes": "UTF-8 bytes per prefix block with --prefix-blocks text",
    "prefix_block_size": "token ids per prefix block with --prefix-blocks tokens: the engine's KV block (page) size",
    "prefix_max_bytes": "bytes of a prompt hashed (UTF-8 text, 4 per token id); a longer prompt is routed by its beginning",
}


def router_and_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace, worker_api: bool = False
) -> "Tuple[Router, ProxyOptions]":
    """The router and proxy options of a serve command line, or a usage error naming what is wrong.
    ``worker_api``: the server has the worker API (the native gateway); without it its flags are refused."""
    from ..args import RouterArgs
    from ..router import Router

    router_args = RouterArgs.from_cli_args(args)
    if not worker_api and (router_args.control_plane_api_keys or router_args.worker_api_on_proxy_port):
        parser.error("--control-plane-api-keys, --worker-api-on-proxy-port: only the native gateway (bounded-router serve) has the worker API")
    if not args.worker_urls and not (worker_api and _registers_workers(args, router_args)):
        parser.error("--worker-urls: give at least one worker URL (or, with bounded-router serve, serve the worker API, where workers register)")
    try:
        options = ProxyOptions.from_cli_args(args)
        return Router.from_args(router_args, probe=True), options
    except (ValueError, TypeError) as e:
        parser.error(str(e))


def _registers_workers(args: argparse.Namespace, router_args: "RouterArgs") -> bool:
    """Whether the native gateway of a serve command line serves the worker API: on its metrics
    port, or on the proxy port (``--control-plane-api-keys``, ``--worker-api-on-proxy-port``)."""
    return getattr(args, "prometheus_port", None) is not None or bool(router_args.control_plane_api_keys) or router_args.worker_api_on_proxy_port
