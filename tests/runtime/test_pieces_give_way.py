"""Every worker that makes large bytes a chunk at a time gives the loop way through
``runtime.pieces.give_way``, looked up on the module at each use: a large JSON answer
(``runtime.json_answer.json_answer``), a large event's SSE frame (``runtime.bus.made_frame``) and a
large request body's checks (``runtime.http_parts.decoded_body``). The benches' ``--variant``
replaces that attribute, and must reach all three."""

from __future__ import annotations

import threading
import time

import msgspec
import pytest

from events.reader import StoredEvent
from events.secrets import Secrets
from events.types import InputSubmitted, TextPart
from runtime import pieces
from runtime.bus import event_frame, made_frame
from runtime.http_parts import decoded_body
from runtime.json_answer import json_answer
from runtime.json_chars import PIECES_FROM_CHARS


class _Input(msgspec.Struct, forbid_unknown_fields=True):
    text: str


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads that called ``pieces.give_way``, in order; it still lets go of the lock."""
    seen: list[str] = []

    def counted() -> None:
        seen.append(threading.current_thread().name)
        time.sleep(0)

    monkeypatch.setattr(pieces, "give_way", counted)
    return seen


async def test_a_large_answer_gives_way_through_the_module(calls: list[str]) -> None:
    data = {"items": [{"text": "x" * pieces.CHUNK_BYTES} for _ in range(3)]}
    answer = await json_answer(data, None, chars=PIECES_FROM_CHARS + 1)
    body = b"".join([chunk async for chunk in answer.response])
    assert body == msgspec.json.encode(data)
    assert len(calls) >= 3 and threading.main_thread().name not in calls


async def test_a_large_frame_gives_way_through_the_module(calls: list[str]) -> None:
    se = StoredEvent(9, 1_700_000_000_000, "p1", "s1", 4, "a1", None, "input.submitted", "r1",
                     InputSubmitted(content=[TextPart(text="y" * (3 * pieces.CHUNK_BYTES))]))
    chunks, _ = pieces.encode_in_pieces(se.to_json(), Secrets({}))
    calls.clear()
    frame = await made_frame(se, Secrets({}), off_loop_chars=0)
    assert frame == event_frame(se, Secrets({}))
    # (once after each chunk is made, once after each is written into the frame)
    assert len(chunks) >= 3 and len(calls) == 2 * len(chunks) and threading.main_thread().name not in calls


async def test_a_large_body_gives_way_through_the_module(calls: list[str]) -> None:
    raw = msgspec.json.encode({"text": "z" * 1000})
    assert await decoded_body(raw, _Input) == _Input("z" * 1000) and calls == []  # (on the loop: no give-way)
    assert await decoded_body(raw, _Input, on_loop_bytes=0) == _Input("z" * 1000)
    assert len(calls) >= 2 and threading.main_thread().name not in calls
