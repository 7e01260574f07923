"""Which JSON encodings of a given text ran on this thread (in these tests: trio's event loop).

``msgspec.json.encode`` holds the interpreter's lock for the whole of one call: an answer of tens
of megabytes encoded in one call holds the event loop that long, whether the loop or a worker
thread makes the call. The profiler (:mod:`tests.loop_profile`) sees a call of a built-in
(``c_call``) with the frame that makes it: a call is counted when that frame's locals
hold ``text`` (in a dict or list, a few levels down), i.e. when it encodes it in one call."""

from __future__ import annotations

from types import FrameType
from typing import Any, ContextManager

import msgspec

from .loop_profile import on_this_thread

DEPTH = 8  # levels of dicts and lists searched for the text under a local


def _holds(value: Any, text: str, depth: int) -> bool:
    if isinstance(value, str):
        return value is text or value == text
    if depth == 0:
        return False
    if isinstance(value, dict):
        return any(_holds(v, text, depth - 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds(v, text, depth - 1) for v in value)
    return False


def _encodes_json(fn: Any) -> bool:
    return fn is msgspec.json.encode or (getattr(fn, "__name__", None) == "encode"
                                         and isinstance(getattr(fn, "__self__", None), msgspec.json.Encoder))


def json_of_text_on_this_thread(text: str) -> ContextManager[list[str]]:
    """The names of the functions that, on this thread while the block runs, called a msgspec JSON
    encoder with ``text`` among their locals' contents (the whole text in one call)."""

    def record(frame: FrameType, event: str, arg: object) -> str | None:
        if event == "c_call" and _encodes_json(arg) and any(_holds(v, text, DEPTH) for v in frame.f_locals.values()):
            return frame.f_code.co_name
        return None

    return on_this_thread(record)
