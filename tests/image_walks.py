"""What of an image's walking and encoding ran on this thread (in these tests: trio's event loop).

An image is walked to be checked whole (:mod:`tools.files.image`; a GIF of many frames block by
block, tens of milliseconds) and base64-encoded to be sent; on the event loop either holds every
other task meanwhile. See :mod:`tests.loop_profile`."""

from __future__ import annotations

import base64
from types import FrameType
from typing import ContextManager

from tools.files import image as image_tool

from .loop_profile import on_this_thread

WALKS = (image_tool.examine.__code__, image_tool.measure.__code__, image_tool.fault.__code__)


def image_work_on_this_thread(data: bytes) -> ContextManager[list[str]]:
    """The names of the image functions called on this thread while the block runs, and of
    ``base64.b64encode`` when it encoded ``data``."""

    def record(frame: FrameType, event: str, arg: object) -> str | None:
        if event == "call" and (frame.f_code in WALKS or (frame.f_code is base64.b64encode.__code__
                                                          and frame.f_locals.get("s") == data)):
            return frame.f_code.co_name
        return None

    return on_this_thread(record)
