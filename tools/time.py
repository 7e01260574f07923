"""``get_system_time`` and ``sleep_milliseconds`` (F-TOOL-9)."""

from __future__ import annotations

import calendar
import time
from datetime import datetime, timedelta
from typing import Any

import trio

from runtime.errors import shortened_json, shortened_names  # (imports nothing: no cycle)

from .base import ToolContext, ToolError, ToolResult, ToolSpec

MAX_SLEEP_MS = 2_147_483_647


def _no_extra(args: dict[str, Any], allowed: set[str], tool: str) -> None:
    extra = sorted(set(args) - allowed)
    if extra:
        raise ToolError("INVALID_ARGUMENT", f"{tool} does not take {shortened_names(extra)}")


def time_fields(unix_ns: int) -> dict[str, Any]:
    """The three renderings of one instant, or ``SYSTEM_TIME_UNREPRESENTABLE``.

    ``utc`` is the instant's Unix time read as POSIX reads it (every day 86,400 seconds), so it
    always names the instant ``unix_ms`` does, whatever the zone (glibc's ``gmtime`` under a
    ``right/`` zone counts leap seconds, 27 seconds behind since 2017).

    ``local`` is in the process's time zone with its offset to the minute (the offset in force
    at that instant, a ``right/`` zone's too): ``±HH:mm`` cannot
    carry the seconds of an offset such as a historical local mean time (Monrovia's -00:44:30
    until 1972) or a POSIX ``TZ`` that names seconds, so such an offset is rounded to its nearest
    minute (at most 23:59) and the wall-clock time is the instant's at that offset (the three
    still agree). An offset of 24 hours or more (POSIX ``TZ`` allows 24, glibc 167) and a year
    outside 0001-9999 cannot be written at all: they are refused, not rendered wrong.
    """
    unix_ms = unix_ns // 1_000_000
    seconds = unix_ms // 1000
    try:
        utc = _EPOCH + timedelta(seconds=seconds)
    except OverflowError:
        raise ToolError("SYSTEM_TIME_UNREPRESENTABLE",
                        f"the system clock (unix_ms {unix_ms}) is outside the years 0001 to 9999 "
                        "YYYY-MM-DD can write") from None
    try:
        # (under a right/ zone the C library reads a time_t as a count that includes leap
        # seconds: the instant ``seconds`` names is that count plus the leap seconds before it,
        # else the offset changes 27 seconds late; elsewhere ``leap`` is 0)
        leap = seconds - calendar.timegm(time.gmtime(seconds))
        offset = time.localtime(seconds + leap).tm_gmtoff
    except (OverflowError, OSError, ValueError):
        offset = 0  # (beyond the C library's time_t: no zone rule is known there)
    if abs(offset) >= _DAY:
        raise ToolError("SYSTEM_TIME_UNREPRESENTABLE",
                        f"the process's time zone (TZ) is {_hms(offset)} from UTC, and an offset of "
                        "24 hours or more cannot be written as ±HH:mm")
    minutes = max(-_LAST_MINUTE, min(_LAST_MINUTE, round(offset / 60)))
    try:
        local = utc + timedelta(minutes=minutes)
    except OverflowError:
        raise ToolError("SYSTEM_TIME_UNREPRESENTABLE",
                        f"the local time of unix_ms {unix_ms} is outside the years 0001 to 9999 "
                        "YYYY-MM-DD can write") from None
    hours, mins = divmod(abs(minutes), 60)
    return {
        "unix_ms": unix_ms,
        "utc": _wall(utc) + "Z",
        "local": _wall(local) + f"{'-' if minutes < 0 else '+'}{hours:02d}:{mins:02d}",
    }


_EPOCH = datetime(1970, 1, 1)
_DAY = 24 * 3600
_LAST_MINUTE = 24 * 60 - 1  # +23:59, the largest offset ±HH:mm carries


def _hms(offset: int) -> str:
    hours, rest = divmod(abs(offset), 3600)
    return f"{'-' if offset < 0 else '+'}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def _wall(d: datetime) -> str:
    """``YYYY-MM-DDTHH:mm:ss``, the year in four digits (``strftime``'s ``%Y`` writes 999 as ``999``)."""
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}"


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
            f"milliseconds must be an integer from 0 to {MAX_SLEEP_MS}, got {shortened_json(ms)}",
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
