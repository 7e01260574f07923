"""What ran on this thread while a block ran (in these tests: trio's event loop).

``sys.setprofile`` watches the calling thread only: a call made in a worker thread is not seen.
Each call (``call``: a Python function; ``c_call``: a built-in, with the frame that calls it) is
offered to ``record``, and what it returns, unless None, is kept."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from types import FrameType
from typing import Any, Callable, Iterator

Record = Callable[[FrameType, str, Any], Any]


@contextmanager
def on_this_thread(record: Record) -> Iterator[list[Any]]:
    """What ``record(frame, event, arg)`` returned (when not None) for each profiler event on this
    thread while the block runs."""
    seen: list[Any] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        found = record(frame, event, arg)
        if found is not None:
            seen.append(found)

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)
