"""The prompt of an OpenAI-style request body as prefix block hashes, for the proxies'
``prefix_blocks`` option (docs/contract.md, "HTTP proxies"): ``"text"`` or ``"tokens"``.

The text is what the engine's cache holds in the same order: for ``messages`` (chat) each
message's role and content, one after the other; for ``prompt`` (completions) the string, or
the strings of a list joined by newlines. Content parts that are not text (images, audio) are
taken as their JSON, so that requests with other images part there. A body that is not JSON,
or has neither field in a usable form (e.g. a prompt of token ids), gives no blocks: the request
is routed without them, never refused.

With ``"tokens"``, the blocks are :func:`~bounded_router.prefix_blocks` of the body's token ids:
``input_ids`` when it is a list (SGLang's ``/generate``), else ``prompt`` (OpenAI completions),
a list of ints from 0 to 2**32 - 1 and nothing else; those name blocks as the engines' KV events
do, so ``cache_aware`` matches them against what each engine reports it holds.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable, Dict, List, Optional

from .._request import MAX_PREFIX_BLOCKS
from ..prefix import hash_blocks, prefix_blocks
from .options import DEFAULT_PREFIX_MAX_BYTES, ProxyOptions

__all__ = ["INLINE_BODY_LIMIT", "body_prefix_blocks", "body_token_blocks", "request_prefix_blocks", "prompt_text", "prompt_token_ids"]

#: Bodies up to this size are parsed and hashed on the event loop; larger ones in a worker
#: thread, so that a 4 MiB body does not stall every other request (BENCHMARKS.md has the
#: costs by body size).
INLINE_BODY_LIMIT = 64 * 1024


def _json_object(body: bytes) -> Optional[Dict[str, Any]]:
    """The body as a JSON object, or None."""
    try:
        # UTF-8 only and no NaN or Infinity, as the gateway's scanner reads JSON (RFC 8259), so
        # both edges find the same prompt in the same body.
        document = json.loads(body.decode("utf-8"), parse_constant=_not_json)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested too deep
        return None
    return document if isinstance(document, dict) else None


def _not_json(name: str) -> Any:
    raise ValueError("%s is not JSON" % name)


def prompt_text(body: bytes) -> Optional[str]:
    """The prompt text of an OpenAI-style JSON body, or None when it has none."""
    document = _json_object(body)
    if document is None:
        return None
    messages = document.get("messages")
    if isinstance(messages, list):
        return "".join(_message_text(m) for m in messages if isinstance(m, dict)) or None
    prompt = document.get("prompt")
    if isinstance(prompt, str):
        return prompt or None
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt)
    return None


def _message_text(message: Any) -> str:
    role = message.get("role")
    return "%s\n%s\n" % (role if isinstance(role, str) else "", _content_text(message.get("content")))


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            parts.append(part["text"])
        else:
            parts.append(json.dumps(part, sort_keys=True))
    return "".join(parts)


def body_prefix_blocks(body: bytes, bytes_per_block: int, max_bytes: int = DEFAULT_PREFIX_MAX_BYTES) -> Optional[List[int]]:
    """The prefix blocks of a body's prompt text (of its first ``max_bytes`` UTF-8 bytes, at most
    MAX_PREFIX_BLOCKS blocks), or None."""
    text = prompt_text(body)
    if text is None:
        return None
    data = text.encode("utf-8", "surrogatepass")[: min(max_bytes, MAX_PREFIX_BLOCKS * bytes_per_block)]
    return hash_blocks(data, bytes_per_block) or None


def prompt_token_ids(body: bytes) -> Optional[List[int]]:
    """The token ids of a JSON body (``input_ids`` when it is a list, else ``prompt``), or None
    when it has none or they are not all ints from 0 to 2**32 - 1."""
    document = _json_object(body)
    if document is None:
        return None
    ids = document.get("input_ids")
    if not isinstance(ids, list):
        ids = document.get("prompt")
    if not isinstance(ids, list) or not ids:
        return None
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 1 << 32 for i in ids):
        return None
    return ids


def body_token_blocks(body: bytes, block_size: int, max_bytes: int = DEFAULT_PREFIX_MAX_BYTES) -> Optional[List[int]]:
    """The prefix blocks of a body's token ids (of its first ``max_bytes // 4`` ids, at most
    MAX_PREFIX_BLOCKS blocks of ``block_size``), or None."""
    ids = prompt_token_ids(body)
    if ids is None:
        return None
    return prefix_blocks(ids[: min(max_bytes // 4, MAX_PREFIX_BLOCKS * block_size)], block_size) or None


async def request_prefix_blocks(
    body: bytes, options: ProxyOptions, run_in_thread: Callable[..., Awaitable[Optional[List[int]]]]
) -> Optional[List[int]]:
    """The ``prefix_blocks`` argument of :meth:`Router.route` for a body: None when the option is
    off or the body has no prompt. The blocks (of the text, :func:`body_prefix_blocks`, or of
    the token ids, :func:`body_token_blocks`) are computed in a worker thread
    (``run_in_thread(function, *args)``, the framework's) when the body is larger than
    :data:`INLINE_BODY_LIMIT`."""
    if options.prefix_blocks == "off":
        return None
    blocks: Callable[[bytes, int, int], Optional[List[int]]] = body_prefix_blocks
    block_len = options.prefix_block_bytes
    if options.prefix_blocks == "tokens":
        blocks, block_len = body_token_blocks, options.prefix_block_size
    if len(body) <= INLINE_BODY_LIMIT:
        return blocks(body, block_len, options.prefix_max_bytes)
    return await run_in_thread(blocks, body, block_len, options.prefix_max_bytes)
