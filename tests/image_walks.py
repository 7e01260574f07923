"""What of an image's walking and encoding ran on this thread (in these tests: trio's event loop).

An image is walked to be checked whole (:mod:`tools.files.image`; a GIF of many frames block by
block, tens of milliseconds) and base64-encoded to be sent; on the event loop either holds every
other task meanwhile. ``sys.setprofile`` watches the calling thread only, so a call made in a
worker thread is not seen."""

from __future__ import annotations

import base64
import sys
from contextlib import contextmanager
from types import FrameType
from typing import Iterator

from tools.files import image as image_tool

WALKS = (image_tool.examine.__code__, image_tool.measure.__code__, image_tool.fault.__code__)


@contextmanager
def image_work_on_this_thread(data: bytes) -> Iterator[list[str]]:
    """The names of the image functions called on this thread while the block runs, and of
    ``base64.b64encode`` when it encoded ``data``."""
    seen: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        if frame.f_code in WALKS or (frame.f_code is base64.b64encode.__code__ and frame.f_locals.get("s") == data):
            seen.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)
