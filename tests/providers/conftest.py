"""Fixtures of the provider suite: a loopback wire-protocol server per test, real SDK clients.

``server`` is a :class:`~tests.providers.servers.base.ScriptedServer` on ``127.0.0.1:0`` in the
test's own trio run (the ``nursery`` fixture stops it). ``make`` builds a provider of a protocol
pointed at it (``max_retries=2``; scripted errors carry ``retry-after-ms`` so the SDK's retries
take milliseconds) and closes its client after the test. Items are built with :class:`Ctx`, which
numbers event seqs the way the session projection does, so compilation sees real shapes.
"""

from __future__ import annotations

import gc
import json
import struct
import tracemalloc
import zlib
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import pytest

from events import types as t
from projections.session_state import Item
from runtime.config import ModelConfig
from runtime.providers.anthropic_messages import AnthropicProvider
from runtime.providers.base import Delta, ModelRequest
from runtime.providers.openai_chat import OpenAIChatProvider
from runtime.providers.openai_responses import OpenAIResponsesProvider
from runtime.providers.sdk import store_loader
from tools.artifacts import ArtifactStore

from .servers.base import ScriptedServer

FAST_RETRY = {"retry-after-ms": "5"}
PROTOCOLS = ("openai-responses", "openai-chat", "anthropic")
CLASSES = {"openai-responses": OpenAIResponsesProvider, "openai-chat": OpenAIChatProvider, "anthropic": AnthropicProvider}


class Ctx:
    """Builds Working Context items with projection-shaped ids and seqs."""

    def __init__(self) -> None:
        self.seq = 0
        self.items: list[Item] = []

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def user(self, text: str, *images: t.ImagePart) -> "Ctx":
        s = self._next()
        self.items.append(Item(f"c{s}", "user", s, text=text, parts=[t.TextPart(text), *images]))
        return self

    def system(self, text: str, source: str = "instruction") -> "Ctx":
        s = self._next()
        self.items.append(Item(f"c{s}", "system", s, text=text, parts=[t.TextPart(text)], source=source))
        return self

    def response(self, text: str = "", *calls: tuple[str, str, Any],
                 reasoning_blocks: list[dict[str, Any]] = ()) -> "Ctx":
        """One model response; ``reasoning_blocks`` go on its first item, as the projection puts them."""
        s = self._next()
        first = len(self.items)
        n = 0
        if text:
            self.items.append(Item(f"c{s}", "assistant", s, text=text, parts=[t.TextPart(text)]))
            n += 1
        for call_id, name, args in calls:
            call = t.ToolCall(call_id, name, args if isinstance(args, str) else json.dumps(args))
            self.items.append(Item(f"c{s}" if n == 0 else f"c{s}.{n}", "tool_call", s, call=call))
            n += 1
        if reasoning_blocks and len(self.items) > first:
            self.items[first].reasoning_blocks = list(reasoning_blocks)
        return self

    def result(self, call_id: str, text: str, *images: t.ImagePart, is_error: bool = False) -> "Ctx":
        s = self._next()
        self.items.append(Item(f"c{s}", "tool_result", s, text=text, parts=[t.TextPart(text), *images],
                               call_id=call_id, status="error" if is_error else "ok", is_error=is_error))
        return self

    def request(self, model: str = "m1", *, system: list[str] | None = None, tools: list[dict] | None = None,
                thinking: str | None = None) -> ModelRequest:
        return ModelRequest(model, ["You are a test agent."] if system is None else system, list(self.items),
                            TOOLS if tools is None else tools, thinking)


TOOLS = [
    {"name": "read_file", "description": "Read a file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "get_system_time", "description": "The time.", "input_schema": {"type": "object", "properties": {}}},
]


class Deltas(list):
    def __call__(self, d: Delta) -> None:
        self.append(d)

    def text(self, kind: str = "text") -> str:
        return "".join(d.text for d in self if d.kind == kind)


async def stream_traced(provider: Any, on_delta: Callable[[Delta], None]) -> Any:
    """The provider's answer to "hi", streamed with tracemalloc tracing from a collected heap, so
    that ``on_delta`` can read what is held as the deltas arrive."""
    gc.collect()
    tracemalloc.start()
    try:
        return await provider.stream(Ctx().user("hi").request(), on_delta)
    finally:
        tracemalloc.stop()


@pytest.fixture
async def server(nursery) -> ScriptedServer:
    s = ScriptedServer()
    await s.start(nursery)
    return s


def base_url(protocol: str, server: ScriptedServer) -> str:
    return server.url if protocol == "anthropic" else server.url + "/v1"


@pytest.fixture
async def make(server: ScriptedServer) -> AsyncIterator[Callable[..., Any]]:
    made: list[Any] = []

    def build(protocol: str, *, models: dict[str, ModelConfig] | None = None, **kw: Any) -> Any:
        kw.setdefault("api_key", "test-key")
        kw.setdefault("max_retries", 2)
        p = CLASSES[protocol](f"p-{protocol}", base_url=base_url(protocol, server),
                              models=models if models is not None else {"m1": ModelConfig(id="m1", images=True)}, **kw)
        made.append(p)
        return p

    yield build
    for p in made:
        await p.aclose()


# --------------------------------------------------------------------------- images


def tiny_png(shade: int = 0) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"\x00" + bytes([shade, 0, 0])
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def png_of_size(size: int, shade: int = 0) -> bytes:
    """A whole 1x1 PNG of exactly ``size`` bytes: :func:`tiny_png` with an ancillary chunk of
    padding after its header (at least 81 bytes)."""
    png = tiny_png(shade)
    pad = size - len(png) - 12
    assert pad >= 0, size
    filler = b"paDd" + b"\0" * pad
    return png[:33] + struct.pack(">I", pad) + filler + struct.pack(">I", zlib.crc32(filler)) + png[33:]


def image_part(store: ArtifactStore, shade: int = 0) -> t.ImagePart:
    return t.ImagePart(store.put(tiny_png(shade)), "image/png")


class Artifacts:
    def __init__(self, root: Path) -> None:
        self.store = ArtifactStore(root)
        self.load = store_loader(self.store)


@pytest.fixture
def artifacts(tmp_path: Path) -> Artifacts:
    return Artifacts(tmp_path / "artifacts")
