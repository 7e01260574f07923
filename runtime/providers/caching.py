"""Prompt-cache breakpoint placement (F-MOD-4): pure functions, no I/O.

**OpenAI explicit caching** (models whose config says ``explicitCache: true``; never guessed
from the model name). Breakpoints go only on *sendable input blocks* — content the client sends:
system/developer text, user text and images, tool results — never on assistant output. Each
request marks at most :data:`OPENAI_MAX_BREAKPOINTS`:

* ``tail``: the last input block (the prefix the next request will reuse);
* ``previous``: the tails of the two previous requests of the conversation (the last input block
  before each of the last two assistant turns), so what they wrote is read back;
* ``system``: the end of the leading system prompt (stable across the whole session).

The request carries ``prompt_cache_options = {"mode": "explicit", "ttl": "30m"}`` (the SDK's
request-level lifetime is 30m); a configured ``12h`` is sent on every breakpoint as a
per-breakpoint ``ttl`` override. Any other ttl is refused (``CACHE_TTL_UNSUPPORTED``).

**Anthropic** ``cache_control`` breakpoints by *lookback position*: the message blocks in order,
where a run of consecutive ``tool_use`` blocks counts as one position and a run of consecutive
``tool_result`` blocks as one. Every request marks the last tool (the tools prefix), the last
system block (the tools + system prefix: a system prompt that changed, an AGENTS.md edited, still
reads the tools' entry) and its tail position. A cache entry written by an earlier request (at its tail) is found
by the tail's lookback only within :data:`ANTHROPIC_LOOKBACK` positions; once 20 new positions
have accumulated since the newest earlier tail, that matching older anchor is marked explicitly
too, so it is read instead of lost.

The breakpoints actually sent are returned as diagnostics (``ModelResult.diagnostics["cache"]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..config import CACHE_TTLS
from .base import ProviderError

OPENAI_TTLS = CACHE_TTLS
OPENAI_REQUEST_TTL = "30m"
OPENAI_MAX_BREAKPOINTS = 4
ANTHROPIC_LOOKBACK = 20
ANTHROPIC_MAX_BREAKPOINTS = 4


def check_openai_ttl(ttl: str) -> str:
    """``ttl`` if OpenAI explicit caching supports it, else ``ProviderError(CACHE_TTL_UNSUPPORTED)``."""
    if ttl not in OPENAI_TTLS:
        raise ProviderError("CACHE_TTL_UNSUPPORTED",
                            f"prompt cache ttl {ttl!r} is not supported; use one of {', '.join(repr(x) for x in OPENAI_TTLS)}")
    return ttl


def openai_request_options() -> dict[str, Any]:
    return {"mode": "explicit", "ttl": OPENAI_REQUEST_TTL}


def openai_breakpoint(ttl: str) -> dict[str, Any]:
    """The ``prompt_cache_breakpoint`` object for one block (ttl only when it overrides)."""
    bp: dict[str, Any] = {"mode": "explicit"}
    if ttl != OPENAI_REQUEST_TTL:
        bp["ttl"] = ttl
    return bp


@dataclass(frozen=True)
class Candidate:
    """A sendable input block: which entry it renders, and whether it belongs to the leading
    system prompt."""

    entry: int
    leading_system: bool = False


def openai_breakpoints(candidates: Sequence[Candidate], tails: Sequence[int]) -> list[tuple[int, str]]:
    """(candidate index, reason) of the blocks to mark, in block order (at most four).

    ``tails`` are entry indexes where earlier requests ended (see ``compile.request_tails``).
    """
    if not candidates:
        return []
    chosen: dict[int, str] = {}

    def last_at_or_before(entry: int) -> int | None:
        found = None
        for i, c in enumerate(candidates):
            if c.entry <= entry:
                found = i
        return found

    chosen[len(candidates) - 1] = "tail"
    for e in list(tails)[-2:][::-1]:
        i = last_at_or_before(e)
        if i is not None:
            chosen.setdefault(i, "previous")
    leading = [i for i, c in enumerate(candidates) if c.leading_system]
    if leading:
        chosen.setdefault(leading[-1], "system")
    picked = sorted(chosen.items())
    while len(picked) > OPENAI_MAX_BREAKPOINTS:  # cannot happen with the rules above; kept as a guard
        picked.pop(0)
    return picked


# --------------------------------------------------------------------------- Anthropic


@dataclass(frozen=True)
class Position:
    message: int
    block: int  # the position's last block (where cache_control goes)
    kind: str  # the block type, "tool_use" / "tool_result" for a run


def anthropic_positions(messages: Sequence[dict[str, Any]]) -> tuple[list[Position], list[int]]:
    """Lookback positions of ``messages`` and the position indexes where earlier requests ended
    (the last position before each assistant message)."""
    positions: list[Position] = []
    tails: list[int] = []
    for mi, msg in enumerate(messages):
        if msg["role"] == "assistant" and positions and messages[mi - 1]["role"] != "assistant":
            tails.append(len(positions) - 1)
        content = msg["content"]
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for bi, block in enumerate(blocks):
            kind = block.get("type", "text")
            prev = positions[-1] if positions else None
            if (kind in ("tool_use", "tool_result") and prev is not None and prev.kind == kind
                    and prev.message == mi and prev.block == bi - 1):
                positions[-1] = Position(mi, bi, kind)  # a run counts as one position
            else:
                positions.append(Position(mi, bi, kind))
    return positions, tails


def anthropic_breakpoints(n_positions: int, tails: Sequence[int], lookback: int = ANTHROPIC_LOOKBACK) -> list[tuple[int, str]]:
    """(position index, reason) of the message positions to mark: the tail, plus the newest
    earlier tail (``anchor``) once ``lookback`` new positions have accumulated since it."""
    if n_positions == 0:
        return []
    tail = n_positions - 1
    out: list[tuple[int, str]] = []
    earlier = [p for p in tails if p < tail]
    if earlier and tail - earlier[-1] >= lookback:
        out.append((earlier[-1], "anchor"))
    out.append((tail, "tail"))
    return out
