"""``get_system_time`` and ``sleep_milliseconds`` (F-TOOL-9)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

import trio

from runtime.errors import shortened, shortened_names  # (imports nothing: no cycle)

from .base import ToolContext, ToolError, ToolResult, ToolSpec

MAX_SLEEP_MS = 2_147_483_647


def _no_extra(args: dict[str, Any], allowed: set[str], tool: str) -> None:
    extra = sorted(set(args) - allowed)
    if extra:
        raise ToolError("INVALID_ARGUMENT", f"{tool} does not take {shortened_names(extra)}")


def time_fields(unix_ns: int) -> dict[str, Any]:
    """The three renderings of one instant.

    ``local`` is in the process's time zone with its offset to the minute: ``±HH:mm`` cannot
    carry the seconds of an offset such as a historical local mean time (Monrovia's -00:44:30
    until 1972) or a POSIX ``TZ`` that names seconds, so such an offset is rounded to its nearest
    minute and the wall-clock time is the instant's at that offset (the three still agree).
    """
    unix_ms = unix_ns // 1_000_000
    seconds = unix_ms // 1000
    utc = datetime.fromtimestamp(seconds, timezone.utc)
    offset = utc.astimezone().utcoffset() or timedelta(0)
    minutes = round(offset.total_seconds() / 60)
    local = utc.astimezone(timezone(timedelta(minutes=minutes)))
    hours, mins = divmod(abs(minutes), 60)
    return {
        "unix_ms": unix_ms,
        "utc": utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "local": local.strftime("%Y-%m-%dT%H:%M:%S") + f"{'-' if minutes < 0 else '+'}{hours:02d}:{mins:02d}",
    }


async def get_system_time(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    _no_extra(args, set(), "get_system_time")
    fields = time_fields(time.time_ns())
    return ToolResult.text(f"{fields['utc']} (local {fields['local']}, unix_ms {fields['unix_ms']})", fields)


async def sleep_milliseconds(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    _no_extra(args, {"milliseconds"}, "sleep_milliseconds")
    if "milliseconds" not in args:
        raise ToolError("INVALID_ARGUMENT", "sleep_milliseconds needs 'milliseconds'")
    ms = args["milliseconds"]
    if isinstance(ms, bool) or not isinstance(ms, int):
        raise ToolError(
            "INVALID_ARGUMENT",
            f"milliseconds must be an integer from 0 to {MAX_SLEEP_MS}, got {type(ms).__name__} {shortened(repr(ms))}",
        )
    if not 0 <= ms <= MAX_SLEEP_MS:
        raise ToolError("INVALID_ARGUMENT", f"milliseconds must be from 0 to {MAX_SLEEP_MS}, got {ms}")
    start = time.time_ns() // 1_000_000
    await trio.sleep(ms / 1000)  # cancellable: an abort ends it at once
    end = max(time.time_ns() // 1_000_000, start)
    return ToolResult.text(f"slept {ms} ms", {"start_unix_ms": start, "end_unix_ms": end})


TIME_TOOLS = [
    ToolSpec(
        "get_system_time",
        "The current time: unix_ms, utc (YYYY-MM-DDTHH:mm:ssZ) and local (YYYY-MM-DDTHH:mm:ss±HH:mm), one instant.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        get_system_time,
        replay_safe=True,
    ),
    ToolSpec(
        "sleep_milliseconds",
        "Wait the given number of milliseconds (0 to 2147483647); cancellable. Returns start and end unix ms.",
        {
            "type": "object",
            "properties": {"milliseconds": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS}},
            "required": ["milliseconds"],
            "additionalProperties": False,
        },
        sleep_milliseconds,
        replay_safe=True,
    ),
]
